#!/usr/bin/env bash
# Make sure a PostgreSQL server (initdb, pg_ctl) is installed for the PostgreSQL tests.
# Tests start their own throw-away cluster on 127.0.0.1; nothing system-wide is started here.
set -euo pipefail
if command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "installing PostgreSQL (Debian package) for the tests"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
else
  echo "PostgreSQL is not installed and cannot be installed here: install the 'postgresql' package" >&2
  exit 1
fi
