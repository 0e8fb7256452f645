#!/usr/bin/python3
"""The policy suite's helper (scripts/policy-suite.sh); standard library only.

  policy_suite.py graphs SUMMARY.json...    the distinct round(avg_graphs) of the runs
  policy_suite.py config BASE.json KEY VALUE OUT.json
                                            BASE with replan.KEY = VALUE (a grid parameter)
  policy_suite.py sets CONFIG.json KEY      exit status 0 when CONFIG sets replan.KEY
  policy_suite.py aggregate DIR OUT.json [--grid KEY=V1,V2,... ...]
                                            the table (stdout, Markdown) and OUT.json; one
                                            leave-one-out table per --grid

Files in DIR (written by policy-suite.sh), TRACE a scenario or a real trace:
  TRACE.prefill.main.json   gearbox replay --optimum summary: static, adaptive, replan
  TRACE.decode.main.json    the same for the decode view (independent scheme)
  TRACE.decode.schemes.json replan/joint and replan/sparse
  TRACE.decode.plan-G.json  gearbox plan --joint BATCHSIZE,SEQLEN --graphs G
                            --scheme independent --json
  TRACE.prefill.grid-KEY-V.json
                            replan with replan.KEY = V, with the optimum (leave-one-out
                            over KEY's grid: the ratio and the churn)
  TRACE.decode.grid-KEY-V.json
                            the same on the decode view, without the optimum (its churn)
  TRACE.decode.sparse.grid-KEY-V.json
                            the decode view's sparse scheme at KEY = V (its uncompiled steps)
  TRACE.kind                "scenario", "scenario stationary" or "real"
A stationary scenario (`gearbox trace synth --list` marks them) carries the flapping target: at
most 2 gear-set changes in 25 updates after warm-up (the replay summary's
max_gear_set_changes_in_25_updates); the tables mark the others' figure with *.
"""
import json
import math
import os
import re
import statistics
import sys


def runs_of(path):
    """{run name: run object} of a replay summary (one run or several)."""
    with open(path) as f:
        s = json.load(f)
    if "policies" in s:
        return s["policies"]
    return {s["policy"]: s}


def read_kinds(directory):
    """{trace: (kind, stationary)} from DIR's TRACE.kind files: kind is "scenario" or "real";
    stationary says whether the scenario's traffic keeps one rate and one length
    distribution (it carries the flapping target)."""
    kinds = {}
    for f in sorted(os.listdir(directory)):
        if f.endswith(".kind"):
            with open(os.path.join(directory, f)) as k:
                words = k.read().split()
            kinds[f[: -len(".kind")]] = (words[0], "stationary" in words[1:])
    return kinds


def churn_rate(run):
    """Compiles per hour of traffic: after the first hour on traces longer than two hours (the
    cold start left out, as the issue's target says), over the whole trace otherwise."""
    if run["trace_seconds"] > 2 * 3600 and "compiles_per_hour_after_first_hour" in run:
        return run["compiles_per_hour_after_first_hour"]
    return run["compiles_per_hour"]


def graph_count(run):
    return max(1, int(math.floor(run["avg_graphs"] + 0.5)))


def cmd_graphs(paths):
    counts = set()
    for p in paths:
        for run in runs_of(p).values():
            counts.add(graph_count(run))
    print(" ".join(str(c) for c in sorted(counts)))


def cmd_config(base, key, value, out):
    with open(base) as f:
        c = json.load(f)
    c.setdefault("replan", {})[key] = json.loads(value)
    with open(out, "w") as f:
        json.dump(c, f)


def optimum_1d(run):
    """Waste of the offline optimum with round(avg_graphs) gears (1-D)."""
    (dim,) = run["offline_optimum"].values()
    return dim["same_graph_count"]["waste"], dim["same_graph_count"]["gears"]


def other_half_1d(run):
    """Waste of the optimum at the same count planned on the other half of the trace (alternate
    minutes; gearbox replay --optimum, "other_half_waste"), or None where the summary has none."""
    (dim,) = run["offline_optimum"].values()
    return dim["same_graph_count"].get("other_half_waste")


def optimum_2d(directory, trace, run):
    """The offline plan with at most round(avg_graphs) graphs (2-D): the
    independent scheme (gear lists exact per dimension; the combinations
    used count as graphs). The joint planner (k-means, a heuristic) is at
    times a little better and ten times slower; the sparse plan runs
    requests uncompiled, so it is no yardstick."""
    g = graph_count(run)
    with open(os.path.join(directory, f"{trace}.decode.plan-{g}.json")) as f:
        plans = json.load(f)
    best = min(p["padding_waste"] for p in plans if p["scheme"] == "independent")
    return best, g


def eager_share(run):
    """The share of the run's requests (decode: steps) that ran uncompiled."""
    return run["eager_requests"] / max(1, run["requests"])


def row_of(directory, trace, view, kind, stationary, name, run):
    other_half = None
    if view == "prefill":
        opt, g = optimum_1d(run)
        other_half = other_half_1d(run)
    else:
        opt, g = optimum_2d(directory, trace, run)
    waste = run["padding_waste"]
    graphs = run["avg_graphs"]
    return {
        "trace": trace,
        "kind": kind,
        "view": view,
        "policy": name,
        "requests": run["requests"],
        "hours": run["trace_seconds"] / 3600.0,
        "waste": waste,
        "avg_graphs": graphs,
        "peak_graphs": run["peak_graphs"],
        "optimum_graphs": g,
        "optimum_waste": opt,
        "ratio": waste / opt if opt > 1e-12 else (1.0 if waste <= 1e-12 else math.inf),
        # Against the optimum planned on the other half: how much of the ratio is the
        # in-sample optimum fitting the noise of the requests it is scored on.
        "other_half_waste": other_half,
        "other_half_ratio": None if other_half is None else (
            waste / other_half if other_half > 1e-12 else (1.0 if waste <= 1e-12 else math.inf)),
        "compiles": run["compiles"],
        "compiles_per_hour": run["compiles_per_hour"],
        "compiles_per_hour_per_graph": churn_rate(run) / max(graphs, 1e-9),
        "short_lived_gears": run["short_lived_gears"],
        "max_gear_cycles_per_hour": run["max_gear_cycles_per_hour"],
        "stationary": stationary,
        "flapping": run["max_gear_set_changes_in_25_updates"],
        "eager_share": eager_share(run),
        "rejected": run["rejected_requests"],
    }


def collect(directory):
    rows = []
    kinds = read_kinds(directory)
    for trace in sorted(kinds, key=lambda t: (kinds[t][0] != "real", t)):
        for view in ("prefill", "decode"):
            for part in ("main", "schemes"):
                p = os.path.join(directory, f"{trace}.{view}.{part}.json")
                if not os.path.exists(p):
                    continue
                for name, run in runs_of(p).items():
                    rows.append(row_of(directory, trace, view, *kinds[trace], name, run))
    return rows


def pct(x):
    return f"{100 * x:.1f}%"


def num(x, digits=2):
    return "inf" if math.isinf(x) else f"{x:.{digits}f}"


def summarize(rows):
    """Worst and median per (view, policy) over the suite."""
    out = []
    keys = sorted({(r["view"], r["policy"]) for r in rows}, key=lambda k: (k[0] != "prefill", k))
    for view, policy in keys:
        rs = [r for r in rows if r["view"] == view and r["policy"] == policy]
        entry = {"view": view, "policy": policy, "traces": len(rs)}
        for field in ("ratio", "other_half_ratio", "waste", "compiles_per_hour_per_graph",
                      "short_lived_gears", "max_gear_cycles_per_hour", "avg_graphs", "peak_graphs",
                      "eager_share", "flapping"):
            # Flapping: the target is the stationary scenarios'; the other-half ratio is the
            # prefill views'.
            of = ([r for r in rs if r["stationary"]] if field == "flapping"
                  else [r for r in rs if r[field] is not None])
            values = [r[field] for r in of] or [0]
            worst = max(values)
            entry[field] = {"worst": worst, "median": statistics.median(values),
                            "worst_trace": of[values.index(worst)]["trace"] if of else "—"}
        out.append(entry)
    return out


def churn_figures(run, stationary):
    return {"compiles_per_hour_per_graph": churn_rate(run) / max(run["avg_graphs"], 1e-9),
            "max_gear_cycles_per_hour": run["max_gear_cycles_per_hour"],
            "flapping": run["max_gear_set_changes_in_25_updates"] if stationary else 0}


# The targets a grid value is judged on (docs/POLICY.md, "The policy suite").
MAX_COMPILES_PER_HOUR_PER_GRAPH = 2.0
MAX_GEAR_CYCLES_PER_HOUR = 1
MAX_SPARSE_EAGER_SHARE = 0.01
MAX_FLAPPING = 2  # gear-set changes in 25 updates after warm-up, stationary traffic
MAX_RATIO = 1.25  # prefill waste / the offline optimum's at the same graph count


def leave_one_out(directory, key, grid):
    """For each trace with a prefill view, the value of replan.KEY chosen on
    the OTHER traces and what it gives on the trace itself. The choice: among
    the values that keep the targets on every view of every other trace
    (prefill views: waste at most 1.25 times the optimum's at the same graph
    count; compiles per hour per live graph <= 2, no gear added and evicted
    more than once an hour, on stationary scenarios at most 2 gear-set changes
    in 25 updates after warm-up: prefill views and, where the suite replayed
    the grid there, decode views; at most 1 % of the steps uncompiled: the
    decode views' sparse scheme, where replayed), the least worst prefill ratio, then
    the least median, then the least mean (a value no worse anywhere and
    better somewhere wins a tie); if no value keeps them, the fewest views
    that break them, then the same."""
    kinds = read_kinds(directory)

    def stationary(trace):
        return kinds.get(trace, ("scenario", False))[1]

    table = {}   # trace -> {value: prefill figures}
    decode = {}  # trace -> {value: decode churn figures}
    sparse = {}  # trace -> {value: the sparse scheme's uncompiled share}
    for f in os.listdir(directory):
        m = re.fullmatch(r"(.+)\.(prefill|decode|decode\.sparse)\.grid-" + re.escape(key)
                         + r"-(.+)\.json", f)
        if not m:
            continue
        (run,) = runs_of(os.path.join(directory, f)).values()
        if m.group(2) == "decode.sparse":
            sparse.setdefault(m.group(1), {})[m.group(3)] = eager_share(run)
            continue
        if m.group(2) == "decode":
            decode.setdefault(m.group(1), {})[m.group(3)] = churn_figures(
                run, stationary(m.group(1)))
            continue
        opt, _ = optimum_1d(run)
        table.setdefault(m.group(1), {})[m.group(3)] = {
            "ratio": run["padding_waste"] / opt if opt > 1e-12 else math.inf,
            **churn_figures(run, stationary(m.group(1)))}
    traces = sorted(t for t in table if all(v in table[t] for v in grid))
    if len(traces) < 2:
        return None

    def broken(f):
        return (f["compiles_per_hour_per_graph"] > MAX_COMPILES_PER_HOUR_PER_GRAPH
                or f["max_gear_cycles_per_hour"] > MAX_GEAR_CYCLES_PER_HOUR
                or f["flapping"] > MAX_FLAPPING)

    def breaks(t, v):
        d = decode.get(t, {}).get(v)
        e = sparse.get(t, {}).get(v)
        return (int(broken(table[t][v])) + int(table[t][v]["ratio"] > MAX_RATIO)
                + int(d is not None and broken(d))
                + int(e is not None and e > MAX_SPARSE_EAGER_SHARE))

    def score(others, v):
        ratios = [table[t][v]["ratio"] for t in others]
        return (sum(breaks(t, v) for t in others), max(ratios), statistics.median(ratios),
                statistics.fmean(ratios))

    per_trace = []
    for held_out in traces:
        others = [t for t in traces if t != held_out]
        chosen = min(grid, key=lambda v: score(others, v))
        f = table[held_out][chosen]
        per_trace.append({
            "trace": held_out,
            "chosen": chosen,
            "ratio": f["ratio"],
            "compiles_per_hour_per_graph": f["compiles_per_hour_per_graph"],
            "max_gear_cycles_per_hour": f["max_gear_cycles_per_hour"],
            "stationary": stationary(held_out),
            "flapping": f["flapping"],
            "decode_compiles_per_hour_per_graph":
                decode.get(held_out, {}).get(chosen, {}).get("compiles_per_hour_per_graph"),
            "decode_sparse_eager_share": sparse.get(held_out, {}).get(chosen),
            "ratio_by_value": {v: table[held_out][v]["ratio"] for v in grid},
        })
    on_all = min(grid, key=lambda v: score(traces, v))
    ratios = [p["ratio"] for p in per_trace]
    return {
        "parameter": f"replan.{key}",
        "grid": grid,
        "criterion": "fewest views of other traces breaking the targets (prefill ratio <= "
                     "1.25; compiles/h per graph <= 2, max cycles/h <= 1, stationary "
                     "scenarios' gear changes in 25 updates <= 2: prefill and decode views; "
                     "uncompiled steps <= 1 %: the decode views' sparse scheme), then least "
                     "worst prefill ratio, then least median, then least mean",
        "views_breaking_by_value": {v: sum(breaks(t, v) for t in traces) for v in grid},
        "chosen_on_all": on_all,
        "held_out": per_trace,
        "worst_held_out_ratio": max(ratios),
        "median_held_out_ratio": statistics.median(ratios),
    }


def print_tables(rows, summary, loo):
    print("| trace | view | policy | waste | graphs avg (peak) | optimum (graphs) | ratio "
          "| other-half optimum (ratio) "
          "| compiles/h per graph | short-lived | max cycles/h | changes/25 | eager |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        half = ("—" if r["other_half_waste"] is None
                else f"{pct(r['other_half_waste'])} ({num(r['other_half_ratio'])})")
        print(f"| {r['trace']}{' (real)' if r['kind'] == 'real' else ''} | {r['view']} "
              f"| {r['policy']} | {pct(r['waste'])} | {r['avg_graphs']:.1f} ({r['peak_graphs']}) "
              f"| {pct(r['optimum_waste'])} ({r['optimum_graphs']}) | {num(r['ratio'])} | {half} "
              f"| {num(r['compiles_per_hour_per_graph'])} | {r['short_lived_gears']} "
              f"| {r['max_gear_cycles_per_hour']} "
              f"| {r['flapping']}{'' if r['stationary'] else '*'} | {pct(r['eager_share'])} |")
    print()
    print("| view | policy | traces | ratio worst (trace) | ratio median "
          "| other-half ratio worst (trace) | median "
          "| compiles/h per graph worst (trace) | median | short-lived worst | max cycles/h worst "
          "| changes/25 worst, stationary (trace) | peak graphs worst | eager worst |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for s in summary:
        h = s["other_half_ratio"]
        half = ("— | —" if h["worst_trace"] == "—"
                else f"{num(h['worst'])} ({h['worst_trace']}) | {num(h['median'])}")
        print(f"| {s['view']} | {s['policy']} | {s['traces']} "
              f"| {num(s['ratio']['worst'])} ({s['ratio']['worst_trace']}) "
              f"| {num(s['ratio']['median'])} | {half} "
              f"| {num(s['compiles_per_hour_per_graph']['worst'])} "
              f"({s['compiles_per_hour_per_graph']['worst_trace']}) "
              f"| {num(s['compiles_per_hour_per_graph']['median'])} "
              f"| {s['short_lived_gears']['worst']} | {s['max_gear_cycles_per_hour']['worst']} "
              f"| {s['flapping']['worst']} ({s['flapping']['worst_trace']}) "
              f"| {s['peak_graphs']['worst']} | {pct(s['eager_share']['worst'])} |")
    for one in loo:
        print()
        print(f"Leave-one-out, {one['parameter']} over {one['grid']} "
              f"({one['criterion']}); on all traces: {one['chosen_on_all']}")
        print()
        print("| held-out trace | chosen on the others | ratio there | compiles/h per graph "
              "| max cycles/h | changes/25 | decode compiles/h per graph | decode sparse eager | "
              + " | ".join(f"ratio at {v}" for v in one["grid"]) + " |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|" + "---:|" * len(one["grid"]))
        for p in one["held_out"]:
            dec = p["decode_compiles_per_hour_per_graph"]
            eager = p["decode_sparse_eager_share"]
            print(f"| {p['trace']} | {p['chosen']} | {num(p['ratio'])} "
                  f"| {num(p['compiles_per_hour_per_graph'])} | {p['max_gear_cycles_per_hour']} "
                  f"| {p['flapping'] if p['stationary'] else '—'} "
                  f"| {num(dec) if dec is not None else '—'} "
                  f"| {pct(eager) if eager is not None else '—'} | "
                  + " | ".join(num(p["ratio_by_value"][v]) for v in one["grid"]) + " |")
        print(f"\nheld-out ratio: worst {num(one['worst_held_out_ratio'])}, "
              f"median {num(one['median_held_out_ratio'])}; views breaking the targets "
              "by value (all traces): "
              + ", ".join(f"{v}: {n}" for v, n in one["views_breaking_by_value"].items()))


def finite(x):
    """x with infinities as None (strict JSON)."""
    if isinstance(x, float) and math.isinf(x):
        return None
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [finite(v) for v in x]
    return x


def cmd_aggregate(directory, out, grids):
    rows = collect(directory)
    if not rows:
        sys.exit(f"policy_suite.py: no replay summaries in {directory}")
    summary = summarize(rows)
    loo = [r for r in (leave_one_out(directory, key, grid) for key, grid in grids) if r]
    print_tables(rows, summary, loo)
    with open(out + ".tmp", "w") as f:
        json.dump(finite({"rows": rows, "summary": summary, "leave_one_out": loo}), f, indent=1)
    os.replace(out + ".tmp", out)


def parse_grid(text):
    """KEY=V1,V2,... as (KEY, [V1, V2, ...]) with the values as written."""
    key, sep, values = text.partition("=")
    grid = [v for v in values.split(",") if v]
    if not sep or not re.fullmatch(r"[a-z_]+", key) or not grid:
        sys.exit(f"policy_suite.py: --grid \"{text}\": expected KEY=V1,V2,... (a replan key)")
    return key, grid


def main(argv):
    if len(argv) >= 2 and argv[1] == "graphs":
        cmd_graphs(argv[2:])
    elif len(argv) == 6 and argv[1] == "config":
        cmd_config(argv[2], argv[3], argv[4], argv[5])
    elif len(argv) == 4 and argv[1] == "sets":
        with open(argv[2]) as f:
            sys.exit(0 if argv[3] in json.load(f).get("replan", {}) else 1)
    elif len(argv) >= 4 and argv[1] == "aggregate" and len(argv) % 2 == 0 and all(
            a == "--grid" for a in argv[4::2]):
        cmd_aggregate(argv[2], argv[3], [parse_grid(g) for g in argv[5::2]])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
