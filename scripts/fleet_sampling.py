#!/usr/bin/env python3
"""How much of the fleet's per-replica waste spread is sampling (docs/FLEET.md,
"The fleet suite"): one runtime's gear timeline (its `gearbox replay
--decisions` file) applied to the trace, then the rows split into N shares
round-robin (as `gearbox replay --replicas N` routes them) and at random
(--seeds), and each share's padding waste printed. With every share on the
same gears at the same times, what differs between shares is only which
requests each drew.

  scripts/fleet_sampling.py CONFIG TRACE DECISIONS N [--seeds K]

CONFIG: a one-dimension, non-splittable config (its gears or TIMES range are
the gears before the first update). Standard library only.
"""
import argparse
import bisect
import csv
import json
import random
import sys


def initial_gears(dim):
    if "gears" in dim:
        return sorted(set(int(g) for g in dim["gears"]))
    if dim.get("policy") != "TIMES":
        sys.exit(f"fleet_sampling.py: dims[0].policy {dim.get('policy')!r} is not supported; "
                 "\"TIMES\" or an explicit \"gears\" list")
    lo, hi = int(dim["min"]), int(dim["max"])
    out, g = [lo], 1
    while g <= lo:
        g *= 2
    while g < hi:
        out.append(g)
        g *= 2
    if out[-1] != hi:
        out.append(hi)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("config")
    ap.add_argument("trace")
    ap.add_argument("decisions")
    ap.add_argument("n", type=int)
    ap.add_argument("--seeds", type=int, default=20)
    a = ap.parse_args()
    if a.n < 1 or a.seeds < 1:
        sys.exit(f"fleet_sampling.py: N = {a.n}, --seeds = {a.seeds}: both must be >= 1")
    config = json.load(open(a.config))
    if len(config["dims"]) != 1 or config["dims"][0].get("splittable", False):
        sys.exit("fleet_sampling.py: CONFIG must have one non-splittable dimension")
    dim = config["dims"][0]
    name = dim["name"]
    rows = [(float(r["t"]), int(r[name])) for r in csv.DictReader(open(a.trace))]
    timeline = [(float(u["time"]), u["gears"][name]) for u in map(json.loads, open(a.decisions))]
    k, cur, mapped = 0, initial_gears(dim), []
    for t, x in rows:
        while k < len(timeline) and timeline[k][0] <= t:  # a check at t sees the rows before t
            cur = timeline[k][1]
            k += 1
        i = bisect.bisect_left(cur, x)
        if i == len(cur):
            sys.exit(f"fleet_sampling.py: {name} = {x} at t = {t} is above the largest gear {cur[-1]}")
        mapped.append(cur[i])

    def waste(share):
        padded = sum(mapped[i] for i in share)
        raw = sum(rows[i][1] for i in share)
        return 100.0 * (padded / raw - 1.0)

    print(f"one runtime's gears on the whole trace: {waste(range(len(rows))):.2f} %")
    rr = [waste(range(s, len(rows), a.n)) for s in range(a.n)]
    print(f"round-robin shares of {a.n}: {min(rr):.2f}-{max(rr):.2f} %")
    worst = []
    for seed in range(a.seeds):
        rng = random.Random(seed)
        owner = [rng.randrange(a.n) for _ in rows]
        shares = [[] for _ in range(a.n)]
        for i, s in enumerate(owner):
            shares[s].append(i)
        worst.append(max(waste(s) for s in shares if s))
    worst.sort()
    print(f"random splits ({a.seeds} seeds): worst share {worst[0]:.2f}-{worst[-1]:.2f} % "
          f"(median {worst[len(worst) // 2]:.2f} %)")


if __name__ == "__main__":
    main()
