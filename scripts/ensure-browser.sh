#!/usr/bin/env bash
# Make sure the console's browser tests (tests/console.rs) can run: Debian's headless
# Chromium (and its driver) at /usr/bin/chromium, and playwright-core (pinned in
# tests/console/package-lock.json) under tests/console/node_modules. Installs what is
# missing: the Debian packages with apt-get when run as root, playwright-core with npm ci
# (which downloads no browser of its own: the Chromium is Debian's).
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
chromium="${CHROMIUM:-/usr/bin/chromium}"

if [ ! -x "$chromium" ] || ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "chromium, node or npm not found: installing them with apt-get" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    pkgs="chromium chromium-driver"
    command -v node >/dev/null 2>&1 || pkgs="$pkgs nodejs"
    command -v npm >/dev/null 2>&1 || pkgs="$pkgs npm"
    # shellcheck disable=SC2086
    apt-get install -y -qq --no-install-recommends $pkgs >&2
  fi
fi
if [ ! -x "$chromium" ]; then
  cat >&2 <<MSG
error: the console's browser tests need Chromium at $chromium (or set CHROMIUM=/path).
  Debian/Ubuntu:  sudo apt-get install chromium chromium-driver
MSG
  exit 1
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "error: the console's browser tests need node and npm (apt-get install nodejs npm)" >&2
  exit 1
fi

dir="$root/tests/console"
# Tests running at once may all call this: one installs, the others wait for it.
if command -v flock >/dev/null 2>&1; then
  exec 9>"$dir/.install.lock"
  flock 9
fi
want="$(node -e 'console.log(require(process.argv[1]).packages["node_modules/playwright-core"].version)' "$dir/package-lock.json")"
have=""
if [ -f "$dir/node_modules/playwright-core/package.json" ]; then
  have="$(node -e 'console.log(require(process.argv[1]).version)' "$dir/node_modules/playwright-core/package.json")"
fi
if [ "$have" != "$want" ]; then
  echo "installing playwright-core $want into tests/console/node_modules" >&2
  (cd "$dir" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error >&2)
fi
