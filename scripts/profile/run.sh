#!/usr/bin/env bash
# Profiles one service's processes (the executors by default) through a benchmark run and
# prints where their CPU went: the share of samples under each task of the pipeline and by
# function (shares.py), and their system calls, context switches and page faults over the
# run. Benchmark timings on two shared cores move by a quarter from run to run; shares
# within one process move far less, so a change of a few per cent shows here first.
#
#   scripts/profile/run.sh target/release/chime-bench pipeline --scenarios burst
#
# It attaches to the first `PROFILE_PROCESS` processes the benchmark starts (`chime-executor`;
# `chime-scheduler` and the others work too), so profile one scenario per run. perf with
# DWARF call graphs slows a drain by about a third: read its shares, not its rates.
# Output goes to PROFILE_OUT (target/profile): perf.data, shares.txt, syscalls.txt.
set -euo pipefail

process=${PROFILE_PROCESS:-chime-executor}
freq=${PROFILE_FREQ:-1999}
out=${PROFILE_OUT:-target/profile}
here=$(cd "$(dirname "$0")" && pwd)
command -v perf >/dev/null || { echo "profile: needs perf (apt-get install linux-perf)" >&2; exit 1; }
[[ $# -ge 1 ]] || { echo "usage: $0 <chime-bench> [bench arguments...]" >&2; exit 2; }
mkdir -p "$out"
rm -f "$out/perf.data" "$out/syscalls.txt"

calls=connect,close,writev,write,sendto,recvfrom,read,epoll_wait,futex,madvise,mmap,munmap
events=$(printf 'syscalls:sys_enter_%s,' ${calls//,/ })context-switches,page-faults

# Waits for the processes (polling: they are the benchmark's children, not ours), then
# records until they exit.
attach() {
    local pids=""
    for _ in $(seq 1 3000); do
        pids=$(pgrep -d, -x "$process" || true)
        [[ -n $pids ]] && break
        sleep 0.1
    done
    [[ -n $pids ]] || { echo "profile: no $process process started" >&2; return 0; }
    # Every replica starts within a moment of the first.
    sleep 1
    pids=$(pgrep -d, -x "$process")
    echo "profile: recording $process ($pids)" >&2
    perf stat -e "$events" -p "$pids" -o "$out/syscalls.txt" 2>/dev/null &
    perf record -q -F "$freq" --call-graph dwarf,16384 -p "$pids" -o "$out/perf.data" \
        >"$out/record.log" 2>&1 || true
    wait
}

attach &
watcher=$!
status=0
"$here/../with-test-services.sh" "$@" || status=$?
# perf stops by itself when the processes exit; a benchmark that never started them ends it here.
kill -INT "$watcher" 2>/dev/null || true
pkill -INT -P "$watcher" perf 2>/dev/null || true
wait "$watcher" 2>/dev/null || true

if [[ -s $out/perf.data ]]; then
    perf script -i "$out/perf.data" -F comm,pid,ip,sym --no-inline 2>/dev/null \
        | python3 "$here/shares.py" - >"$out/shares.txt"
    cat "$out/shares.txt"
fi
if [[ -s $out/syscalls.txt ]]; then
    echo
    echo "system calls, switches and faults of $process over the run:"
    grep -E '^ +[0-9,]+ ' "$out/syscalls.txt" || true
fi
exit "$status"
