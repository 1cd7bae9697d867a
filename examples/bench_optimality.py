"""How far the device-budget planner is from the optimum, and what general recomputation gains.

Three samples, each compared with the planner (``lowerset.min_peak`` and ``lowerset.solve`` at
budgets), the canonical optimum (``lowerset.optimum``: the least over every lower-set sequence,
proven by HiGHS, or its bound at the time limit) and the general optimum
(``lowerset.optimum(model="general")``: Checkmate's model, any value recomputed any number of
times anywhere):

- **random**: DAGs of 4-8 nodes (a G(n, p) graph from networkx, every edge oriented from the
  smaller to the larger node, relabelled at random; costs 1-50 cost units, memory 1-100 bytes,
  the paper's conservative execution facts). The exhaustive search of
  ``lowerset.bruteforce.brute_schedule_points`` gives the least peak and, at the budgets (that
  least peak and one and two thirds of the way to the peak of [V]), the least recomputation.
  Per method: graphs where ``min_peak`` is above the optimum, budgets where ``solve`` finds no
  plan though one fits or recomputes more than the least; graphs where the canonical MILP
  differs from the exhaustive search; graphs where the general optimum is below the canonical
  one, and those where it needs a value recomputed more than once (the general optimum with
  each value recomputed at most once is higher).
- **traced**: small Chainer steps traced for real facts (``chainer_ext.trace``): the tiny steps
  of tests/chainer_ext/tiny_steps.py at two batch sizes (x1, x16), and the test networks of
  tests/chainer_ext/chainer_ext_nets.py (batch 32).
- **networks**: the seven networks: the authors' graphs (``cg_*.txt``, default facts;
  ``--networks-from cg``) or traced at the CPU preset of examples/reproduce_table1.py
  (``--networks-from traced``).

For the last two, the planner's least peak and its recomputation at 0.9, 0.75 and 0.6 x the
plain step's peak P (and with ``solve(..., beyond_canonical=True)``, which may return a drop
set, a plan between the two models) are set against the canonical and general optimum (or
bound), with the
planner's gap in %: (planner - bound) / bound for peaks; for recomputation the planner's cost
units against the optimum's (or its bound). A general optimum or bound also bounds the
canonical optimum (every canonical schedule is a general one) and is used where it is higher.
Peaks are bytes (GB = 1e9 bytes), costs cost units (what ``schedule.recompute_cost`` counts).
Prints Markdown tables and the machine; ``--json`` writes the figures, ``--render`` prints the
tables of such a file again.

Usage::

    .venv/bin/python examples/bench_optimality.py [--graphs 500] [--seed 0] [--time-limit 60]
        [--samples random traced networks] [--networks-from cg] [--json out.json]
"""

import argparse
import json
import random
import sys
import time
from pathlib import Path

import networkx as nx

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import lowerset as ls  # noqa: E402
from _machine import machine_line  # noqa: E402
from lowerset.bruteforce import brute_schedule_points  # noqa: E402
from lowerset.optimality.general import solve_general  # noqa: E402

METHODS = ("approx", "exact")
FRACTIONS = (0.0, 1 / 3, 2 / 3)
PLAIN_FRACTIONS = (0.9, 0.75, 0.6)
NETWORKS = ("pspnet", "unet", "resnet50", "resnet152", "vgg19", "densenet", "googlenet")


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


# -- random DAGs ---------------------------------------------------------------------------------


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


def compare_models(g, points, row):
    """The MILPs on one random DAG: canonical against the exhaustive search, general below."""
    least = min(p for p, _ in points)
    tie = min(c for p, c in points if p == least)
    canon = ls.optimum(g)
    row["milp_differs"] += (canon.peak, canon.recompute_cost) != (least, tie)
    gen = ls.optimum(g, model="general")
    if gen.peak < least:
        row["general_lower"] += 1
        row["general_gain"] = max(row["general_gain"], 1 - gen.peak / least)
        once = solve_general(g, None, None, once=True)
        row["needs_twice"] += once["peak"] > gen.peak
    row["graphs"] += 1


def random_sample(args):
    rng = random.Random(args.seed)
    rows = {m: {"above": 0, "ratio": 1.0, "budgets": 0, "missed": 0, "costlier": 0}
            for m in METHODS}
    models = {"graphs": 0, "milp_differs": 0, "general_lower": 0, "general_gain": 0.0,
              "needs_twice": 0}
    start = time.perf_counter()
    for _ in range(args.graphs):
        g = random_dag(rng)
        points = [(p, c) for p, c, _ in brute_schedule_points(g)]
        for m in METHODS:
            compare(g, points, m, rows[m])
        compare_models(g, points, models)
    seconds = time.perf_counter() - start
    result = {"methods": rows, "models": models, "seconds": seconds, "seed": args.seed}
    print(random_markdown(result))
    return result


def random_markdown(result):
    """Markdown of :func:`random_sample`'s result."""
    models = result["models"]
    seed = f"seed {result['seed']}" if "seed" in result else "seed not recorded"
    lines = [f"{models['graphs']} random DAGs of 4-8 nodes ({seed}), {result['seconds']:.0f} s",
             "", "| method | min_peak above the optimum (graphs) | largest ratio | budgets | "
             "no plan found though one fits | overhead above the least |",
             "|---|---|---|---|---|---|"]
    for m, r in result["methods"].items():
        lines.append(f"| {m} | {r['above']} | {r['ratio']:.3f} | {r['budgets']} | "
                     f"{r['missed']} | {r['costlier']} |")
    lines += ["", f"canonical MILP differs from the exhaustive search on {models['milp_differs']} "
              f"of {models['graphs']} graphs; the general optimum is below the canonical one on "
              f"{models['general_lower']} (by up to {100 * models['general_gain']:.1f}%), and "
              f"on {models['needs_twice']} of those it recomputes a value more than once (at "
              "most once each, its least peak is higher)", ""]
    return "\n".join(lines)


# -- traced steps and the seven networks --------------------------------------------------------


def traced_sample():
    """(name, graph) of the small traced steps."""
    import chainer

    from chainer_ext import trace

    sys.path.insert(0, str(HERE.parent / "tests" / "chainer_ext"))
    import chainer_ext_nets as nets
    from tiny_steps import STEPS

    out = []
    with chainer.using_config("train", True):
        for name, make in STEPS.items():
            for scale in (1, 16):
                out.append((f"tiny {name} x{scale}", trace(make(scale))))
        for name in ("mlp", "resnet", "unet", "inception", "dropout", "split", "twoheads"):
            model, x, t, lossfn = nets.make(name, batch=32)
            out.append((f"{name} (batch 32)", trace(lambda: lossfn(model, x, t))))
    return out


def network_sample(source, graphs_dir):
    """(name, graph) of the seven networks: the authors' graphs or traced at the CPU preset."""
    if source == "cg":
        return [(name, ls.read_cg(Path(graphs_dir) / f"cg_{name}.txt")) for name in NETWORKS]
    import chainer
    import numpy as np

    import reproduce_table1 as t1
    from chainer_ext import trace

    out = []
    for name in NETWORKS:
        key = "densenet161" if name == "densenet" else name   # reproduce_table1's name
        net = t1.NETWORKS[key]
        batch, size = t1.PRESETS["cpu"][key]
        np.random.seed(0)
        model = net.build(size)
        x, t = net.make_batch(batch, size, xp=np)
        with chainer.using_config("train", True):
            out.append((name, trace(lambda: net.loss(model, x, t))))
    return out


def _optimum(g, budget, model, time_limit):
    """(value, proven, result) of one MILP: value is the optimum or the bound of the objective
    (bytes without a budget, cost units with one); None when infeasible."""
    try:
        o = ls.optimum(g, budget, model=model, time_limit=time_limit)
    except ls.InfeasibleBudgetError:
        return None, True, None
    if o.status == "optimal":
        return (o.peak if budget is None else o.recompute_cost), True, o
    return o.lower_bound, False, o


def _planner(g, budget, beyond_canonical=False):
    try:
        s = ls.min_peak(g) if budget is None else ls.solve(g, budget,
                                                           beyond_canonical=beyond_canonical)
    except ls.InfeasibleBudgetError:
        return None
    return s.schedule.peak if budget is None else s.schedule.recompute_cost


def measure(name, g, time_limit):
    """One row: the planner, the canonical and the general optimum at the least peak and at
    0.9/0.75/0.6 x the plain step."""
    plain = ls.schedule(g).peak
    row = {"name": name, "nodes": g.n, "plain": plain, "points": []}
    least = ls.min_peak(g)
    row["planner_peak"] = least.schedule.peak
    row["planner_peak_cost"] = least.schedule.recompute_cost
    for budget in [None] + [int(f * plain) for f in PLAIN_FRACTIONS]:
        t0 = time.perf_counter()
        point = {"budget": budget, "planner": _planner(g, budget)}
        if budget is not None:
            point["planner_dropsets"] = _planner(g, budget, beyond_canonical=True)
        for model in ("canonical", "general"):
            value, proven, o = _optimum(g, budget, model, time_limit)
            point[model] = value
            point[model + "_proven"] = proven
            point[model + "_coarse"] = bool(o is not None and o.coarse)
            if o is not None and o.recomputed is not None:
                point["general_twice"] = int((o.recomputed >= 2).sum())
        point["seconds"] = time.perf_counter() - t0
        row["points"].append(point)
    return row


def _fmt(value, proven, unit):
    """A cell: bytes in `unit` ("GB" or "MB") or cost units ("cost"); ">=" marks a bound."""
    if value is None:
        return "infeasible"
    if value == float("-inf"):
        return "no bound"
    if unit == "cost":
        text = f"{int(value)}"
    else:
        text = f"{value / (1e9 if unit == 'GB' else 1e6):.4f}"
    return text if proven else f">= {text}"


def _gap(planner, value, proven):
    if planner is None or value is None or value <= 0:
        return "-"
    pct = 100.0 * (planner - value) / value
    return f"{pct:.1f}%" if proven else f"<= {pct:.1f}%"


def _canonical_bound(point):
    """The canonical optimum or bound: a general optimum or bound also bounds it (every
    canonical schedule is a general one)."""
    value, proven = point["canonical"], point["canonical_proven"]
    general = point["general"]
    if not proven and value is not None and general is not None and general > value:
        value = general
    return value, proven


def rows_markdown(title, rows):
    """Markdown of the rows of the traced or the networks sample, under heading `title`."""
    points = [[{**p, **dict(zip(("canonical", "canonical_proven"), _canonical_bound(p)))}
               for p in r["points"]] for r in rows]
    unit = "GB" if max(r["plain"] for r in rows) >= 1e9 else "MB"
    lines = [f"### {title}", "",
             f"| step | #V | plain peak ({unit}) | planner least peak (cost) | canonical optimum "
             "| gap | general optimum | gap |", "|---|---|---|---|---|---|---|---|"]
    for r, ps in zip(rows, points):
        p = ps[0]
        lines.append(f"| {r['name']} | {r['nodes']} | {_fmt(r['plain'], True, unit)} | "
                     f"{_fmt(r['planner_peak'], True, unit)} ({r['planner_peak_cost']}) | "
                     f"{_fmt(p['canonical'], p['canonical_proven'], unit)} | "
                     f"{_gap(r['planner_peak'], p['canonical'], p['canonical_proven'])} | "
                     f"{_fmt(p['general'], p['general_proven'], unit)} | "
                     f"{_gap(r['planner_peak'], p['general'], p['general_proven'])} |")
    keys = ("planner", "planner_dropsets", "canonical", "general")
    if not any("planner_dropsets" in p for ps in points for p in ps[1:]):   # runs before it
        keys = keys[:1] + keys[2:]
    lines += ["", "Recomputation (cost units) at 0.9 / 0.75 / 0.6 x the plain peak: planner; "
              + ("planner with drop sets (`solve(..., beyond_canonical=True)`); "
                 if "planner_dropsets" in keys else "")
              + "canonical optimum (>= a bound); general optimum", "",
              "| step | " + " | ".join(k.replace("planner_dropsets", "drop sets") for k in keys)
              + " |", "|---" * (len(keys) + 1) + "|"]
    for r, ps in zip(rows, points):
        cells = [" / ".join(_fmt(p[key], p.get(key + "_proven", True), "cost") for p in ps[1:])
                 for key in keys]
        lines.append(f"| {r['name']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def sample_title(sample, settings):
    """The heading of the traced or the networks sample."""
    if sample == "traced":
        return "Small traced steps"
    return (f"The seven networks ({settings.get('networks_from', 'cg')}), time limit "
            f"{settings.get('time_limit', 60.0):.0f} s per MILP")


def markdown(data):
    """The Markdown of a run's JSON: the machine, the settings and each sample's tables."""
    settings = data.get("settings", {})
    parts = [f"Machine: {data.get('machine', 'not recorded')}."]
    if settings:
        parts.append("Command: `examples/bench_optimality.py " + " ".join(
            f"--{k.replace('_', '-')} {' '.join(v) if isinstance(v, list) else v}"
            for k, v in settings.items()) + "`.")
    if "random" in data:
        parts.append(random_markdown(data["random"]))
    for sample in ("traced", "networks"):
        if sample in data:
            parts.append(rows_markdown(sample_title(sample, settings), data[sample]))
    return "\n\n".join(parts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--graphs", type=int, default=500, help="random DAGs to try")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--time-limit", type=float, default=60.0,
                    help="seconds per MILP (traced steps and networks)")
    ap.add_argument("--samples", nargs="*", default=["random", "traced", "networks"],
                    choices=["random", "traced", "networks"])
    ap.add_argument("--networks-from", choices=["cg", "traced"], default="cg")
    ap.add_argument("--graphs-dir", default=str(HERE.parents[1] / "shared" / "graphs"))
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--render", type=Path, default=None,
                    help="print the tables of an earlier run's --json and stop")
    args = ap.parse_args()
    if args.render:
        print(markdown(json.loads(args.render.read_text())))
        return
    settings = {"graphs": args.graphs, "seed": args.seed, "time_limit": args.time_limit,
                "samples": args.samples, "networks_from": args.networks_from}
    out = {"machine": machine_line(), "settings": settings}
    print(out["machine"] + "\n")
    if "random" in args.samples:
        out["random"] = random_sample(args)
    for sample in ("traced", "networks"):
        if sample not in args.samples:
            continue
        graphs = (traced_sample() if sample == "traced" else
                  network_sample(args.networks_from, args.graphs_dir))
        rows = []
        for name, g in graphs:
            t0 = time.perf_counter()
            rows.append(measure(name, g, args.time_limit))
            print(f"<!-- {name}: {time.perf_counter() - t0:.0f} s -->", flush=True)
        out[sample] = rows
        print(rows_markdown(sample_title(sample, settings), rows))
    if args.json:
        args.json.write_text(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
