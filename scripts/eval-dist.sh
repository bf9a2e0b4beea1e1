#!/usr/bin/env bash
# Per-flow delay distributions from packet samples (docs/sampling.md,
# docs/RESULTS.md §6): configs/scenarios/dist.yaml (100 kpps, 10 s, 1 s
# intervals, three delay classes with heavy tails) without and with loss
# (0.2 % uniform plus 3 % of the flows losing 5 %), replayed with
# configs/replay.yaml (4 × 4096, k = 5 multi-bank) and the default
# sample: settings, scored by ldsctl eval. Reports in out/dist/. SEED=N
# draws another trace of the same scenario (default: the scenario's 20).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${LDS_DIST_DIR:-out/dist}
mkdir -p "$out"
sed "s/^seed: 20\$/seed: ${SEED:-20}/" configs/scenarios/dist.yaml > "$out/dist.yaml"
sed 's/^heavy_loss: {fraction: 0, p: 0}$/heavy_loss: {fraction: 0.03, p: 0.05}/; s/^    loss: {kind: none}$/    loss: {kind: uniform, p: 0.002}/' \
  "$out/dist.yaml" > "$out/dist-loss.yaml"
for sc in dist loss; do
  f="$out/dist.yaml"
  [ "$sc" = loss ] && f="$out/dist-loss.yaml"
  bin/ldsctl gen --scenario "$f" --sender-pcap "$out/$sc-a.pcap" --receiver-pcap "$out/$sc-b.pcap" --truth "$out/$sc-truth.jsonl"
  bin/ldsctl replay --quiet --config configs/replay.yaml --sender-pcap "$out/$sc-a.pcap" --receiver-pcap "$out/$sc-b.pcap" \
    --out "$out/$sc.jsonl"
  bin/ldsctl eval --truth "$out/$sc-truth.jsonl" --results "lds=$out/$sc.jsonl" --out "$out/$sc.md"
  echo "== $sc"
  sed -n '/^## Delay distribution/,/^## Loss/p' "$out/$sc.md" | grep -E '^\| (bin|---|>=1000|100-999|>=100 ) .*lds'
  sed -n '/^## Loss/,/^## Baselines/p' "$out/$sc.md" | grep -E '^\| (>=1000|100-999|>=100 ) .*lds' || true
  [ "${KEEP:-0}" = 1 ] || rm -f "$out/$sc-a.pcap" "$out/$sc-b.pcap"
done
