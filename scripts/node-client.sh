#!/usr/bin/env bash
# The Node.js package (clients/node): `npm ci` (the pinned package-lock.json), build (the
# scripts embedded from lua/), its tests (node:test, on private redis-servers and a
# 3-master Cluster, beside the jobqueue binary), then the conformance cases through its
# script-calling layer. Prints `node-client: N passed, M failed` last.
set -euo pipefail
cd "$(dirname "$0")/.."

for tool in node npm; do
  command -v "$tool" >/dev/null 2>&1 || { echo "error: the Node client's tests need $tool on PATH (Node.js 18 or newer with npm)" >&2; exit 1; }
done
# The interop tests run the repository's jobqueue binary (debug build).
target="${CARGO_TARGET_DIR:-$PWD/target}"
if [ -z "${JOBQUEUE_BIN:-}" ]; then
  [ -x "$target/debug/jobqueue" ] || ${CARGO:-cargo} build --bin jobqueue
  export JOBQUEUE_BIN="$target/debug/jobqueue"
fi

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
set +e
(
  set -e
  cd clients/node
  npm ci --silent --no-audit --no-fund
  npm run --silent build
  npm test
) 2>&1 | tee "$log"
unit=${PIPESTATUS[0]}
./scripts/conformance-node.sh 2>&1 | tee -a "$log"
conf=${PIPESTATUS[0]}
set -e

passed=$(sed -n 's/^# pass \([0-9]*\)$/\1/p' "$log" | tail -1)
failed=$(sed -n 's/^# fail \([0-9]*\)$/\1/p' "$log" | tail -1)
cpass=$(sed -n 's/^conformance-node: \([0-9]*\) passed, \([0-9]*\) failed$/\1/p' "$log" | tail -1)
cfail=$(sed -n 's/^conformance-node: \([0-9]*\) passed, \([0-9]*\) failed$/\2/p' "$log" | tail -1)
passed=$(( ${passed:-0} + ${cpass:-0} ))
failed=$(( ${failed:-0} + ${cfail:-0} ))
if { [ "$unit" -ne 0 ] || [ "$conf" -ne 0 ]; } && [ "$failed" -eq 0 ]; then
  failed=1  # a step failed before or outside a test runner
fi
echo "node-client: $passed passed, $failed failed"
[ "$unit" -eq 0 ] && [ "$conf" -eq 0 ]
