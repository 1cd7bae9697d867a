"""Is static planning worth it? ``lowerset.solve`` against DTR, a runtime cache, on one step.

For each network (the authors' seven graphs with default execution facts; where Chainer is
installed, the same seven networks traced at ``reproduce_table1.py``'s CPU preset and two small
traced nets: the walkthrough's convolutional net and an MLP with dropout) this script takes 12
budgets evenly spaced from our least peak (``lowerset.min_peak``) to the plain step's peak
(``lowerset.schedule(graph).peak``), all whole-step bytes, and at each budget records

- ``solve``'s recomputation (``schedule.recompute_cost``, cost units) and planning time;
- ``lowerset.dtr``'s recomputation under each heuristic (h_DTR, h_DTR-local, LRU, largest
  first) and simulation time, or that DTR cannot complete the step there;

then searches the least budget at which each heuristic completes (bisection below the least
completing budget of the ladder; DTR's feasibility is not monotone in the budget, so this is
the least budget found, not a proven minimum). It checks the targets of issue 27: at every
budget where h_DTR completes, ``solve`` fits it with at most h_DTR's recomputation; our least
peak is at most DTR's least budget.

Writes ``bench_dtr.json``, ``bench_dtr.md`` (a summary table and one table per network) and
``bench_dtr.png`` (recomputation against budget, one line per method, one panel per network)
to ``--out`` (default ``results/dtr``).

Usage::

    python examples/bench_dtr.py [--networks vgg19 resnet50 ...] [--no-traced] [--jobs 2]

``--jobs`` runs that many networks at once (one process each; default 2, the cores of the
README's machine).
"""

import argparse
import json
import pathlib
import sys
import time
import warnings
from concurrent.futures import ProcessPoolExecutor

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

import lowerset  # noqa: E402
from examples._machine import machine_line  # noqa: E402

HEURISTICS = ("dtr", "dtr_local", "lru", "size")
LABELS = {"solve": "solve", "dtr": "DTR h_DTR", "dtr_local": "DTR h_local", "lru": "DTR LRU",
          "size": "DTR size"}
CG = ("vgg19", "unet", "resnet50", "googlenet", "pspnet", "resnet152", "densenet")
SMALL = ("smallnet", "mlp")
SLOW = ("pspnet", "googlenet")  # exact planning at a budget takes 15-50 s on these
N_BUDGETS = 12
BISECT = 8


# -- graphs -------------------------------------------------------------------------------------


def graph_of(key, graphs_dir):
    """The graph of `key`: ``cg/<name>`` (an authors' file), ``traced/<network>`` or
    ``traced/smallnet``, ``traced/mlp`` (Chainer, traced here)."""
    kind, name = key.split("/")
    if kind == "cg":
        return lowerset.read_cg(pathlib.Path(graphs_dir) / f"cg_{name}.txt")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _trace(name)


def _trace(name):
    import chainer
    import chainer.functions as F

    from chainer_ext import trace

    np.random.seed(0)
    if name == "smallnet":
        from examples.walkthrough import SmallNet

        model, batch, shape, n_class = SmallNet(), 48, (3, 32, 32), 10
    elif name == "mlp":
        model, batch, shape, n_class = _mlp(), 64, (784,), 10
    else:
        from examples.models import NETWORKS
        from examples.reproduce_table1 import PRESETS

        net = NETWORKS[name]
        b, size = PRESETS["cpu"][name]
        model = net.build(size)
        x, t = net.make_batch(b, size)
        with chainer.using_config("train", True):
            return trace(lambda: net.loss(model, x, t))
    x = np.random.rand(batch, *shape).astype(np.float32)
    t = np.random.randint(0, n_class, size=batch).astype(np.int32)
    with chainer.using_config("train", True):
        return trace(lambda: F.softmax_cross_entropy(model(x), t))


def _mlp(depth=8, width=1024):
    """`depth` linear layers of `width` units with ReLU and dropout (stochastic state)."""
    import chainer
    import chainer.functions as F
    import chainer.links as L

    class MLP(chainer.ChainList):
        def __init__(self):
            super().__init__(*([L.Linear(None, width) for _ in range(depth)] + [L.Linear(None,
                                                                                         10)]))

        def forward(self, x):
            for link in list(self)[:-1]:
                x = F.dropout(F.relu(link(x)), 0.2)
            return list(self)[-1](x)

    return MLP()


# -- one network --------------------------------------------------------------------------------


def run_dtr(g, budget, heuristic):
    """(recompute cost or None, seconds, reason when it does not complete)."""
    t0 = time.perf_counter()
    try:
        s = lowerset.dtr(g, budget, heuristic)
    except lowerset.InfeasibleBudgetError as e:
        return None, time.perf_counter() - t0, e.reason
    return s.recompute_cost, time.perf_counter() - t0, None


def least_dtr_budget(g, heuristic, ladder, steps=BISECT):
    """The least budget found at which DTR completes, with its recomputation there: bisection
    between the greatest failing budget below the least completing one of the ladder (or the
    resident bytes) and it."""
    done = [(b, r[0]) for b, r in ladder if r[0] is not None]
    if done:
        hi, cost = min(done)
    else:
        hi, cost = lowerset.schedule(lowerset.CanonicalStrategy(g, [set(g.labels)])).peak, 0
    lo = max([b for b, r in ladder if r[0] is None and b < hi], default=g.facts.resident)
    for _ in range(steps):
        mid = (lo + hi) // 2
        if mid in (lo, hi):
            break
        c = run_dtr(g, mid, heuristic)[0]
        if c is not None:
            hi, cost = mid, c
        else:
            lo = mid
    return {"budget": int(hi), "failing_below": int(lo), "recompute_cost": int(cost)}


def bench(key, graphs_dir):
    """Every figure of network `key` (see the module docstring)."""
    t0 = time.perf_counter()
    g = graph_of(key, graphs_dir)
    trace_s = time.perf_counter() - t0
    plain = lowerset.schedule(g).peak
    keep = lowerset.schedule(lowerset.CanonicalStrategy(g, [set(g.labels)])).peak
    t0 = time.perf_counter()
    least = lowerset.min_peak(g).schedule.peak
    res = {"network": key, "nodes": g.n, "T(V)": int(g.total_cost()), "trace_s": trace_s,
           "plain_peak": int(plain), "keep_all_peak": int(keep), "least_peak": int(least),
           "min_peak_s": time.perf_counter() - t0, "rows": []}
    ladders = {h: [] for h in HEURISTICS}
    for b in sorted({int(x) for x in np.linspace(least, plain, N_BUDGETS)}):
        t0 = time.perf_counter()
        s = lowerset.solve(g, b)
        row = {"budget": b, "solve": s.schedule.recompute_cost,
               "solve_peak": int(s.schedule.peak), "solve_s": time.perf_counter() - t0}
        for h in HEURISTICS:
            r = run_dtr(g, b, h)
            ladders[h].append((b, r))
            row[h], row[f"{h}_s"], row[f"{h}_why"] = r
        res["rows"].append(row)
    res["dtr_least"] = {h: least_dtr_budget(g, h, ladders[h]) for h in HEURISTICS}
    return res


# -- targets and report -------------------------------------------------------------------------


def targets(res):
    """The issue's targets for one network: budgets where h_DTR completes and solve does at
    most as much recomputation, DTR's wins, and least peak against DTR's least budget."""
    done = [r for r in res["rows"] if r["dtr"] is not None]
    wins = [r for r in done if r["solve"] > r["dtr"]]
    return {"dtr_completes": len(done), "solve_at_most_dtr": len(done) - len(wins),
            "dtr_wins": [(r["budget"], r["solve"], r["dtr"]) for r in wins],
            "least_le_dtr_least": {h: res["least_peak"] <= v["budget"]
                                   for h, v in res["dtr_least"].items()}}


def _gb(b):
    return f"{b / 1e9:.3f}" if b >= 1e8 else f"{b / 1e6:.1f} MB"


def summary_table(results):
    head = ("| network | nodes | plain peak | our least peak | DTR least budget: h_DTR / local / "
            "LRU / size | h_DTR's recomputation there (x T(V)) | budgets where h_DTR completes: "
            "solve <= h_DTR | DTR wins (budget: solve vs h_DTR) |\n"
            "|---|---:|---:|---:|---|---:|---|---|\n")
    lines = []
    for res in results:
        t = targets(res)
        least = " / ".join(_gb(res["dtr_least"][h]["budget"]) for h in HEURISTICS)
        wins = "; ".join(f"{_gb(b)}: {s} vs {d}" for b, s, d in t["dtr_wins"]) or "none"
        at_least = res["dtr_least"]["dtr"]["recompute_cost"] / res["T(V)"]
        lines.append(f"| {res['network']} | {res['nodes']} | {_gb(res['plain_peak'])} | "
                     f"{_gb(res['least_peak'])} | {least} | {at_least:.2f} | "
                     f"{t['solve_at_most_dtr']} of {t['dtr_completes']} | {wins} |")
    return head + "\n".join(lines) + "\n"


def network_table(res):
    out = [f"### {res['network']} ({res['nodes']} nodes, T(V) = {res['T(V)']} cost units)\n",
           "| budget (GB) | solve | " + " | ".join(LABELS[h] for h in HEURISTICS)
           + " | solve s | DTR s (max) |",
           "|---:|---:|" + "---:|" * len(HEURISTICS) + "---:|---:|"]
    for r in res["rows"]:
        cells = [str(r[h]) if r[h] is not None else "-" for h in HEURISTICS]
        dtr_s = max(r[f"{h}_s"] for h in HEURISTICS)
        out.append(f"| {_gb(r['budget'])} | {r['solve']} | " + " | ".join(cells)
                   + f" | {r['solve_s']:.2f} | {dtr_s:.2f} |")
    return "\n".join(out) + "\n"


def picture(results, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(results)
    cols = min(n, 4)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.2 * rows), squeeze=False)
    for ax, res in zip(axes.flat, results):
        x = [r["budget"] / 1e9 for r in res["rows"]]
        for key in ("solve",) + HEURISTICS:
            y = [r[key] if r[key] is not None else np.nan for r in res["rows"]]
            ax.plot(x, y, marker="o" if key == "solve" else ".", lw=2 if key == "solve" else 1,
                    label=LABELS[key])
        ax.set_yscale("symlog", linthresh=10)
        ax.set_title(f"{res['network']} ({res['nodes']} nodes)", fontsize=9)
        ax.set_xlabel("budget (GB, whole step)", fontsize=8)
        ax.set_ylabel("recomputation (cost units)", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def has_chainer():
    try:
        import chainer_ext  # noqa: F401
    except ImportError:
        return False
    return True


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--networks", nargs="*", default=None,
                   help=f"names among {CG + SMALL} (default: all)")
    p.add_argument("--no-traced", action="store_true", help="the authors' graphs only")
    p.add_argument("--graphs", default=str(ROOT.parent / "shared" / "graphs"),
                   help="folder of the authors' cg_*.txt files")
    p.add_argument("--jobs", type=int, default=2, help="networks run in parallel (default 2)")
    p.add_argument("--out", default=str(ROOT / "results" / "dtr"))
    p.add_argument("--render", metavar="JSON", help="write the markdown and the picture of an "
                   "earlier run's bench_dtr.json to --out, running nothing")
    return p.parse_args(argv)


def page_markdown(data):
    """The Markdown of a run's JSON (``bench_dtr.json``): the machine, the wall time, the
    summary and one table per network."""
    jobs = f" with {data['jobs']} job(s)" if "jobs" in data else ""
    results = data["results"]
    return (f"Machine: {data['machine']}. Total {data['elapsed_s'] / 60:.1f} min{jobs}.\n\n"
            + summary_table(results) + "\n" + "\n".join(network_table(r) for r in results))


def write_report(data, out):
    """bench_dtr.md and bench_dtr.png of a run's JSON `data` in folder `out`."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench_dtr.md").write_text(page_markdown(data))
    picture(data["results"], out / "bench_dtr.png")


def main(argv=None):
    a = parse_args(argv)
    out = pathlib.Path(a.out)
    if a.render:
        write_report(json.loads(pathlib.Path(a.render).read_text()), out)
        return
    names = a.networks or list(CG + SMALL)
    keys = [f"cg/{n}" for n in names if n in CG]
    if not a.no_traced and has_chainer():
        keys += [f"traced/{'densenet161' if n == 'densenet' else n}" for n in names]
    start = time.perf_counter()
    with ProcessPoolExecutor(max_workers=a.jobs) as pool:  # the slowest to plan first
        futures = {k: pool.submit(bench, k, a.graphs)
                   for k in sorted(keys, key=lambda k: k.split("/")[1] not in SLOW)}
        results = []
        for k in keys:
            results.append(futures[k].result())
            t = targets(results[-1])
            print(f"{k}: {results[-1]['nodes']} nodes, h_DTR completes at {t['dtr_completes']} "
                  f"of {len(results[-1]['rows'])} budgets, solve <= h_DTR at "
                  f"{t['solve_at_most_dtr']}, {time.perf_counter() - start:.0f} s", flush=True)
    info = machine_line()
    elapsed = time.perf_counter() - start
    out.mkdir(parents=True, exist_ok=True)
    data = {"machine": info, "elapsed_s": elapsed, "jobs": a.jobs, "results": results,
            "targets": {r["network"]: targets(r) for r in results}}
    (out / "bench_dtr.json").write_text(json.dumps(data, indent=1))
    write_report(data, out)
    print(summary_table(results))
    print(f"wrote {out}/bench_dtr.md, .json, .png ({elapsed / 60:.1f} min)")


if __name__ == "__main__":
    main()
