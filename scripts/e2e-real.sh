#!/usr/bin/env bash
# e2e-real.sh runs the long real-traffic testbed (test/e2e,
# TestRealLong): a sender host, a Linux router whose egress to the receiver
# host is an HTB bottleneck of 20 Mbit/s, real TCP (iperf3, cubic), UDP,
# ping and curl; lds-sender at the router's ingress and lds-receiver at the
# receiver host's ingress over mTLS, tcpdump at both taps joined per packet
# as the truth. A congested run (400-packet FIFO) with two daemon pairs side
# by side (interval 2s + max_delay 900ms, and the defaults), then a
# deep-queue run (1450-packet FIFO, delays up to ~0.9 s; interval 3s +
# max_delay 1400ms, and the defaults), then a low-delay run (50-packet
# FIFO, rate-held TCP) at the defaults. It writes the report to
# $OUT/report.md and keeps the run's files under $OUT (default
# out/e2e-real, emptied first).
#
# Needs root, ip, tc, tcpdump, ethtool, iperf3, curl, ping (make deps).
# Knobs (environment):
#   LDS_REAL_SECONDS (default 120)  traffic per run
#   OUT                             directory for configs, captures, logs, results (default out/e2e-real)
set -euo pipefail
cd "$(dirname "$0")/.."

. scripts/e2e-common.sh
e2e_preflight e2e-real ip tc tcpdump ethtool iperf3 curl ping go

prefix="ldsrl-e2e-$$"
OUT=$(e2e_outdir e2e-real)
report="$OUT/test-report.md"
mkdir -p "$OUT"
: >"$report"

e2e_cleanup_on_exit "$prefix-snd" "$prefix-rtr" "$prefix-rcv"

secs=${LDS_REAL_SECONDS:-120}
echo "e2e-real: running, ${secs}s of traffic per run (files in $OUT)"
set +e
LDS_E2E_REAL_LONG=1 LDS_E2E_REQUIRED=1 LDS_REAL_SECONDS="$secs" LDS_REAL_PREFIX="$prefix" LDS_REAL_DIR="$OUT/run" \
	LDS_TESTBED_REPORT="$report" \
	go test -count=1 -timeout 30m -run '^TestRealLong$' -v ./test/e2e/ 2>&1 | tee "$OUT/test.log" | grep -E '^(=== RUN|--- |PASS|FAIL|ok )|real_test.go:[0-9]+: [a-zA-Z]'
status=${PIPESTATUS[0]}
set -e

if [ ! -s "$report" ]; then
	echo "e2e-real: no report written; see $OUT/test.log" >&2
	exit 1
fi

e2e_report e2e-real "\`LDS_REAL_SECONDS=$secs make e2e-real\` on $(nproc) cores ($(uname -r)), test status: $([ "$status" = 0 ] && echo pass || echo FAIL):" "$report" "$OUT"
exit "$status"
