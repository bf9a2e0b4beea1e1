#!/usr/bin/env bash
# ldsctl replay against the exact per-packet join on the same two captures:
# wall time, packets/s and peak memory of each. Usage: scripts/bench-replay.sh [scenario]
set -euo pipefail
cd "$(dirname "$0")/.."
sc=${1:-configs/scenarios/bench-1m.yaml}
dir=${LDS_BENCH_DIR:-out/bench}
mkdir -p "$dir"
bin/ldsctl gen --scenario "$sc" --sender-pcap "$dir/a.pcap" --receiver-pcap "$dir/b.pcap"
pk=$(( $(stat -c %s "$dir/a.pcap") ))
run() { # name, command...
  local name=$1; shift
  /usr/bin/time -f "%e %M" -o "$dir/$name.time" "$@" >/dev/null 2>"$dir/$name.log"
  read -r secs kb < "$dir/$name.time"
  echo "$name: ${secs}s wall, peak RSS $((kb/1024)) MiB"
}
run replay bin/ldsctl replay --quiet --sender-pcap "$dir/a.pcap" --receiver-pcap "$dir/b.pcap" --out "$dir/results.jsonl"
run join bin/ldsctl join --sender-pcap "$dir/a.pcap" --receiver-pcap "$dir/b.pcap" --out "$dir/truth.jsonl"
tail -1 "$dir/join.log"
echo "results lines: $(wc -l < "$dir/results.jsonl"), capture bytes (sender): $pk"
