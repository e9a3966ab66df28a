#!/usr/bin/env bash
# Make sure valgrind and callgrind_control are on PATH: `make bench-instructions` counts
# the instructions redis-server executes per job with callgrind. Installs Debian's
# valgrind with apt-get when run as root.
set -euo pipefail

if command -v valgrind >/dev/null 2>&1 && command -v callgrind_control >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "valgrind not found: installing it with apt-get" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends valgrind >&2
  command -v callgrind_control >/dev/null 2>&1 && exit 0
fi
cat >&2 <<'MSG'
error: valgrind (with callgrind_control) is needed and was not found on PATH.
Install it, then run the command again:
  Debian/Ubuntu:  sudo apt-get install valgrind
  or set VALGRIND=/path/to/valgrind and CALLGRIND_CONTROL=/path/to/callgrind_control
MSG
exit 1
