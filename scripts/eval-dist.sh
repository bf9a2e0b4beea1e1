#!/usr/bin/env bash
# Per-flow delay distributions from packet samples (docs/sampling.md,
# docs/RESULTS.md §6): configs/scenarios/dist.yaml (100 kpps, 10 s, 1 s
# intervals, three delay classes with heavy tails) without and with loss
# (0.2 % uniform plus 3 % of the flows losing 5 %), replayed with
# configs/replay.yaml (4 × 4096, k = 5 multi-bank) and the default
# sample: settings, scored by ldsctl eval. Reports in out/dist/. The loss
# report also scores the records' loss_bound and loss_point as if each were
# the published loss (runs "loss_bound", "loss_point"; needs jq).
# LDS_DIST_SEED, LDS_DIST_FLOWS and LDS_DIST_PPS override the scenario's
# seed, flows and rate_pps (another trace of the same shape).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${LDS_DIST_DIR:-out/dist}
mkdir -p "$out"
command -v jq >/dev/null || { echo "eval-dist.sh needs jq (apt-get install jq)" >&2; exit 1; }
sed "s/^seed: .*/seed: ${LDS_DIST_SEED:-20}/; s/^flows: .*/flows: ${LDS_DIST_FLOWS:-40000}/; s/^rate_pps: .*/rate_pps: ${LDS_DIST_PPS:-100000}/" \
  configs/scenarios/dist.yaml > "$out/dist.yaml"
sed 's/^heavy_loss: {fraction: 0, p: 0}$/heavy_loss: {fraction: 0.03, p: 0.05}/; s/^    loss: {kind: none}$/    loss: {kind: uniform, p: 0.002}/' \
  "$out/dist.yaml" > "$out/dist-loss.yaml"
for sc in dist loss; do
  f="$out/dist.yaml"
  [ "$sc" = loss ] && f="$out/dist-loss.yaml"
  bin/ldsctl gen --scenario "$f" --sender-pcap "$out/$sc-a.pcap" --receiver-pcap "$out/$sc-b.pcap" --truth "$out/$sc-truth.jsonl"
  bin/ldsctl replay --quiet --config configs/replay.yaml --sender-pcap "$out/$sc-a.pcap" --receiver-pcap "$out/$sc-b.pcap" \
    --out "$out/$sc.jsonl"
  runs=(--results "lds=$out/$sc.jsonl")
  if [ "$sc" = loss ]; then
    for field in loss_bound loss_point; do
      jq -c ".loss = (.$field // .loss)" "$out/$sc.jsonl" > "$out/$sc-$field.jsonl"
      runs+=(--results "$field=$out/$sc-$field.jsonl")
    done
  fi
  bin/ldsctl eval --truth "$out/$sc-truth.jsonl" "${runs[@]}" --out "$out/$sc.md"
  echo "== $sc"
  sed -n '/^## Delay distribution/,/^## Loss/p' "$out/$sc.md" | grep -E '^\| (bin|---|>=1000|100-999|>=100 ) .*lds'
  sed -n '/^## Loss/,/^## Baselines/p' "$out/$sc.md" | grep -E '^\| (>=1000|100-999|10-99|>=100) \| (lds|loss_)' || true
  [ "${KEEP:-0}" = 1 ] || rm -f "$out/$sc-a.pcap" "$out/$sc-b.pcap"
done
