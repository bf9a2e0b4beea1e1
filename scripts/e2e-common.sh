#!/usr/bin/env bash
# e2e-common.sh: what scripts/e2e-live.sh and scripts/e2e-real.sh share
# (sourced, not run): the preflight checks, the namespace cleanup of an
# interrupted run, and the splice of a run's report into docs/testbed.md.

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

# e2e_splice NAME HEADING HEADER REPORT OUT: replace the text between the
# "NAME report" markers of docs/testbed.md with HEADER, a blank line and
# REPORT (its headings demoted to ####), appending the markers under
# HEADING when they are missing.
e2e_splice() {
	local name=$1 heading=$2 header=$3 report=$4 out=$5
	local doc=docs/testbed.md
	local begin="<!-- $name report: begin -->" end="<!-- $name report: end -->"
	if ! grep -qF "$begin" "$doc"; then
		printf '\n%s\n\n%s\n%s\n' "$heading" "$begin" "$end" >>"$doc"
	fi
	{
		echo "$header"
		echo
		sed -e 's/^#\{1,3\} /#### /' "$report"
	} >"$out/section.md"
	awk -v b="$begin" -v e="$end" -v f="$out/section.md" '
		$0 == b { print; while ((getline l < f) > 0) print l; skip = 1; next }
		$0 == e { skip = 0 }
		!skip { print }
	' "$doc" >"$out/testbed.md.new"
	mv "$out/testbed.md.new" "$doc"
}
