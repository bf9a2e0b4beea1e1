#!/usr/bin/env bash
# ldsctl replay against the exact per-packet join on the same two captures:
# wall time and peak memory of each, in interleaved rounds (paper, decode,
# join, then again), because a shared machine's speed drifts over minutes
# and replay (two cores) feels a neighbour more than the join (one core).
# Prints every round, then min / median / max per tool and the median
# ratios. Usage: scripts/bench-replay.sh [scenario]
# Knobs (environment): ROUNDS (default 7), LDS_BENCH_DIR (default out/bench).
set -euo pipefail
cd "$(dirname "$0")/.."
sc=${1:-configs/scenarios/bench-1m.yaml}
dir=${LDS_BENCH_DIR:-out/bench}
rounds=${ROUNDS:-7}
mkdir -p "$dir"
bin/ldsctl gen --scenario "$sc" --sender-pcap "$dir/a.pcap" --receiver-pcap "$dir/b.pcap"
pk=$(stat -c %s "$dir/a.pcap")
# run NAME CMD...: one timed run; appends "NAME ms KiB" to $dir/rounds.txt.
run() {
  local name=$1; shift
  local t0 t1
  t0=$(date +%s%N)
  /usr/bin/time -f "%M" -o "$dir/$name.rss" "$@" >/dev/null 2>"$dir/$name.log"
  t1=$(date +%s%N)
  echo "$name $(( (t1 - t0) / 1000000 )) $(cat "$dir/$name.rss")" | tee -a "$dir/rounds.txt"
}
: > "$dir/rounds.txt"
for r in $(seq 1 "$rounds"); do
  echo "round $r of $rounds (tool, wall ms, peak RSS KiB):"
  run paper bin/ldsctl replay --quiet --estimator paper --sender-pcap "$dir/a.pcap" --receiver-pcap "$dir/b.pcap" --out "$dir/results-paper.jsonl"
  run decode bin/ldsctl replay --quiet --sender-pcap "$dir/a.pcap" --receiver-pcap "$dir/b.pcap" --out "$dir/results.jsonl"
  run join bin/ldsctl join --sender-pcap "$dir/a.pcap" --receiver-pcap "$dir/b.pcap" --out "$dir/truth.jsonl"
done
echo
awk '
  { ms[$1] = ms[$1] " " $2; rss[$1] = ($3 > rss[$1] ? $3 : rss[$1]) }
  function med(list,   a, n, i, j, t) {
    n = split(list, a, " ")
    for (i = 2; i <= n; i++) { t = a[i] + 0; for (j = i - 1; j >= 1 && a[j] + 0 > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
    lo = a[1]; hi = a[n]
    return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  END {
    for (k in ms) { m[k] = med(ms[k]); printf "%-6s wall ms min %d median %.1f max %d, peak RSS %d MiB\n", k, lo, m[k], hi, rss[k] / 1024 }
    printf "join / replay, median against median: paper %.1fx, decode %.1fx\n", m["join"] / m["paper"], m["join"] / m["decode"]
  }' "$dir/rounds.txt"
tail -1 "$dir/join.log"
echo "results lines: $(wc -l < "$dir/results.jsonl"), capture bytes (sender): $pk"
