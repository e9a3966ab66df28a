#!/usr/bin/env bash
# Make sure redis-server (6.2 or newer) is on PATH: the tests and the demo start their
# own private servers with it. Installs it with apt-get when run as root.
set -euo pipefail

if command -v redis-server >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "redis-server not found: installing it with apt-get" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends redis-server redis-tools openssl >&2
  # The package may start a system-wide server; the tests never use it.
  command -v redis-server >/dev/null 2>&1 && exit 0
fi
cat >&2 <<'MSG'
error: redis-server (6.2 or newer) is needed and was not found on PATH.
Install it, then run the command again:
  Debian/Ubuntu:  sudo apt-get install redis-server
  macOS:          brew install redis
  or set REDIS_SERVER=/path/to/redis-server
MSG
exit 1
