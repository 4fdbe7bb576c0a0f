#!/usr/bin/env python3
"""Where a Chime process's CPU samples go, from `perf script` output.

Reads the text of `perf script -F comm,pid,ip,sym --no-inline` (samples recorded with call
graphs) and prints two tables: the share of samples under each task of the pipeline (the
outermost frame of the stack that names one: a callback, hyper's connections, the claim
loop, ...), and the share of samples by their own function, with the kernel's work named
by the system call or fault that led into it. Probes (`--probe REGEX`, repeatable) add the
share of samples with any frame matching.

    perf script -i perf.data -F comm,pid,ip,sym --no-inline | scripts/profile/shares.py -
"""

import argparse
import collections
import json
import re
import sys

# The tasks of an executor, and what the other services run, by the frame that names them.
# The outermost match wins: a callback's HTTP work counts under the callback task.
TASKS = [
    ("callback task", r"chime_executor::claim::<impl chime_executor::Inner>::fire"),
    ("claim loop", r"chime_executor::claim::claim_loop"),
    ("outcome loop", r"chime_executor::record::outcome_loop"),
    ("hyper connections", r"hyper::proto::h1::dispatch::Dispatcher|hyper::client::conn|"
                          r"hyper_util::client::legacy::client::Client<C,B>::connect_to"),
    ("host slots", r"chime_executor::hosts::"),
    ("gRPC", r"^tonic::|^h2::|chime_executor::grpc"),
    ("Redis connections", r"^fred::"),
    ("PostgreSQL connections", r"^sqlx_core|^sqlx_postgres"),
    ("scheduler", r"^chime_scheduler(_trigger)?::"),
    ("runtime", r"tokio::runtime::(io|time|driver)|worker::Context::(park|maintenance)"),
]

# Kernel entry frames, and the user frame just above them that names the call.
ENTRIES = {
    "entry_SYSCALL_64_after_hwframe": "[syscall]",
    "asm_exc_page_fault": "[page fault]",
}


def samples(lines):
    """Each sample's frames, leaf first."""
    frames = None
    for line in lines:
        if not line.strip():
            if frames:
                yield frames
            frames = None
        elif line[0] in " \t" and frames is not None:
            parts = line.split(None, 1)
            frames.append(parts[1].strip() if len(parts) > 1 else "?")
        else:
            frames = []
    if frames:
        yield frames


def task_of(frames, tasks):
    found = "other (stack cut short or not named)"
    for frame in frames:
        for name, pattern in tasks:
            if pattern.search(frame):
                found = name
                break
    return found


def own_of(frames):
    for i, frame in enumerate(frames):
        label = ENTRIES.get(frame)
        if label and i + 1 < len(frames):
            return f"{label} {frames[i + 1]}"
        if frame.startswith("asm_sysvec") or frame.startswith("asm_common_interrupt"):
            return "[interrupt]"
    return frames[0] if frames else "?"


def shares(lines, probes=(), top=25):
    tasks = [(n, re.compile(p)) for n, p in TASKS]
    probes = [(p, re.compile(p)) for p in probes]
    by_task, by_own, by_probe = collections.Counter(), collections.Counter(), collections.Counter()
    n = 0
    for frames in samples(lines):
        n += 1
        by_task[task_of(frames, tasks)] += 1
        by_own[own_of(frames)] += 1
        for text, pattern in probes:
            if any(pattern.search(f) for f in frames):
                by_probe[text] += 1
    pct = lambda k: round(100.0 * k / n, 1) if n else 0.0  # noqa: E731
    return {
        "samples": n,
        "tasks": [(name, pct(k)) for name, k in by_task.most_common()],
        "own": [(name, pct(k)) for name, k in by_own.most_common(top)],
        "probes": [(text, pct(by_probe[text])) for text, _ in probes],
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("script", help="perf script output, or - for stdin")
    ap.add_argument("--probe", action="append", default=[], help="regex of a frame")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    src = sys.stdin if a.script == "-" else open(a.script, errors="replace")
    out = shares(src, a.probe, a.top)
    if a.json:
        print(json.dumps(out, indent=1))
        return
    print(f"{out['samples']} samples")
    print("\nby task (outermost frame naming one)")
    for name, p in out["tasks"]:
        print(f"  {p:5.1f} %  {name}")
    print("\nby own function (the kernel's by the call into it)")
    for name, p in out["own"]:
        print(f"  {p:5.1f} %  {name[:150]}")
    for text, p in out["probes"]:
        print(f"\nprobe {text}: {p} % of samples")


if __name__ == "__main__":
    main()
