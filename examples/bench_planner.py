"""Benchmark the planners on the seven graphs the paper's authors published.

For each graph: #V, #L_G, the minimal budget of the exact and approximate DP, the overhead of the
time-centric (TC) and memory-centric (MC) strategies at two budgets -- the minimal one of each
method and a large one (2 x M(V), where the DP fronts are widest) -- and wall times after Numba's
JIT warm-up. Each timed call starts from a cold family cache, so it includes enumerating the lower
sets. Prints a Markdown table and the machine, and writes the raw figures as JSON.

Targets (2-core machine): exact DP <= 10 s, approximate DP <= 0.5 s (<= 50 ms at the minimal
budget), min_budget <= 10 s, on every graph and both budgets. A second table times the
device-budget planner (``lowerset.min_peak`` and ``lowerset.solve`` at 0.9, 0.75 and 0.6 x the
plain step's predicted peak): <= 10 s exact, <= 0.5 s approximate per call, each on a fresh graph
(so the call builds the candidate pool).

Usage::

    python examples/bench_planner.py [--graphs DIR] [--names googlenet pspnet] [--json out.json]
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import lowerset as ls  # noqa: E402
from _machine import machine_info, machine_line  # noqa: E402

NAMES = ["pspnet", "unet", "resnet50", "resnet152", "vgg19", "densenet", "googlenet"]
# seconds per call: the pruned family ("approx") is the fast one; every other method searches
# a larger family ("ordered", "contracted", all lower sets: "exact") and has the exact's target
TARGETS = {"exact": 10.0, "ordered": 10.0, "contracted": 10.0, "approx": 0.5,
           "approx_min": 0.05, "min_budget": 10.0}
BUDGET_TARGETS = {"exact": 10.0, "ordered": 10.0, "contracted": 10.0, "approx": 0.5}


def default_graph_dir():
    env = os.environ.get("LOWERSET_GRAPHS")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "shared" / "graphs"


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def cold(G):
    """Forget the cached lower-set families so the next call pays for them."""
    for key in ("_family_cache", "_pareto_cache", "_paper_cache", "_flat_facts"):
        G.__dict__.pop(key, None)
    return G


def warm_up():
    g = ls.Graph(list("abcd"), [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")],
                 cost=dict(a=1, b=10, c=1, d=1), memory=dict(a=4, b=4, c=2, d=1))
    for method in ls.METHODS:
        b = ls.min_budget(g, method)
        for mode in ls.MODES:
            ls.solve(g, budget=b, mode=mode, method=method, model="paper")
        ls.min_peak(g, method)
    ls.baselines.chen_sqrtn(g)


def bench_graph(path, time_limit):
    G = ls.read_cg(path)
    row = {"graph": path.stem.replace("cg_", ""), "V": G.n, "T(V)": G.total_cost(),
           "M(V)": G.total_memory()}
    row["L_G"], row["t_enumerate"] = timed(ls.count_lower_sets, cold(G))
    large = 2 * G.total_memory()
    for method in ls.METHODS:
        try:
            b, t = timed(ls.min_budget, cold(G), method, time_limit=time_limit)
        except ls.SearchLimitError:
            row[f"{method}_min_budget"], row[f"{method}_t_min_budget"] = None, "timeout"
            continue
        row[f"{method}_min_budget"], row[f"{method}_t_min_budget"] = b, t
        for bname, budget in (("min", b), ("large", large)):
            for mode in ls.MODES:
                key = f"{method}_{mode}_{bname}"
                try:
                    s, t = timed(ls.solve, cold(G), budget, mode, method, model="paper",
                                 time_limit=time_limit)
                    row[key] = {"overhead": s.overhead, "peak": s.peak_memory, "k": len(s),
                                "seconds": t}
                except ls.SearchLimitError:
                    row[key] = {"overhead": None, "seconds": "timeout"}
    chen, t = timed(ls.baselines.chen_sqrtn, G)
    row["chen_sqrtn"] = {"overhead": chen.overhead, "peak": chen.peak_memory, "k": len(chen),
                         "seconds": t}
    return row


def bench_budgets(path, time_limit):
    """The device-budget planner on one graph (its default execution facts): min_peak, then
    solve at 0.9, 0.75 and 0.6 x the plain step's predicted peak, per method, each on a fresh
    graph (the first call builds the candidate pool): seconds, overhead (recomputed cost
    units), schedule peak."""
    G = ls.read_cg(path)
    plain = ls.schedule(G).peak
    row = {"graph": path.stem.replace("cg_", ""), "plain": plain,
           "chen": ls.baselines.chen_sqrtn(G).schedule.peak,
           "V": ls.CanonicalStrategy(G, [set(G.labels)]).schedule.peak}
    for method in ls.METHODS:
        try:
            s, t = timed(ls.min_peak, ls.read_cg(path), method, time_limit=time_limit)
        except ls.SearchLimitError:
            row[method] = {"min_peak": None, "t_min_peak": "timeout"}
            continue
        r = {"min_peak": s.schedule.peak, "t_min_peak": t,
             "min_peak_overhead": s.schedule.recompute_cost}
        for f in (0.9, 0.75, 0.6):
            try:
                s, t = timed(ls.solve, ls.read_cg(path), f * plain, method=method,
                             time_limit=time_limit)
                r[f"{f}"] = {"overhead": s.schedule.recompute_cost, "peak": s.schedule.peak,
                             "seconds": t}
            except ls.InfeasibleBudgetError as e:
                r[f"{f}"] = {"infeasible": e.min_budget}
        row[method] = r
    return row


def markdown_budgets(rows):
    head = ("| graph | plain peak (GB) | Chen's / [V] peak (GB) | min peak exact / approx (GB) | "
            "t min_peak exact / approx (s) | overhead at 0.9 / 0.75 / 0.6 x plain: exact; approx "
            "| t solve exact (s) | t solve approx (s) |")
    lines = [head, "|" + "---|" * 8]
    for r in rows:
        def cell(m, key):
            x = r[m].get(key)
            return "n/a" if x is None else f"{x / 1e9:.3f}"

        def over(m):
            out = []
            for f in ("0.9", "0.75", "0.6"):
                x = r[m].get(f, {})
                out.append("inf." if "infeasible" in x else str(x.get("overhead", "-")))
            return "/".join(out)

        def secs(m):
            return "/".join(fmt_s(r[m].get(f, {}).get("seconds", "-")) for f in
                            ("0.9", "0.75", "0.6"))
        lines.append(
            f"| {r['graph']} | {r['plain'] / 1e9:.3f} | {r['chen'] / 1e9:.3f} / "
            f"{r['V'] / 1e9:.3f} | {cell('exact', 'min_peak')} / {cell('approx', 'min_peak')} "
            f"| {fmt_s(r['exact']['t_min_peak'])} / {fmt_s(r['approx']['t_min_peak'])} | "
            f"{over('exact')}; {over('approx')} | {secs('exact')} | {secs('approx')} |")
    return "\n".join(lines)


def fmt_s(x):
    return x if isinstance(x, str) else f"{x:.3f}"


def gb(x):
    return "-" if x is None else f"{x / 1e9:.3f}"


def markdown(rows):
    head = ("| graph | #V | #L_G | min B exact (GB) | min B approx (GB) | Chen peak (GB) "
            "| TC/MC ovh exact @min | TC/MC ovh approx @min | TC/MC ovh exact @2M(V) "
            "| t min_budget exact / approx (s) | t exact TC/MC @min (s) "
            "| t exact TC/MC @2M(V) (s) "
            "| t approx TC/MC @min (s) | t approx TC/MC @2M(V) (s) |")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        def ov(m, b):
            return f"{r[f'{m}_time_{b}']['overhead']}/{r[f'{m}_memory_{b}']['overhead']}"

        def ts(m, b):
            t, mem = r[f"{m}_time_{b}"]["seconds"], r[f"{m}_memory_{b}"]["seconds"]
            return f"{fmt_s(t)}/{fmt_s(mem)}"

        lines.append(
            f"| {r['graph']} | {r['V']} | {r['L_G']} | {gb(r['exact_min_budget'])} "
            f"| {gb(r['approx_min_budget'])} | {gb(r['chen_sqrtn']['peak'])} "
            f"| {ov('exact', 'min')} | {ov('approx', 'min')} | {ov('exact', 'large')} "
            f"| {fmt_s(r['exact_t_min_budget'])}/{fmt_s(r['approx_t_min_budget'])} "
            f"| {ts('exact', 'min')} | {ts('exact', 'large')} | {ts('approx', 'min')} "
            f"| {ts('approx', 'large')} |")
    return "\n".join(lines)


def check_targets(rows):
    misses = []
    for r in rows:
        for key, val in r.items():
            if not isinstance(val, dict) or "seconds" not in val or key == "chen_sqrtn":
                continue
            sec = val["seconds"]
            method = key.split("_")[0]
            limit = TARGETS["approx_min"] if key.startswith("approx") and key.endswith("_min") \
                else TARGETS[method]
            if sec == "timeout" or sec > limit:
                misses.append(f"{r['graph']} {key}: {fmt_s(sec)} s > {limit} s")
        for method in ls.METHODS:
            sec = r[f"{method}_t_min_budget"]
            if sec == "timeout" or sec > TARGETS["min_budget"]:
                misses.append(f"{r['graph']} {method} min_budget: {fmt_s(sec)} s")
    return misses


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--graphs", type=Path, default=default_graph_dir(),
                    help="folder of cg_*.txt (default: $LOWERSET_GRAPHS or ../shared/graphs)")
    ap.add_argument("--names", nargs="*", default=NAMES, choices=NAMES)
    ap.add_argument("--json", type=Path, default=None, help="write raw figures here")
    ap.add_argument("--time-limit", type=float, default=120.0, help="seconds per planner call")
    args = ap.parse_args(argv)
    paths = [args.graphs / f"cg_{n}.txt" for n in args.names]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        ap.error(f"graph files not found: {missing}; set --graphs or LOWERSET_GRAPHS")
    info = machine_info()
    _, t = timed(warm_up)
    rows, budget_rows = [], []
    for p in paths:
        rows.append(bench_graph(p, args.time_limit))
        budget_rows.append(bench_budgets(p, args.time_limit))
        print(f"  {rows[-1]['graph']}: done", file=sys.stderr, flush=True)
    data = {"machine": info, "warm_up_s": t, "rows": rows, "budgets": budget_rows}
    print(page_markdown(data))
    if args.json:
        args.json.write_text(json.dumps(data, indent=1))
    return 0


def page_markdown(data):
    """The Markdown of a run's JSON: the machine, both tables and whether the targets hold."""
    rows, budget_rows = data["rows"], data["budgets"]
    warm = data.get("warm_up_s")
    misses = check_targets(rows)
    met = "all met" if not misses else "MISSED: " + "; ".join(misses)
    slow = [f"{r['graph']} {m} {f}: {fmt_s(r[m][f]['seconds'])} s" for r in budget_rows
            for m in ls.METHODS for f in ("0.9", "0.75", "0.6")
            if "seconds" in r[m].get(f, {}) and r[m][f]["seconds"] > BUDGET_TARGETS[m]]
    slow += [f"{r['graph']} {m} min_peak: {fmt_s(r[m]['t_min_peak'])} s" for r in budget_rows
             for m in ls.METHODS if r[m]["t_min_peak"] == "timeout"
             or r[m]["t_min_peak"] > BUDGET_TARGETS[m]]
    head = [f"Machine: {machine_line(data['machine'])}"]
    if warm is not None:
        head.append(f"JIT warm-up (compile or load from cache): {warm:.2f} s")
    return "\n".join(head + [
        "", markdown(rows), "",
        "Targets (exact, ordered, contracted <= 10 s, approx <= 0.5 s and <= 50 ms at "
        "min budget, min_budget <= 10 s): " + met, "",
        "Planning to device budgets (lowerset.solve / min_peak, the graphs' default "
        "execution facts, each call on a fresh graph):", "",
        markdown_budgets(budget_rows), "",
        "Targets (per call: <= 10 s exact, ordered, contracted, <= 0.5 s approx): "
        + ("all met" if not slow else "MISSED: " + "; ".join(slow))])


if __name__ == "__main__":
    sys.exit(main())
