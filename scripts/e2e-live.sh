#!/usr/bin/env bash
# e2e-live.sh runs the long live testbed (test/e2e, TestLiveLong):
# three network namespaces, the lds-linkem link emulator, lds-sender and
# lds-receiver as real processes joined by mTLS gRPC, tcpdump at both taps
# for ground truth. It writes the report to $OUT/report.md and keeps the
# run's files under $OUT (default out/e2e-live, emptied first).
#
# Needs root, ip(8) and tcpdump. Knobs (environment):
#   LDS_TESTBED_INTERVALS (default 20)  measured 1 s intervals
#   LDS_TESTBED_PPS       (default 10000, at most 25000)
#   LDS_TESTBED_FLOWS     (default 1000)
#   OUT                   directory for configs, captures, logs, results (default out/e2e-live)
set -euo pipefail
cd "$(dirname "$0")/.."

. scripts/e2e-common.sh
e2e_preflight e2e-live ip tcpdump go

prefix="ldstb-e2e-$$"
OUT=$(e2e_outdir e2e-live)
report="$OUT/test-report.md"
mkdir -p "$OUT"

e2e_cleanup_on_exit "$prefix-src" "$prefix-mid" "$prefix-dst"

echo "e2e-live: running (files in $OUT)"
set +e
LDS_E2E_LONG=1 LDS_E2E_REQUIRED=1 LDS_TESTBED_PREFIX="$prefix" LDS_TESTBED_DIR="$OUT/run" \
	LDS_TESTBED_REPORT="$report" \
	go test -count=1 -timeout 15m -run '^TestLiveLong$' -v ./test/e2e/ 2>&1 | tee "$OUT/test.log" | grep -E '^(=== RUN|--- |PASS|FAIL|ok )|live_test.go:[0-9]+: [a-z]'
status=${PIPESTATUS[0]}
set -e

if [ ! -s "$report" ]; then
	echo "e2e-live: no report written; see $OUT/test.log" >&2
	exit 1
fi

e2e_report e2e-live "\`scripts/e2e-live.sh\` on $(nproc) cores ($(uname -r)), test status: $([ "$status" = 0 ] && echo pass || echo FAIL):" "$report" "$OUT"
exit "$status"
