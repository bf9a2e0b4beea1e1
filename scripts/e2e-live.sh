#!/usr/bin/env bash
# e2e-live.sh runs the long live testbed (test/e2e, TestLiveLong):
# three network namespaces, the lds-linkem link emulator, lds-sender and
# lds-receiver as real processes joined by mTLS gRPC, tcpdump at both taps
# for ground truth. It writes the report into docs/testbed.md between the
# "e2e-live report" markers (and keeps the run's files under $OUT).
#
# Needs root, ip(8) and tcpdump. Knobs (environment):
#   LDS_TESTBED_INTERVALS (default 20)  measured 1 s intervals
#   LDS_TESTBED_PPS       (default 10000, at most 25000)
#   LDS_TESTBED_FLOWS     (default 1000)
#   OUT                   directory for configs, captures, logs, results
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
	echo "e2e-live: needs root (network namespaces, veth, AF_PACKET)" >&2
	exit 1
fi
for tool in ip tcpdump go; do
	command -v "$tool" >/dev/null || { echo "e2e-live: $tool not found (make deps installs iproute2 and tcpdump)" >&2; exit 1; }
done

prefix="ldstb-e2e-$$"
OUT=${OUT:-$(mktemp -d /tmp/lds-e2e-live.XXXXXX)}
report="$OUT/report.md"
mkdir -p "$OUT"

# The test deletes its namespaces itself; this catches an interrupted run.
cleanup() {
	for ns in "$prefix-src" "$prefix-mid" "$prefix-dst"; do
		ip netns del "$ns" 2>/dev/null || true
	done
}
trap cleanup EXIT INT TERM

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

doc=docs/testbed.md
begin='<!-- e2e-live report: begin -->'
end='<!-- e2e-live report: end -->'
if ! grep -qF "$begin" "$doc"; then
	printf '\n## Latest long run\n\n%s\n%s\n' "$begin" "$end" >>"$doc"
fi
{
	echo "Run $(date -u +%Y-%m-%dT%H:%MZ) on $(nproc) cores ($(uname -r)), \`scripts/e2e-live.sh\` (test status: $([ "$status" = 0 ] && echo pass || echo FAIL)):"
	echo
	# Demote the report's headings so they nest under this section.
	sed -e 's/^# /#### /' -e 's/^## /#### /' -e 's/^### /#### /' "$report"
} >"$OUT/section.md"
awk -v b="$begin" -v e="$end" -v f="$OUT/section.md" '
	$0 == b { print; while ((getline l < f) > 0) print l; skip = 1; next }
	$0 == e { skip = 0 }
	!skip { print }
' "$doc" >"$OUT/testbed.md.new"
mv "$OUT/testbed.md.new" "$doc"
echo "e2e-live: report written into $doc (test exit status $status)"
exit "$status"
