#!/usr/bin/env bash
# The conformance cases (tests/conformance/) with every Q.ev call sent through the Node
# package's script-calling layer (clients/node, its bridge: dist/src/bridge.js) instead of
# redis-py's EVALSHA. Needs the package built (scripts/node-client.sh builds it). Prints
# `conformance-node: N passed, M failed` last.
set -euo pipefail
cd "$(dirname "$0")/.."

bridge="$PWD/clients/node/dist/src/bridge.js"
[ -f "$bridge" ] || { echo "error: $bridge is missing: build clients/node first (npm run build)" >&2; exit 1; }
TOOLS="${JOBQUEUE_TOOLS_DIR:-$PWD/.tools}"
# The venv scripts/conformance.sh makes (its pinned redis-py).
version="$(sed -n 's/^REDIS_PY_VERSION=//p' scripts/conformance.sh)"
venv="$TOOLS/conformance-venv-$version"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import redis' 2>/dev/null; then
  # scripts/conformance.sh installs redis-py into the venv on first use.
  ./scripts/conformance.sh >/dev/null 2>&1 || true
fi
set +e
JOBQUEUE_CONFORMANCE_MODE=standalone JOBQUEUE_CONFORMANCE_NODE="$bridge" \
  "$venv/bin/python" tests/conformance/test_scripts.py \
  | sed -u -E 's/^conformance( \(standalone\))?: /conformance-node: /'
status=${PIPESTATUS[0]}
exit "$status"
