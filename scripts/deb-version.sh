#!/bin/sh
# deb-version.sh VERSION: the Debian package version for lds's VERSION (git
# describe): v1.2.3 -> 1.2.3, v1.2.3-4-gabc -> 1.2.3+4.gabc; without a tag,
# 0.1.0~git<commits>.<hash>, which sorts below a 0.1.0 release.
v=${1:?usage: deb-version.sh VERSION}
case "$v" in
v[0-9]*) echo "${v#v}" | sed 's/-/+/; s/-/./g' ;;
0.1.0-dev) echo 0.1.0~dev ;;
*) echo "0.1.0~git$(git rev-list --count HEAD 2>/dev/null || echo 0).$v" | sed 's/-/./g' ;;
esac
