#!/usr/bin/env bash
# Checks the README's quickstart as a newcomer would run it: `make run`, then the command
# under the `<!-- quickstart -->` marker, must produce echo callbacks within 5 s, and
# `chime timers runs` must show them, with no PostgreSQL or Redis in reach. Where the
# machine allows (root, or unprivileged user namespaces) it runs in a network namespace of
# its own, so the machine's PostgreSQL and Redis are unreachable by construction.
set -euo pipefail
cd "$(dirname "$0")/.."

make -s build   # so `make run` below starts without building
quickstart=$(awk '/<!-- quickstart -->/ {found=1; next}
                  found && /^```/ {if (inside) exit; inside=1; next}
                  inside {print}' README.md)
if [ -z "$quickstart" ]; then
  echo "quickstart-check: no command under <!-- quickstart --> in README.md" >&2
  exit 1
fi

check() {
  set -euo pipefail
  ip link set lo up 2>/dev/null || true
  log=$(mktemp)
  make -s run DEV_ARGS=--memory >"$log" 2>&1 &
  make_pid=$!
  stop() { pkill -INT -f 'target/debug/chime dev' 2>/dev/null || true; wait "$make_pid" 2>/dev/null || true; }
  trap 'stop; echo "--- chime dev log"; sed "s/\x1b\[[0-9;]*m//g" "$log" | tail -20' EXIT
  for _ in $(seq 1 300); do
    curl -sf localhost:8080/readyz >/dev/null 2>&1 && break
    sleep 0.1
  done
  curl -sf localhost:8080/readyz >/dev/null || { echo "chime dev never became ready"; exit 1; }
  startup_ms=$(sed 's/\x1b\[[0-9;]*m//g' "$log" | grep -o 'startup_ms=[0-9]*' | head -1 | cut -d= -f2)
  echo "chime dev ready ${startup_ms} ms after starting"
  [ "${startup_ms:-99999}" -le 2000 ] || { echo "chime dev took over 2 s to start"; exit 1; }

  echo "\$ $quickstart"
  bash -c "$quickstart" >/dev/null
  for _ in $(seq 1 50); do
    grep -q 'echo: callback received' "$log" && break
    sleep 0.1
  done
  grep -q 'echo: callback received' "$log" || { echo "no echo callback within 5 s"; exit 1; }
  echo "echo callback received"
  # The run's outcome is written just after its callback (outcomes are batched): asked at
  # once, the run may still be running, so ask until it shows, for a few seconds.
  for _ in $(seq 1 50); do
    runs=$(target/debug/chime timers runs 1)
    grep -q succeeded <<<"$runs" && break
    sleep 0.1
  done
  echo "$runs"
  grep -q succeeded <<<"$runs" || { echo "chime timers runs shows no succeeded run within 5 s"; exit 1; }

  pkill -INT -f 'target/debug/chime dev'
  wait "$make_pid"
  trap - EXIT
  grep -q 'chime dev stopped' "$log" || { echo "chime dev did not stop cleanly on Ctrl-C"; exit 1; }
  echo "quickstart-check: ok (stopped cleanly on Ctrl-C)"
}
export -f check
export quickstart

if unshare --net --map-root-user true 2>/dev/null; then
  echo "quickstart-check: in a network namespace of its own (no PostgreSQL, no Redis)"
  unshare --net --map-root-user bash -c check
else
  echo "quickstart-check: cannot isolate the network here; running beside whatever is up"
  check
fi
