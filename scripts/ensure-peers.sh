#!/usr/bin/env bash
# Install what `make bench-peers` runs beside jobqueue: BullMQ at the version pinned in
# benches/peers/package.json and package-lock.json, with `npm ci` into
# benches/peers/node_modules (ignored by git). Does nothing when that version is there.
set -euo pipefail
cd "$(dirname "$0")/../benches/peers"

for tool in node npm; do
  command -v "$tool" >/dev/null 2>&1 || {
    echo "error: make bench-peers needs $tool on PATH (Node.js 18 or newer with npm)" >&2
    exit 1
  }
done
major="$(node -p 'process.versions.node.split(".")[0]')"
if [ "$major" -lt 18 ]; then
  echo "error: make bench-peers needs Node.js 18 or newer, found $(node --version)" >&2
  exit 1
fi
pinned="$(node -p 'require("./package-lock.json").packages["node_modules/bullmq"].version')"
installed="$(node -p 'try { require("./node_modules/bullmq/package.json").version } catch { "" }')"
if [ "$installed" != "$pinned" ]; then
  echo "bench-peers: installing BullMQ $pinned (npm ci) into $PWD/node_modules" >&2
  npm ci --silent --no-audit --no-fund >&2
fi

# The Node.js package's worker runs beside BullMQ's: build clients/node when it is not built.
cd ../../clients/node
if [ ! -f dist/src/index.js ] || [ ! -d node_modules/ioredis ]; then
  echo "bench-peers: building the Node package (npm ci, npm run build) in $PWD" >&2
  npm ci --silent --no-audit --no-fund >&2
  npm run --silent build >&2
fi
