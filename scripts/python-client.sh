#!/usr/bin/env bash
# The Python package (clients/python): installed with pip into a virtual environment
# under .tools/ (or $JOBQUEUE_TOOLS_DIR), from PyPI and this repository (its build embeds
# lua/*.lua, so it is reinstalled at every run), then its tests with pytest: the
# producer API and the worker against private redis-servers (a 3-master Cluster, ACL
# users), the conformance cases through the package's script layer, and interop with
# the Rust CLI (target/debug/jobqueue, built here when missing). Prints
# `python-client: N passed, M failed`. Extra arguments go to pytest (e.g. `-k cluster`).
set -euo pipefail
cd "$(dirname "$0")/.."

TOOLS="${JOBQUEUE_TOOLS_DIR:-$PWD/.tools}"
venv="$TOOLS/python-client-venv"
CARGO="${CARGO:-cargo}"

command -v python3 >/dev/null 2>&1 || { echo "error: the Python client's tests need python3" >&2; exit 1; }
if [ ! -x "$venv/bin/python" ]; then
  echo "python-client: creating $venv" >&2
  python3 -m venv "$venv"
fi
# A regular (not editable) install: the tests check the scripts the build embedded.
"$venv/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps ./clients/python >&2
"$venv/bin/pip" install --quiet --disable-pip-version-check "./clients/python[test]" >&2

if [ -z "${JOBQUEUE_BIN:-}" ]; then
  target="${CARGO_TARGET_DIR:-$PWD/target}"
  if [ ! -x "$target/debug/jobqueue" ]; then
    echo "python-client: building the jobqueue binary for the interop tests" >&2
    "$CARGO" build --bin jobqueue >&2
  fi
  export JOBQUEUE_BIN="$target/debug/jobqueue"
fi

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
set +e
(cd clients/python && "$venv/bin/python" -m pytest -p no:cacheprovider "$@") 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
"$venv/bin/python" - "$log" "$status" <<'PY'
import re, sys
text = open(sys.argv[1], errors="replace").read()
last = [l for l in text.splitlines() if re.search(r"\d+ (passed|failed|error)", l)]
line = last[-1] if last else ""
count = lambda word: sum(int(n) for n in re.findall(r"(\d+) " + word, line))
passed, failed = count("passed"), count("failed") + count("error")
if sys.argv[2] != "0" and failed == 0:
    failed = 1  # pytest failed outside a test (collection, set-up, no tests)
print(f"python-client: {passed} passed, {failed} failed")
PY
exit "$status"
