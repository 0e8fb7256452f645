#!/usr/bin/env python3
"""Helpers of scripts/fleet-suite.sh (Python 3 standard library only).

  fleet_suite.py span TRACE.csv          -> {"rows": n, "t0": first t, "t1": last t}
  fleet_suite.py at SPAN.json join       -> the middle of the trace (seconds)
  fleet_suite.py at SPAN.json outage     -> "T1:T2", the middle third
  fleet_suite.py table DIR --scenarios "A B" --replicas "4 16"
      -> the Markdown table of the runs in DIR (NAME.span.json,
         NAME.single.json, NAME.nN.{whole,join,outage}.json)
"""
import argparse
import csv
import json
import os
import sys


def span(path):
    rows = 0
    t0 = t1 = None
    with open(path, newline="") as f:
        reader = csv.reader(f)
        header = next(reader)
        if "t" not in header:
            raise SystemExit(f"fleet_suite.py: {path}: no \"t\" column in the header {header}")
        col = header.index("t")
        for row in reader:
            t = float(row[col])
            t0 = t if t0 is None else t0
            t1 = t
            rows += 1
    if rows == 0:
        raise SystemExit(f"fleet_suite.py: {path}: no rows")
    return {"rows": rows, "t0": t0, "t1": t1}


def at(s, what):
    length = s["t1"] - s["t0"]
    if what == "join":
        return f"{s['t0'] + length / 2:.3f}"
    if what == "outage":
        return f"{s['t0'] + length / 3:.3f}:{s['t0'] + 2 * length / 3:.3f}"
    raise SystemExit(f"fleet_suite.py: at \"{what}\" is not allowed; join or outage")


def load(path):
    with open(path) as f:
        return json.load(f)


def pct(x):
    return f"{100.0 * x:.2f} %"


def row(name, n, s, single, whole, join, outage):
    """One table row (a list of cells) and its checks, from the parsed summaries."""
    fleet = whole["fleet"]
    worst = max(r["padding_waste"] for r in whole["per_replica"])
    updates = join.get("join_converged_updates")
    of = outage["fleet"]
    lost = (s["rows"] - of["requests"]) + of["rejected_requests"]
    cells = [
        name,
        str(n),
        f"{single['compiles']} / {fleet['compiles']}",
        pct(single["padding_waste"]),
        pct(fleet["padding_waste"]),
        pct(worst),
        "never" if updates is None else str(updates),
        pct(of["padding_waste"]),
        f"{lost} ({single['rejected_requests']})",
    ]
    checks = {
        "worst_le_single": worst <= single["padding_waste"],
        "fleet_le_single": fleet["padding_waste"] <= single["padding_waste"],
        "compiles_ratio": fleet["compiles"] / max(1, single["compiles"]),
        "join_within_2": updates is not None and updates <= 2,
        "lost": lost - single["rejected_requests"],
        "excess": fleet["padding_waste"] - single["padding_waste"],
    }
    return cells, checks


HEADER = [
    "scenario",
    "N",
    "compiles: one runtime / fleet",
    "waste: one runtime",
    "fleet",
    "worst replica",
    "joiner: updates to the others' waste",
    "store down (middle third): fleet waste",
    "lost (one runtime rejected)",
]


def table(directory, scenarios, replicas):
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    all_checks = []
    for name in scenarios:
        s = load(os.path.join(directory, f"{name}.span.json"))
        single = load(os.path.join(directory, f"{name}.single.json"))
        for n in replicas:
            runs = [load(os.path.join(directory, f"{name}.n{n}.{k}.json"))[0]
                    for k in ("whole", "join", "outage")]
            cells, checks = row(name, n, s, single, *runs)
            lines.append("| " + " | ".join(cells) + " |")
            all_checks.append(checks)
    k = len(all_checks)
    worst_ok = sum(c["worst_le_single"] for c in all_checks)
    fleet_ok = sum(c["fleet_le_single"] for c in all_checks)
    join_ok = sum(c["join_within_2"] for c in all_checks)
    lost = sum(max(0, c["lost"]) for c in all_checks)
    ratio = max(c["compiles_ratio"] for c in all_checks) if all_checks else 0.0
    excess = max(c["excess"] for c in all_checks) if all_checks else 0.0
    lines.append("")
    lines.append(
        f"{k} runs: fleet waste <= one runtime's in {fleet_ok} (at most "
        f"{100.0 * excess:+.2f} points above), every replica's in {worst_ok}; "
        f"the joiner within 2 updates in {join_ok}; fleet compiles at most {ratio:.2f} x one "
        f"runtime's; {lost} requests lost beyond one runtime's rejections")
    return "\n".join(lines)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("span")
    a.add_argument("trace")
    a = sub.add_parser("at")
    a.add_argument("span")
    a.add_argument("what")
    a = sub.add_parser("table")
    a.add_argument("dir")
    a.add_argument("--scenarios", required=True)
    a.add_argument("--replicas", required=True)
    args = p.parse_args(argv)
    if args.cmd == "span":
        print(json.dumps(span(args.trace)))
    elif args.cmd == "at":
        print(at(load(args.span), args.what))
    else:
        replicas = [int(x) for x in args.replicas.split()]
        print(table(args.dir, args.scenarios.split(), replicas))


if __name__ == "__main__":
    main(sys.argv[1:])
