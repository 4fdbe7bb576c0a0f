#!/usr/bin/env python3
"""Medians of alternated `chime-bench pipeline` runs, one column per side.

    summarize.py OUT.json SIDE=REPORT.json [SIDE=REPORT.json ...] [--all]

Every numeric figure of every report is flattened to a dotted name (scenario, then the
figure's path; the peers' figures and the ratios to them under `peer.` and `vs.`), and
each side's runs of it are reduced to their median. The table on stdout shows the
headline figures (or every figure with --all); OUT.json holds them all, with every run.
"""

import json
import re
import statistics
import sys

# The figures the targets and the performance page quote.
HEADLINE = re.compile(
    r"(drain|p99|p50|worst|cpu_total_per_1000|cpu_seconds_per_1000\.(postgres|executors)"
    r"|rows_per_firing|share|chime_advantage|delivered|missing|duplicates|disable_seconds"
    r"|kept_while_overloaded|one_shots|misfired|callbacks_per_second|over_floor|wal_syncs)",
    re.I,
)


def leaves(value, path):
    """(dotted path, number) for every number below `value`."""
    if isinstance(value, bool):
        return
    if isinstance(value, (int, float)):
        yield path, float(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from leaves(v, f"{path}.{k}" if path else str(k))
    elif isinstance(value, list) and len(value) <= 64:
        for i, v in enumerate(value):
            yield from leaves(v, f"{path}[{i}]")


def figures(report):
    out = {}
    for s in report.get("scenarios") or []:
        name = s.get("scenario", "?")
        setup = s.get("setup", "postgres+redis")
        prefix = name if setup == "postgres+redis" else f"{name}@{setup}"
        out.update(leaves(s.get("figures"), prefix))
    for p in report.get("peers") or []:
        out.update(leaves(p.get("figures"), f"peer.{p.get('peer')}.{p.get('scenario')}"))
    for row in report.get("comparison") or []:
        base = f"vs.{row.get('scenario')}.{row.get('measure')}"
        for peer, v in row.items():
            if isinstance(v, dict) and "chime_advantage" in v:
                out[f"{base}.{peer}"] = float(v["chime_advantage"])
    for name in ("burst_share_of_callback_floor", "burst_share_of_durable_floor",
                 "durable_floor_share_of_callback_floor"):
        share = report.get(name)
        if isinstance(share, (int, float)):
            out[name] = float(share)
    # Steady's and every-second's CPU and worst window beside the callbacks alone.
    out.update(leaves(report.get("beside_paced_floor") or {}, "beside_paced_floor"))
    return out


def number(v):
    """Whole above a thousand, four significant digits below."""
    return f"{v:.0f}" if abs(v) >= 1000 else f"{v:.4g}"


def main(argv):
    show_all = "--all" in argv
    args = [a for a in argv if a != "--all"]
    if len(args) < 2:
        sys.exit(__doc__)
    out_path, runs = args[0], args[1:]
    sides, order = {}, []
    for spec in runs:
        side, _, path = spec.partition("=")
        with open(path) as f:
            report = json.load(f)
        if side not in sides:
            sides[side] = []
            order.append(side)
        sides[side].append({"report": path, "figures": figures(report)})
    names = sorted({n for runs in sides.values() for r in runs for n in r["figures"]})
    table = {}
    for n in names:
        row = {}
        for side in order:
            values = [r["figures"][n] for r in sides[side] if n in r["figures"]]
            if values:
                row[side] = {"median": statistics.median(values), "runs": values}
        table[n] = row
    with open(out_path, "w") as f:
        json.dump({"sides": order, "runs": {s: [r["report"] for r in sides[s]] for s in order},
                   "figures": table}, f, indent=2)
    shown = [n for n in names if show_all or HEADLINE.search(n)]
    cells = {}
    for n in shown:
        for side in order:
            cell = table[n].get(side)
            cells[n, side] = "-" if cell is None else (
                f"{number(cell['median'])} [" + ", ".join(number(v) for v in cell["runs"]) + "]")
    width = max((len(n) for n in shown), default=10)
    col = {s: max([len(s)] + [len(cells[n, s]) for n in shown]) for s in order}
    print(f"{'figure: median [runs]':<{width}}  " + "  ".join(f"{s:<{col[s]}}" for s in order))
    for n in shown:
        print(f"{n:<{width}}  " + "  ".join(f"{cells[n, s]:<{col[s]}}" for s in order))
    print(f"every figure, with each run: {out_path}")


if __name__ == "__main__":
    main(sys.argv[1:])
