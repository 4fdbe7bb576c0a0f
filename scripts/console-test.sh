#!/usr/bin/env bash
# Browser tests of the web console (tests/console/console.test.mjs): the real `chime dev`
# binary, headless Chromium from Debian's `chromium` package (installed here when missing),
# driven by playwright-core from npm (pinned in tests/console/package-lock.json).
# Screenshots of every page are written to target/console-screenshots/.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v chromium >/dev/null 2>&1; then
  echo "console-test: installing Debian's chromium" >&2
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get install -y -q chromium >/dev/null 2>&1 \
    || { $sudo apt-get update -q >/dev/null && $sudo apt-get install -y -q chromium >/dev/null; }
fi
if ! command -v node >/dev/null 2>&1; then
  echo "console-test: needs Node.js and npm (Debian packages nodejs, npm)" >&2
  exit 1
fi
lock=tests/console/package-lock.json
installed=tests/console/node_modules/.package-lock.json
if [ ! -f "$installed" ] || [ "$lock" -nt "$installed" ]; then
  (cd tests/console && npm ci --no-audit --no-fund --loglevel=error)
fi
make -s build   # the build `make test` shares
cd tests/console
CHROMIUM="$(command -v chromium)" node --test --test-concurrency=1 --test-timeout=900000 console.test.mjs
