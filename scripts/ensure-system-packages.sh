#!/usr/bin/env bash
# Make sure the Debian packages the tests (or the demo) need are installed; install the missing ones
# when running as root with apt-get. Idempotent and quick when everything is there (no apt call).
#
#   scripts/ensure-system-packages.sh postgresql bubblewrap chromium   # make test
#   scripts/ensure-system-packages.sh bubblewrap              # make demo (may fail: it then runs unconfined)
#
#   postgresql   initdb / pg_ctl for the PostgreSQL tests (each test starts its own throw-away cluster)
#   bubblewrap   bwrap, the sandbox of every local worker (docs/security.md)
#   chromium     headless Chromium and its WebDriver (Debian: chromium, chromium-driver) for the web
#                console's browser tests (tests/e2e/test_console_browser.py)
#   iproute2     ip, bridge: the multi-host test bed (scripts/ensure-hosts.sh)
#   nftables     nft: the bed's hosts (per-job network isolation, next)
#   ping         ping (Debian: iputils-ping): checks across the bed's hosts
#   images       the container-image test bed (scripts/ensure-registry.sh): the reference registry
#                (docker-registry), skopeo, umoci and mmdebstrap (a base image from Debian packages)
set -euo pipefail

present() {
  case "$1" in
    postgresql) command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 ;;
    bubblewrap) command -v bwrap >/dev/null 2>&1 ;;
    chromium) command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1 ;;
    iproute2) command -v ip >/dev/null 2>&1 && command -v bridge >/dev/null 2>&1 ;;
    nftables) command -v nft >/dev/null 2>&1 ;;
    ping) command -v ping >/dev/null 2>&1 ;;
    images) command -v docker-registry >/dev/null 2>&1 && command -v skopeo >/dev/null 2>&1 \
      && command -v umoci >/dev/null 2>&1 && command -v mmdebstrap >/dev/null 2>&1 ;;
    *) echo "ensure-system-packages: unknown package '$1' (known: postgresql, bubblewrap, chromium, iproute2, nftables, ping, images)" >&2; exit 2 ;;
  esac
}

# the Debian packages that provide each
debs() {
  case "$1" in
    chromium) echo chromium chromium-driver ;;
    ping) echo iputils-ping ;;
    images) echo docker-registry skopeo umoci mmdebstrap ;;
    *) echo "$1" ;;
  esac
}

missing=()
for pkg in "$@"; do
  present "$pkg" || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing ${missing[*]} (Debian packages)"
  # shellcheck disable=SC2046  # one word per package
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(for p in "${missing[@]}"; do debs "$p"; done) >/dev/null
  for pkg in "${missing[@]}"; do
    present "$pkg" || { echo "ensure-system-packages: $pkg still missing after apt-get install" >&2; exit 1; }
  done
else
  wanted=$(for p in "${missing[@]}"; do debs "$p"; done | tr '\n' ' ')
  echo "missing Debian package(s): ${wanted}; install them (apt-get install ${wanted}) or run this as root" >&2
  exit 1
fi
