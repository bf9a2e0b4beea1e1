#!/usr/bin/env bash
# make demo: generate a two-tap capture pair with known delays, replay it
# through both pipelines over real gRPC on loopback, print per-flow results,
# and score them against the exact ground truth.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${LDS_DEMO_DIR:-out/demo}
mkdir -p "$out"
echo "== 1. generating a two-tap capture pair (configs/scenarios/demo.yaml) into $out"
bin/ldsctl gen --scenario configs/scenarios/demo.yaml \
  --sender-pcap "$out/sender.pcap" --receiver-pcap "$out/receiver.pcap" --truth "$out/truth.jsonl"
echo
echo "== 2. replaying: lds-sender pipeline -> gRPC (loopback) -> lds-receiver pipeline"
bin/ldsctl replay --config configs/replay.yaml \
  --sender-pcap "$out/sender.pcap" --receiver-pcap "$out/receiver.pcap" \
  --out "$out/results.jsonl" --table 15
echo
echo "== 3. accuracy against the exact per-packet ground truth"
bin/ldsctl eval --truth "$out/truth.jsonl" --results "lds=$out/results.jsonl" --out "$out/report.md"
sed -n '/^## Mean delay/,/^## Delay distribution/p' "$out/report.md" | grep -E '^\| (bin|---|>=100 |all )' || true
echo
echo "Delay distribution from packet samples (quantile errors in units of the flow's true spread σ):"
sed -n '/^## Delay distribution/,/^## Loss/p' "$out/report.md" | grep -E '^\| (bin|---|>=100 |all )' || true
echo
echo "Files: $out/results.jsonl (results contract), $out/report.md (full report), $out/*.pcap"
