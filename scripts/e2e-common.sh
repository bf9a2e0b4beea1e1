#!/usr/bin/env bash
# e2e-common.sh: what scripts/e2e-live.sh and scripts/e2e-real.sh share
# (sourced, not run): the preflight checks, the namespace cleanup of an
# interrupted run, and the run's directory and report under out/.

# e2e_preflight NAME TOOL...: root and every tool present, or exit 1 saying
# what is missing.
e2e_preflight() {
	local name=$1
	shift
	if [ "$(id -u)" != 0 ]; then
		echo "$name: needs root (network namespaces, veth, AF_PACKET)" >&2
		exit 1
	fi
	local tool
	for tool in "$@"; do
		command -v "$tool" >/dev/null || { echo "$name: $tool not found (make deps installs the Debian packages)" >&2; exit 1; }
	done
}

# e2e_cleanup_on_exit NS...: delete these namespaces when the script ends
# (the tests delete their own; this catches an interrupted run).
e2e_cleanup_on_exit() {
	E2E_NAMESPACES=("$@")
	trap 'for ns in "${E2E_NAMESPACES[@]}"; do ip netns del "$ns" 2>/dev/null || true; done' EXIT INT TERM
}

# e2e_report NAME HEADER BODY OUT: write OUT/report.md, the run's report:
# HEADER, a blank line, then BODY (the test's own report). Reference pages
# cite a run's figures from a copy in docs/runs/NAME.md, made by hand.
e2e_report() {
	local name=$1 header=$2 body=$3 out=$4
	{
		echo "$header"
		echo
		cat "$body"
	} >"$out/report.md"
	echo "$name: report in $out/report.md (docs/runs/$name.md is the run docs/testbed.md cites; copy the new report there to replace it)"
}

# e2e_outdir NAME: the run's directory, $OUT or the repository's out/NAME
# (emptied first; absolute, as go test runs in the package's directory).
e2e_outdir() {
	if [ -n "${OUT:-}" ]; then
		echo "$OUT"
		return
	fi
	rm -rf "$PWD/out/$1"
	echo "$PWD/out/$1"
}
