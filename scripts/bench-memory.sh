#!/usr/bin/env bash
# Peak resident memory of `ldsctl replay` at over a million flows in one
# interval, against the bound `ldsctl memory --replay` computes from the
# same configuration (docs/PERFORMANCE.md, "Memory"). Two configurations
# (the defaults, and one with every queue at its smallest so that the bound
# is as tight as the configuration allows), two estimators. Exits 1 if a
# peak passes its bound or the trace's fullest interval has fewer than
# 1,000,000 flow records. Then a live receiver with no sender and full flow
# tables piling up (TestReceiverMemoryWaitingForSender). Knobs
# (environment): LDS_BENCH_DIR (default out/bench-memory; the 1.8 GB
# capture pair is kept there and reused), GO (default go).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${LDS_BENCH_DIR:-out/bench-memory}
command -v /usr/bin/time >/dev/null || { echo "bench-memory needs /usr/bin/time (apt-get install -y time)"; exit 1; }
mkdir -p "$dir"
if [ ! -s "$dir/b.pcap" ]; then
  bin/ldsctl gen --scenario configs/scenarios/memory-1m.yaml --sender-pcap "$dir/a.pcap" --receiver-pcap "$dir/b.pcap"
fi
pps=2400000 # the scenario: 4.8M packets in 2 s
procs=$(nproc)
fail=0
for est in paper decode; do
  for conf in default tight; do
    cfg="$dir/$conf-$est.yaml"
    printf 'sketch:\n  estimator: %s\n' "$est" > "$cfg"
    if [ "$conf" = tight ]; then
      printf 'receiver:\n  max_pending: 4\n  sealed_queue: 1\n  keep: 1\n  api_max_records: 1\n  max_sketch_bytes: 16777216\n' >> "$cfg"
    fi
    bound=$(bin/ldsctl memory --replay --procs "$procs" --pps "$pps" --receiver "$cfg" | awk '/^ldsctl replay/ { print $(NF-3) }')
    /usr/bin/time -f "%M" -o "$dir/rss" bin/ldsctl replay --quiet --config "$cfg" \
      --sender-pcap "$dir/a.pcap" --receiver-pcap "$dir/b.pcap" --out "$dir/results.jsonl" >/dev/null 2>"$dir/replay.log"
    peak=$(( $(cat "$dir/rss") * 1024 ))
    flows=$(cut -d, -f1 "$dir/results.jsonl" | sort | uniq -c | sort -rn | awk 'NR == 1 { print $1 }')
    verdict=ok
    if [ "$peak" -gt "$bound" ] || [ "$flows" -lt 1000000 ]; then verdict=FAIL; fail=1; fi
    printf '%-6s %-7s  flows in the fullest interval %d  peak RSS %5d MiB  bound %6d MiB  (%.1f%%)  %s\n' \
      "$est" "$conf" "$flows" $(( peak >> 20 )) $(( bound >> 20 )) "$(awk -v p="$peak" -v b="$bound" 'BEGIN { print 100 * p / b }')" "$verdict"
  done
done
# The live receiver's worst case replay cannot reach: 1M flows in each of
# ten intervals and no sender, full flow tables waiting until max_pending.
if ! LDS_BENCH_MEMORY=1 ${GO:-go} test -count=1 -run '^TestReceiverMemoryWaitingForSender$' -v ./internal/receiver/ > "$dir/waiting.log" 2>&1; then
  fail=1
fi
grep -E 'peak RSS|FAIL|panic' "$dir/waiting.log" || cat "$dir/waiting.log"
exit $fail
