#!/usr/bin/env bash
# Check lua/ against the protocol with a client in another language: Python and redis-py
# only, calling the scripts by EVALSHA exactly as docs/protocol.md says. redis-py is
# installed on first use into a virtual environment under .tools/ (ignored by git).
set -euo pipefail
cd "$(dirname "$0")/.."

TOOLS="${JOBQUEUE_TOOLS_DIR:-$PWD/.tools}"
REDIS_PY_VERSION=6.4.0
venv="$TOOLS/conformance-venv-$REDIS_PY_VERSION"

command -v python3 >/dev/null 2>&1 || { echo "error: the conformance check needs python3" >&2; exit 1; }
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import redis' 2>/dev/null; then
  echo "conformance: installing redis-py $REDIS_PY_VERSION into $venv" >&2
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "redis==$REDIS_PY_VERSION" >&2
fi
exec "$venv/bin/python" tests/conformance/test_scripts.py
