#!/usr/bin/env bash
# Bytes the sender ships per interval against per-packet export (12 B a
# packet) at 1 Mpps, for several interval lengths, each with the sketch
# sized at the paper's load (2 flows per counter, 4 rows) for the flows an
# interval of that length holds, and the share of the consistent packet
# samples (docs/sampling.md) against a run without them. Usage:
# scripts/bench-wire.sh (needs bin/; INTERVALS="1" for the 1 s row only).
# The trace is configs/scenarios/wire-1m.yaml (10 s, 10M packets, ~2.9 GB
# of pcap in out/wire, deleted afterwards unless KEEP=1; REUSE=1 replays a
# kept trace). MAX_DELAY=50ms sets max_delay (default: the daemons'
# default, 1s, whose hold windows follow the delays present); LDSCTL
# names another ldsctl binary (another build, to compare). SCENARIO names
# another trace (configs/scenarios/wire-1m-loss.yaml: 0.1 % loss). The
# last column is the lost-packet table's share (lost.capacity, default
# 1000) against a run with lost.capacity: 0.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${LDS_WIRE_DIR:-out/wire}
ldsctl=${LDSCTL:-bin/ldsctl}
mkdir -p "$dir"
if [ "${REUSE:-0}" != 1 ] || [ ! -f "$dir/a.pcap" ]; then
  bin/ldsctl gen --scenario "${SCENARIO:-configs/scenarios/wire-1m.yaml}" --sender-pcap "$dir/a.pcap" \
    --receiver-pcap "$dir/b.pcap" --truth "$dir/truth.jsonl" >/dev/null
fi
pps=1000000
echo "| interval | flows an interval (truth) | sketch | bytes shipped an interval | per-packet export (12 B/pkt) | ratio | of which packet samples (default sample:) | of which lost-packet table (default lost:) |"
echo "|---|---:|---|---:|---:|---:|---:|---:|"
for T in ${INTERVALS:-1 2 5 10}; do
  # Distinct flows per interval of length T, from the truth's 1 s records.
  flows=$(jq -r '"\(.interval) \(.src) \(.dst) \(.sport) \(.dport) \(.proto)"' "$dir/truth.jsonl" |
    awk -v T="$T" '{iv=int($1/T); k=iv" "$2" "$3" "$4" "$5" "$6; if(!(k in s)){s[k]=1; c[iv]++}}
      END{n=0; t=0; for(i in c){n++; t+=c[i]}; printf "%d", t/n}')
  cols=$(( (flows + 7) / 8 ))
  cat > "$dir/cfg-${T}s.yaml" <<CFG
interval: ${T}s
${MAX_DELAY:+max_delay: $MAX_DELAY}
sketch:
  rows: 4
  columns: $cols
  vlda: 1
  sampling: [1, 1, 1, 1]
  max_flows: 1048576
CFG
  # The same without packet samples: the samples' share of the bytes.
  { cat "$dir/cfg-${T}s.yaml"; printf 'sample:\n  max_per_interval: 0\n  link_one_in: 0\n'; } > "$dir/cfg-${T}s-nosample.yaml"
  { cat "$dir/cfg-${T}s.yaml"; printf 'lost:\n  capacity: 0\n'; } > "$dir/cfg-${T}s-nolost.yaml"
  shipped() { # config -> bytes an interval
    local line bytes n
    line=$($ldsctl replay --quiet --config "$1" --sender-pcap "$dir/a.pcap" \
      --receiver-pcap "$dir/b.pcap" --out "$dir/r-${T}s.jsonl" 2>&1 | tail -1)
    bytes=$(sed -n 's/.* \([0-9]*\) sketch bytes shipped.*/\1/p' <<<"$line")
    n=$(sed -n 's/.*map\[matched:\([0-9]*\)\].*/\1/p' <<<"$line")
    echo $(( bytes / n ))
  }
  per=$(shipped "$dir/cfg-${T}s.yaml")
  base=$(shipped "$dir/cfg-${T}s-nosample.yaml")
  nolost=$(shipped "$dir/cfg-${T}s-nolost.yaml")
  exp=$(( 12 * pps * T ))
  echo "| ${T} s | $flows | 4 × $cols | $per | $exp | 1/$(( exp / per )) | $(( per - base )) (+$(( 100 * (per - base) / base )) %) | $(( per - nolost )) (+$(( 1000 * (per - nolost) / nolost / 10 )).$(( 1000 * (per - nolost) / nolost % 10 )) %) |"
done
[ "${KEEP:-0}" = 1 ] || rm -f "$dir/a.pcap" "$dir/b.pcap"
