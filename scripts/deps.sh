#!/usr/bin/env bash
# Installs the Debian packages the tests use, when running as root and they
# are missing. Without root it only says what is missing: the tests that need
# those packages then skip loudly (or fail, under LDS_E2E_REQUIRED=1).
set -euo pipefail
missing=()
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "deps: not root; missing Debian packages: ${missing[*]} (tests that need them will skip)" >&2
  exit 0
fi
echo "deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# prometheus pulls in a service; policy-rc.d keeps apt from starting daemons.
# An existing policy-rc.d (the host's own policy) is left as it is; only
# one this script put there is removed.
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\n# temporary: lds scripts/deps.sh\nexit 101\n' > /usr/sbin/policy-rc.d
  chmod +x /usr/sbin/policy-rc.d
  trap 'rm -f /usr/sbin/policy-rc.d' EXIT
else
  echo "deps: keeping the existing /usr/sbin/policy-rc.d (it decides whether apt may start services)" >&2
fi
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
