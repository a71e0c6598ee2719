#!/usr/bin/env bash
# Print the path of a tool the tests drive, installing its Debian package with apt-get
# when it is missing and we are root (as scripts/postgres.sh does for PostgreSQL).
#
#   scripts/debian-tool.sh chromium      # headless browser for the dashboard test
#   scripts/debian-tool.sh prometheus    # the real Prometheus for the rules/panels test
#
# Elsewhere it says in one line what to install and exits 1.
set -euo pipefail

say() { echo "debian-tool.sh: $*" >&2; }

case ${1:-} in
  chromium) names=(chromium chromium-browser) package=chromium ;;
  prometheus) names=(prometheus) package=prometheus ;;
  promtool) names=(promtool) package=prometheus ;;
  *) say "usage: $0 chromium|prometheus|promtool"; exit 2 ;;
esac

found() {
  local name
  for name in "${names[@]}"; do
    if command -v "$name" >/dev/null; then command -v "$name"; return 0; fi
  done
  return 1
}

if found; then exit 0; fi
if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
  say "installing $package with apt-get ..."
  apt-get update -qq >/dev/null
  # No daemon is started here: the package's own service stays off (no systemd), the
  # tests start what they need on their own ports.
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$package" >/dev/null
  found && exit 0
fi
say "$package not found; install it (Debian: apt-get install $package)"
exit 1
