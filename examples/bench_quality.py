"""How far the default planner lands from the exact search: ``min_peak`` and ``solve`` at
three budgets with default arguments (``method="auto"``, its time limit) against
``method="exact"`` (all lower sets, local search, a limit of ``--exact-limit`` seconds, and
no family windowed: ``lowerset.dp.WINDOWED_NODES`` and ``WINDOWED_CONTRACTED_NODES`` are set
past the graph for it), on the graphs where the exact search finishes within it: the traced
LLaMA-style stack at 1-2 layers and GPT-like stack at 6-12 (``examples/traced_graphs.py``,
where PyTorch is installed), the block families of ``examples/block_graphs.py`` up to 1,000
nodes, and the authors' seven graphs (``../shared/graphs``, where present).
``--graphs resnet/250 ...`` measures others. From ``lowerset.dp.windowed_from(method)`` nodes
on (500 for the contracted family, 2,000 for the others) the default's DP is windowed, and the
family column says so.

Budgets: 0.9 x the plain step's peak, halfway between the exact least peak and the plain
step, and the exact least peak + 10% of that gap. Per graph and call: each planner's peak
(bytes), recompute cost (cost units) and seconds; the distance of the default's least peak
(%) and of its recomputation at each budget (%, and cost units) from the exact one's.

Target (issue 51): least peak within 1%, recomputation within 5% or one cost unit.

Usage::

    python examples/bench_quality.py [--graphs llama/1 gpt/6 inception/500 cg/googlenet ...]
        [--exact-limit 600] [--out results/bench_quality]

writes ``<out>.json`` and ``<out>.md`` and prints the Markdown.
"""

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import block_graphs  # noqa: E402
import lowerset as ls  # noqa: E402
import traced_graphs  # noqa: E402
from _machine import machine_info, machine_line  # noqa: E402

GRAPHS_DIR = HERE.parent.parent / "shared" / "graphs"
CG = ("vgg19", "unet", "resnet50", "resnet152", "densenet", "googlenet", "pspnet")
BLOCK_NODES = (100, 250, 500, 1000)
TRACED = ("llama/1", "llama/2", "gpt/6", "gpt/12")
TARGET_PEAK, TARGET_COST = 0.01, 0.05


def default_graphs():
    """The specs measured by default: traced (with PyTorch), block families, the authors'."""
    out = list(TRACED) if traced_graphs.available() else []
    for family in block_graphs.FAMILIES:
        out += [f"{family}/{block_graphs.sized(family, n)[0]}" for n in BLOCK_NODES]
    out += [f"cg/{name}" for name in CG if (GRAPHS_DIR / f"cg_{name}.txt").is_file()]
    return list(dict.fromkeys(out))


def graph(spec):
    """A fresh graph for `spec`: "cg/<name>", "gpt/<layers>", "llama/<layers>" or
    "<block family>/<depth>"."""
    kind, name = spec.split("/")
    if kind == "cg":
        return ls.read_cg(GRAPHS_DIR / f"cg_{name}.txt")
    if kind in traced_graphs.STACKS:
        return traced_graphs.traced(kind, int(name))
    return block_graphs.build(kind, int(name))


def _call(fn):
    """(plan or None, seconds, whether a TimeLimitWarning said the call was cut)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ls.TimeLimitWarning)
        start = time.perf_counter()
        try:
            plan = fn()
        except ls.SearchLimitError:
            plan = None
        seconds = time.perf_counter() - start
    cut = any(issubclass(w.category, ls.TimeLimitWarning) for w in caught)
    return plan, seconds, cut


def _record(plan, seconds, cut):
    if plan is None:
        return {"seconds": round(seconds, 3), "error": "time_limit"}
    return {"peak": int(plan.schedule.peak), "cost": int(plan.schedule.recompute_cost),
            "seconds": round(seconds, 3), "cut": cut}


def _unwindowed(fn):
    """`fn` run with the DP unwindowed on every graph (``lowerset.dp.WINDOWED_NODES`` and
    ``WINDOWED_CONTRACTED_NODES`` past any graph): with ``method="exact"`` only the DP over
    all lower sets is never windowed, and its candidate pool's approximate families are on
    graphs of 2,000 nodes or more. Each call plans a fresh graph, so no windowed family is
    cached on it."""

    def run():
        saved = ls.dp.WINDOWED_NODES, ls.dp.WINDOWED_CONTRACTED_NODES
        ls.dp.WINDOWED_NODES = ls.dp.WINDOWED_CONTRACTED_NODES = sys.maxsize
        try:
            return fn()
        finally:
            ls.dp.WINDOWED_NODES, ls.dp.WINDOWED_CONTRACTED_NODES = saved

    return run


def bench(spec, exact_limit):
    """One row: both planners' calls on `spec`, each on a fresh graph."""
    g = graph(spec)
    plain = int(ls.schedule(g).peak)
    method = ls.dp.resolve_method(g, "auto")
    if g.n >= ls.dp.windowed_from(method):
        method += ", windowed"
    row = {"graph": spec, "nodes": g.n, "plain": plain, "method": method, "calls": {}}
    exact = _call(_unwindowed(lambda: ls.min_peak(graph(spec), "exact", time_limit=exact_limit)))
    auto = _call(lambda: ls.min_peak(graph(spec)))
    row["calls"]["min_peak"] = {"exact": _record(*exact), "auto": _record(*auto)}
    if exact[0] is None:
        return row
    least = int(exact[0].schedule.peak)
    for name, budget in (("0.9 x plain", 0.9 * plain), ("halfway", (least + plain) / 2),
                         ("least + 10%", least + 0.1 * (plain - least))):
        e = _call(_unwindowed(lambda b=budget: ls.solve(graph(spec), b, method="exact",
                                                       time_limit=exact_limit)))
        a = _call(lambda b=budget: ls.solve(graph(spec), b))
        row["calls"][name] = {"budget": int(budget), "exact": _record(*e), "auto": _record(*a)}
    return row


def distances(row):
    """Per call: the default's least peak (%) or recomputation (% and cost units) above the
    exact search's, and whether it is within the target; None where either is missing."""
    out = {}
    for name, c in row["calls"].items():
        e, a = c["exact"], c["auto"]
        if "error" in e or "error" in a:
            out[name] = None
            continue
        if name == "min_peak":
            d = (a["peak"] - e["peak"]) / e["peak"]
            out[name] = {"peak": d, "met": d <= TARGET_PEAK}
        else:
            units = a["cost"] - e["cost"]
            d = units / e["cost"] if e["cost"] else (0.0 if units <= 0 else float("inf"))
            out[name] = {"cost": d, "units": units, "met": d <= TARGET_COST or units <= 1}
    return out


def _cell(c, dist, key):
    e, a = c["exact"], c["auto"]
    if "error" in e:
        return f"exact: **limit** after {e['seconds']:.0f} s"
    if "error" in a:
        return "default: **no plan in time**"
    cut = " (cut)" if a["cut"] else ""
    if key == "peak":
        head = f"{a['peak'] / 2**20:,.2f} / {e['peak'] / 2**20:,.2f} MB"
        delta = f"{100 * dist['peak']:+.2f}%"
    else:
        head = f"{a['cost']:,} / {e['cost']:,}"
        delta = f"{100 * dist['cost']:+.1f}%" if dist["cost"] != float("inf") else "inf"
    mark = "" if dist["met"] else " **missed**"
    return (f"{head} ({delta}{mark}); {a['seconds']:.1f}{cut} / {e['seconds']:.1f} s")


def markdown(rows, machine, exact_limit):
    lines = [f"Machine: {machine}. Default arguments (`method=\"auto\"`, its time limit) "
             f"against `method=\"exact\"` (limit {exact_limit:g} s). Each cell: default / exact "
             "(least peak in MB, or recomputation in cost units), the distance, then seconds "
             "default (\"cut\": stopped at its time limit) / exact. Target: least peak within "
             "1%, recomputation within 5% or one cost unit.", "",
             "| graph | nodes | default family | `min_peak` | `solve` 0.9 x plain | "
             "`solve` halfway | `solve` least + 10% |", "|---|---|---|---|---|---|---|"]
    met = missed = 0
    for r in rows:
        d = distances(r)
        cells = []
        for name, key in (("min_peak", "peak"), ("0.9 x plain", "cost"), ("halfway", "cost"),
                          ("least + 10%", "cost")):
            c = r["calls"].get(name)
            if c is None or d.get(name) is None:
                cells.append("-" if c is None else _cell(c, {"met": False, key: 0.0}, key)
                             if "error" in c["exact"] or "error" in c["auto"] else "-")
                continue
            met += d[name]["met"]
            missed += not d[name]["met"]
            cells.append(_cell(c, d[name], key))
        lines.append(f"| {r['graph']} | {r['nodes']:,} | {r['method']} | " + " | ".join(cells)
                     + " |")
    lines += ["", f"Within the target: {met} of {met + missed} calls."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--graphs", nargs="*", default=None)
    ap.add_argument("--exact-limit", type=float, default=600.0, help="seconds per exact call")
    ap.add_argument("--out", type=Path, default=HERE.parent / "results" / "bench_quality")
    ap.add_argument("--from-json", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.from_json:
        data = json.loads(args.from_json.read_text())
        info, rows, args.exact_limit = data["machine"], data["rows"], data["exact_limit"]
    else:
        info, rows = machine_info(), []
        print(machine_line(info), flush=True)
        for spec in args.graphs or default_graphs():
            rows.append(bench(spec, args.exact_limit))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.with_suffix(".json").write_text(json.dumps(
                {"machine": info, "exact_limit": args.exact_limit, "rows": rows}, indent=1))
    text = markdown(rows, machine_line(info), args.exact_limit)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
