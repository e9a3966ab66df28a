#!/usr/bin/env bash
# Check lua/ against the protocol with a client in another language: Python and redis-py
# only, calling the scripts by EVALSHA exactly as docs/protocol.md says, on a standalone
# redis-server and on a 3-master Redis Cluster. redis-py is
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
# The whole suite twice, both at once: on one redis-server and on a 3-master Redis
# Cluster (every EVALSHA and command routed by key). Each mode's output in turn, its
# last line `conformance (MODE): N passed, M failed`, then both summed.
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT
pids=()
for mode in standalone cluster; do
  JOBQUEUE_CONFORMANCE_MODE=$mode "$venv/bin/python" tests/conformance/test_scripts.py \
    >"$logs/$mode" 2>&1 &
  pids+=($!)
done
status=0
for pid in "${pids[@]}"; do
  wait "$pid" || status=1
done
passed=0
failed=0
for mode in standalone cluster; do
  cat "$logs/$mode"
  line=$(grep -E "^conformance \($mode\): [0-9]+ passed, [0-9]+ failed$" "$logs/$mode" || true)
  if [ -z "$line" ]; then
    echo "conformance ($mode): the suite did not finish" >&2
    status=1
    continue
  fi
  p=$(sed -E 's/.*: ([0-9]+) passed.*/\1/' <<<"$line")
  f=$(sed -E 's/.* ([0-9]+) failed$/\1/' <<<"$line")
  passed=$((passed + p))
  failed=$((failed + f))
done
echo "conformance: $passed passed, $failed failed"
[ "$failed" -eq 0 ] || status=1
exit $status
