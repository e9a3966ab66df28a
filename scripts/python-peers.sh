#!/usr/bin/env bash
# `make bench-peers`, the Python side: jobqueue's Python worker beside arq (pinned below,
# from PyPI), each installed into a virtual environment of its own under .tools/ (or
# $JOBQUEUE_TOOLS_DIR; arq pins redis-py below 6), then benches/peers/python_peers.py on
# a private redis-server. Options as PEERS_ARGS: `--jobs N`, `--quick`.
set -euo pipefail
cd "$(dirname "$0")/.."

TOOLS="${JOBQUEUE_TOOLS_DIR:-$PWD/.tools}"
ARQ_VERSION=0.28.0
arq_venv="$TOOLS/peers-arq-$ARQ_VERSION"
jq_venv="$TOOLS/peers-jobqueue-python"

command -v python3 >/dev/null 2>&1 || { echo "error: make bench-peers needs python3" >&2; exit 1; }
if [ ! -x "$arq_venv/bin/python" ] || ! "$arq_venv/bin/python" -c 'import arq' 2>/dev/null; then
  echo "bench-peers: installing arq $ARQ_VERSION into $arq_venv" >&2
  rm -rf "$arq_venv"
  python3 -m venv "$arq_venv"
  "$arq_venv/bin/pip" install --quiet --disable-pip-version-check "arq==$ARQ_VERSION" >&2
fi
[ -x "$jq_venv/bin/python" ] || python3 -m venv "$jq_venv"
# hiredis on both sides: arq depends on redis[hiredis]
"$jq_venv/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps ./clients/python >&2
"$jq_venv/bin/pip" install --quiet --disable-pip-version-check "./clients/python[fast]" >&2
exec python3 benches/peers/python_peers.py run --jobqueue-python "$jq_venv/bin/python" --arq-python "$arq_venv/bin/python" "$@"
