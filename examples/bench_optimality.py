"""How far the device-budget planner is from the optimum over every lower-set sequence.

On random DAGs of 4-8 nodes (a random DAG per seed: a G(n, p) graph from networkx with every edge
oriented from the smaller to the larger node, then relabelled at random; costs 1-50 cost units,
memory 1-100 bytes, the paper's conservative execution facts), the exhaustive search of
``lowerset.bruteforce.brute_schedule_points`` schedules every lower-set sequence
L_1 ⊊ ... ⊊ L_k = V (once per distinct set of dropped values), which gives the least
whole-step peak any sequence reaches and, at a budget, the least overhead within it. Then, per
method, it compares

- ``lowerset.min_peak(graph, method)``: graphs where its peak is above the optimum, and the
  largest ratio;
- ``lowerset.solve(graph, budget=B, method)`` at B = the optimum's least peak and at one and two
  thirds of the way from it to the peak of [V]: budgets where the planner finds no plan although
  one exists, and budgets where its overhead (``schedule.recompute_cost``, cost units) is above
  the least one.

Prints a Markdown table and the machine.

Usage::

    .venv/bin/python examples/bench_optimality.py [--graphs 500] [--seed 0]
"""

import argparse
import random
import sys
import time
from pathlib import Path

import networkx as nx

sys.path.insert(0, str(Path(__file__).resolve().parent))

import lowerset as ls  # noqa: E402
from lowerset.bruteforce import brute_schedule_points  # noqa: E402
from _machine import machine_line  # noqa: E402

METHODS = ("approx", "exact")
FRACTIONS = (0.0, 1 / 3, 2 / 3)


def random_dag(rng):
    """A random DAG of 4-8 nodes with random costs (cost units) and memory (bytes)."""
    n = rng.randint(4, 8)
    p = rng.choice([0.2, 0.35, 0.5, 0.7])
    und = nx.gnp_random_graph(n, p, seed=rng.randrange(2**31))
    perm = list(range(n))
    rng.shuffle(perm)
    edges = [(perm[min(u, v)], perm[max(u, v)]) for u, v in und.edges]
    return ls.Graph(perm, edges, {v: rng.randint(1, 50) for v in perm},
                    {v: rng.randint(1, 100) for v in perm})


def compare(g, points, method, row):
    least = min(p for p, _ in points)
    got = ls.min_peak(g, method).schedule.peak
    row["above"] += got > least
    row["ratio"] = max(row["ratio"], got / least)
    vanilla = ls.CanonicalStrategy(g, [set(g.labels)]).schedule.peak
    for f in FRACTIONS:
        budget = int(least + f * (vanilla - least))
        best = min(c for p, c in points if p <= budget)
        row["budgets"] += 1
        try:
            cost = ls.solve(g, budget=budget, method=method).schedule.recompute_cost
        except ls.InfeasibleBudgetError:
            row["missed"] += 1
            continue
        row["costlier"] += cost > best


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--graphs", type=int, default=500, help="random DAGs to try")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    rows = {m: {"above": 0, "ratio": 1.0, "budgets": 0, "missed": 0, "costlier": 0}
            for m in METHODS}
    start = time.perf_counter()
    for _ in range(args.graphs):
        g = random_dag(rng)
        points = [(p, c) for p, c, _ in brute_schedule_points(g)]
        for m in METHODS:
            compare(g, points, m, rows[m])
    print(machine_line())
    print(f"{args.graphs} random DAGs of 4-8 nodes (seed {args.seed}), "
          f"{time.perf_counter() - start:.0f} s\n")
    print("| method | min_peak above the optimum (graphs) | largest ratio | budgets | "
          "no plan found though one fits | overhead above the least |")
    print("|---|---|---|---|---|---|")
    for m, r in rows.items():
        print(f"| {m} | {r['above']} | {r['ratio']:.3f} | {r['budgets']} | {r['missed']} | "
              f"{r['costlier']} |")


if __name__ == "__main__":
    main()
