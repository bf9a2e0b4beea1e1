#!/usr/bin/env bash
# bench-live.sh measures live capture on a real kernel link:
# a blaster pushes minimal UDP frames into a veth between two network
# namespaces as fast as it can, and at the other end tcpdump -w /dev/null
# and the real lds-sender (workers 1 and 2) capture with the same ring
# size, alone and at the same time. It compares the kernel's own drop
# counters (tcpdump's "dropped by kernel", lds-sender's
# lds_capture_drops_total{reason="kernel"}) and CPU per packet
# (test/e2e/perf.go, TestLivePerfBench).
#
# It writes the report to $OUT/report.md and keeps the run's files under
# $OUT (default out/bench-live, emptied first); docs/testbed.md ("Live
# capture performance") cites a run kept in docs/runs/bench-live.md.
#
# Needs root, ip(8), tcpdump and go. Knobs (environment):
#   LDS_PERF_SECONDS (default 5)   blast length per trial (30 for lds-sender's CPU in steady state:
#                    shorter blasts measure its warm-up, docs/testbed.md "How it measures")
#   LDS_PERF_REPS    (default 3)   repetitions of every trial
#   RINGS            (default "1048576x64 262144x4")  block_size x num_blocks per socket
#                    (tcpdump gets -B of the same bytes; libpcap always builds 256 KiB
#                    blocks, lds-sender splits a ring of < 32 blocks: capture.RingGeometry)
#   THREADS          (default "1 2")   blaster threads (1 leaves a core to the captures)
#   LDS_PERF_MAX_DELAY (default: lds' own, 1s)  max_delay of both daemons, e.g. 50ms
#   LDS_PERF_RX_TAP  (default rx0)     what lds-receiver taps: rx0, a silent veth (its hold
#                    windows stay at 50 ms), or lo (the gRPC stream: windows grow to
#                    max_delay, the sender's worst case); test/e2e/perf.go, PerfOptions.RxTap
#   LDS_PERF_LOST_CAPACITY (default: lds' own)  lost.capacity of both daemons; 0 turns the
#                    lost-packet table off (its cost apart from the rest)
#   LDS_PERF_PIN     (default 0:1 on 2 or more cores, else off)  BLASTER_CPUS:TOOL_CPUS: the
#                    blaster threads (on whose CPU the veth fills the rings) and lds-receiver
#                    on the first list, tcpdump and lds-sender on the second (taskset), so that
#                    every capture reads its ring from another core, run after run; off: the
#                    scheduler places them, and a capture's CPU a packet moves with where it
#                    lands (on the blaster's core it reads warm frames)
#   OUT                            directory for configs, logs, reports (default out/bench-live)
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
	echo "bench-live: needs root (network namespaces, veth, AF_PACKET)" >&2
	exit 1
fi
if [ -z "${LDS_PERF_PIN+set}" ]; then
	if [ "$(nproc)" -ge 2 ]; then LDS_PERF_PIN=0:1; else LDS_PERF_PIN=off; fi
fi
export LDS_PERF_PIN
tools=(ip tcpdump go)
[ "$LDS_PERF_PIN" = off ] || tools+=(taskset)
for tool in "${tools[@]}"; do
	command -v "$tool" >/dev/null || { echo "bench-live: $tool not found (make deps installs iproute2 and tcpdump; taskset is util-linux's)" >&2; exit 1; }
done

prefix="ldsperf-$$"
if [ -z "${OUT:-}" ]; then
	OUT=$PWD/out/bench-live
	rm -rf "$OUT"
fi
RINGS=${RINGS:-"1048576x64 262144x4"}
THREADS=${THREADS:-"1 2"}
mkdir -p "$OUT"

# The test deletes its namespaces itself; this catches an interrupted run.
cleanup() {
	for ns in "$prefix-a" "$prefix-b"; do
		ip netns del "$ns" 2>/dev/null || true
	done
}
trap cleanup EXIT INT TERM

report="$OUT/report.md"
{
	echo "\`make bench-live\` on $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r)), load average at start $(cut -d' ' -f1-3 /proc/loadavg) (the machine is shared), $(tcpdump --version 2>&1 | head -2 | tr '\n' ' ' | sed 's/ $//'):"
	echo
	echo '```'
	echo "scripts/bench-live.sh   # LDS_PERF_SECONDS=${LDS_PERF_SECONDS:-5} LDS_PERF_REPS=${LDS_PERF_REPS:-3} RINGS=\"$RINGS\" THREADS=\"$THREADS\" LDS_PERF_PIN=$LDS_PERF_PIN${LDS_PERF_MAX_DELAY:+ LDS_PERF_MAX_DELAY=$LDS_PERF_MAX_DELAY}${LDS_PERF_RX_TAP:+ LDS_PERF_RX_TAP=$LDS_PERF_RX_TAP}${LDS_PERF_LOST_CAPACITY:+ LDS_PERF_LOST_CAPACITY=$LDS_PERF_LOST_CAPACITY}"
	echo '```'
} >"$report"

status=0
n=0
for ring in $RINGS; do
	bs=${ring%x*}
	nb=${ring#*x}
	for th in $THREADS; do
		n=$((n + 1))
		part="$OUT/part-$n.md"
		echo "bench-live: ring ${bs}x${nb}, ${th} blaster thread(s) (files in $OUT/run-$n)"
		set +e
		LDS_PERF_BENCH=1 LDS_E2E_REQUIRED=1 LDS_PERF_PREFIX="$prefix" LDS_PERF_DIR="$OUT/run-$n" \
			LDS_PERF_REPORT="$part" LDS_PERF_BLOCK_SIZE="$bs" LDS_PERF_NUM_BLOCKS="$nb" LDS_PERF_THREADS="$th" \
			go test -count=1 -timeout 30m -run '^TestLivePerfBench$' -v ./test/e2e/ >"$OUT/test-$n.log" 2>&1
		st=$?
		set -e
		grep -E '^(--- |PASS|FAIL|ok )' "$OUT/test-$n.log" || true
		if [ "$st" != 0 ] || [ ! -s "$part" ]; then
			echo "bench-live: run $n failed (status $st); see $OUT/test-$n.log" >&2
			status=1
			continue
		fi
		{
			echo
			echo "#### Ring $((bs * nb / 1024)) KiB per socket ($nb × $((bs / 1024)) KiB), $th blaster thread(s)"
			echo
			cat "$part"
		} >>"$report"
	done
done

cat "$report"
echo "bench-live: report in $report (docs/runs/bench-live.md is the run docs/testbed.md cites; copy the new report there to replace it)"
exit "$status"
