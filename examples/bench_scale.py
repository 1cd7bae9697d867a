"""Benchmark the device-budget planner on block-repetitive graphs from 100 to 10,000 nodes.

For each family of ``examples/block_graphs.py`` (transformer, resnet, unet, inception; default
facts) and each size (nodes, geometric steps), and where PyTorch is installed for the stacks
traced at operator level (``examples/traced_graphs.py``, the trace's execution facts: family
"gpt", the GPT-like stack at 6, 12, 24 and 48 layers by default, 399-3,087 nodes; family
"llama", the LLaMA-style stack at 1-32 layers, 85-2,317 nodes): the lower sets, the plain
step's peak, and per call -- ``min_peak``, ``solve`` at 0.9 x plain, halfway between the least
peak and plain, and the least peak + 10% of that gap, and ``pareto`` -- the wall time, the
result's peak (bytes) and recompute cost, whether the call stopped at its time limit (the
steps its :class:`lowerset.TimeLimitWarning` names), and the planner's memory: the growth of
the process's resident set over its size before the call (Linux's VmHWM, reset before each call
through ``/proc/self/clear_refs``; elsewhere the growth of ``ru_maxrss``, a lower bound). Each
call runs with the planner's default arguments (its default time limit,
:func:`lowerset.default_time_limit`, unless ``--time-limit`` is given) on a fresh graph after
Numba's JIT warm-up. A call that raises at its limit is recorded as such and the family's
larger sizes are skipped. The fitted slope is that of log(time) against log(nodes)
(numpy.polyfit) over the sizes where every call finished, for the slowest
``min_peak``/``solve`` call of each size and for each call.

Targets (issue 51; 2 cores, default arguments): every call within 10 s up to 2,500 nodes and
60 s at 10,000, slope at most 1.2 per family, planner memory under 1 GB at 2,500 nodes.

Usage::

    python examples/bench_scale.py [--families transformer resnet gpt llama] [--max-nodes 2500]
        [--sizes 100 250 ...] [--time-limit 120] [--method auto] [--out results/bench_scale]
        [--picture results/bench_scale.png]

writes ``<out>.json`` and ``<out>.md`` and prints the Markdown (the documentation site draws
its picture from ``<out>.json`` when it is built).
"""

import argparse
import json
import os
import resource
import sys
import time
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402

import block_graphs  # noqa: E402
import lowerset as ls  # noqa: E402
import traced_graphs  # noqa: E402
from _machine import machine_info, machine_line  # noqa: E402

SIZES = (100, 250, 500, 1000, 2500, 5000, 10000)
#: The traced stacks' default depths (layers): GPT-like 6-48, LLaMA-style 1-32.
DEPTHS = {"gpt": (6, 12, 24, 48), "llama": (1, 2, 4, 8, 16, 32)}
TRACED = traced_graphs.STACKS
FAMILIES = block_graphs.FAMILIES + TRACED
CALLS = ("min_peak", "solve_0.9", "solve_half", "solve_10", "pareto")
TIMED = CALLS  # the per-call targets
TARGETS = {"t2500": 10.0, "t10000": 60.0, "slope": 1.2, "memory2500": 1 << 30}


def _status_kb(field):
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _reset_hwm():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def measured(fn):
    """(result or exception, seconds, memory growth in bytes, the process's peak resident set in
    bytes during the call or None, the steps a TimeLimitWarning names as cut or None)."""
    rss = _status_kb("VmRSS")
    exact = rss is not None and _reset_hwm()
    before = rss if exact else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ls.TimeLimitWarning)
        try:
            out = fn()
        except Exception as e:  # noqa: BLE001 - recorded: a limit, an infeasible budget, a bug
            out = e
    seconds = time.perf_counter() - start
    after = _status_kb("VmHWM") if exact else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    cut = [str(w.message).split("steps cut: ")[-1].split(". Pass")[0] for w in caught
           if issubclass(w.category, ls.TimeLimitWarning)]
    return (out, seconds, max(0, after - before) * 1024, after * 1024 if exact else None,
            cut[0] if cut else None)


def warm_up(method):
    g = block_graphs.build("transformer", 2)
    ls.min_peak(block_graphs.build("transformer", 2), method)
    ls.solve(g, 0.9 * ls.schedule(g).peak, method=method)


def lower_sets(g):
    """The number of lower sets of `g`, or None above the default ``max_lower_sets`` (where
    ``method="auto"`` plans over the pruned family and counting further would take long)."""
    try:
        return ls.count_lower_sets(g)
    except ls.SearchLimitError:
        return None


def boundary_sum(g):
    """Sum of |∂(L)| (Sec. 2) over the prefixes L of the graph's topological order (node ids):
    each node counts once per prefix that holds it and not its last successor. Where it grows
    as n^2 (long skips that span the graph: the boundaries of the middle sets hold a node of
    every level), so do the DP's per-set boundary arrays over any family holding those sets,
    and no search that reads them can be linear in n."""
    last = np.arange(g.n)
    for u in range(g.n):
        succ = g.succ_idx[g.succ_ptr[u]:g.succ_ptr[u + 1]]
        if succ.size:
            last[u] = succ.max()
    return int((last - np.arange(g.n)).sum())


def lower_sets_text(count):
    """`count` of :func:`lower_sets` as the table shows it."""
    return f"> {ls.DEFAULT_MAX_LOWER_SETS:,}" if count is None else f"{count:,}"


def sized(family, nodes):
    """(depth, graph) of `family` (one of :data:`FAMILIES`) with about `nodes` nodes; the
    depth of a traced stack is its number of layers."""
    return (traced_graphs.sized(nodes, family) if family in TRACED
            else block_graphs.sized(family, nodes))


def build(family, depth):
    """A fresh graph of `family` at `depth` (no planner results cached on it)."""
    return (traced_graphs.traced(family, depth) if family in TRACED
            else block_graphs.build(family, depth))


def default_sizes(family):
    """The sizes (nodes) a run measures `family` at when ``--sizes`` is not given."""
    if family in TRACED:
        return tuple(traced_graphs.FIXED_NODES[family] + traced_graphs.NODES_PER_LAYER[family]
                     * layers for layers in DEPTHS[family])
    return SIZES


def bench(family, nodes, time_limit="default", method="auto"):
    """One row: the graph's figures and one dict per call of :data:`CALLS`."""
    depth, g = sized(family, nodes)
    plain = ls.schedule(g).peak
    row = {"family": family, "depth": depth, "nodes": g.n, "plain": int(plain),
           "lower_sets": lower_sets(g), "boundary_sum": boundary_sum(g),
           "method": ls.dp.resolve_method(g, method),
           "load_average": [round(x, 2) for x in os.getloadavg()], "calls": {}}

    def fresh():
        return build(family, depth)

    def run(name, fn, budget=None):
        out, seconds, memory, rss, cut = measured(fn)
        call = {"seconds": round(seconds, 3), "memory": int(memory), "rss_peak": rss}
        if cut is not None:
            call["cut"] = cut
        if budget is not None:
            call["budget"] = int(budget)
        if isinstance(out, ls.SearchLimitError):
            call["error"] = "time_limit"
        elif isinstance(out, ls.InfeasibleBudgetError):
            call["error"] = "infeasible"
        elif isinstance(out, Exception):
            call["error"] = f"{type(out).__name__}: {out}"
        else:
            s = out[-1] if isinstance(out, list) else out
            call.update(peak=int(s.schedule.peak), cost=int(s.schedule.recompute_cost))
            if isinstance(out, list):
                call["front"] = len(out)
        row["calls"][name] = call
        return call

    least = run("min_peak", lambda: ls.min_peak(fresh(), method, time_limit=time_limit))
    budgets = {"solve_0.9": 0.9 * plain}
    if "peak" in least:
        lo = least["peak"]
        budgets.update({"solve_half": (lo + plain) / 2, "solve_10": lo + 0.1 * (plain - lo)})
    for name, b in budgets.items():
        run(name, lambda b=b: ls.solve(fresh(), b, method=method, time_limit=time_limit), b)
    run("pareto", lambda: ls.pareto(fresh(), method, time_limit=time_limit))
    row["complete"] = all(c in row["calls"] and "error" not in row["calls"][c]
                          or row["calls"].get(c, {}).get("error") == "infeasible"
                          for c in CALLS)
    row["slowest"] = max((row["calls"][c]["seconds"] for c in TIMED if c in row["calls"]),
                         default=None)
    row["memory"] = max(c["memory"] for c in row["calls"].values())
    peaks = [c.get("rss_peak") for c in row["calls"].values()]
    row["rss_peak"] = None if None in peaks else max(peaks)
    return row


def slope(rows, key=None):
    """Fitted log-log slope of time against nodes over complete rows (None below 2 sizes)."""
    pts = [(r["nodes"], r["slowest"] if key is None else r["calls"][key]["seconds"])
           for r in rows if r["complete"]]
    pts = [(n, t) for n, t in pts if t and t > 0]
    if len(pts) < 2:
        return None
    n, t = np.log(np.array(pts, dtype=float)).T
    return float(np.polyfit(n, t, 1)[0])


def run_all(families, sizes, time_limit, method="auto", log=print, save=None, max_nodes=None):
    """Rows of :func:`bench` at `sizes` (nodes; None: :func:`default_sizes` of each family),
    those above `max_nodes` left out; ``save(rows)`` after each (partial results survive a
    stop)."""
    rows = []
    for family in families:
        for nodes in default_sizes(family) if sizes is None else sizes:
            if max_nodes is not None and nodes > max_nodes:
                continue
            row = bench(family, nodes, time_limit, method)
            rows.append(row)
            if save:
                save(rows)
            log(json.dumps({k: row[k] for k in ("family", "nodes", "lower_sets", "slowest",
                                                 "load_average")}
                           | {c: v.get("seconds") for c, v in row["calls"].items()}))
            if any(c.get("error") == "time_limit" for c in row["calls"].values()):
                log(f"{family}: time limit reached at {row['nodes']} nodes, larger sizes skipped")
                break
    return rows


def fits(rows):
    """Per family: the fitted slopes (of the slowest call, and of each call), "top": the slope
    between the two largest complete sizes, "bound": a lower bound of the slope from the largest
    complete size to the first one that passed the time limit (its slowest call took at least
    the limit), "boundary": the fitted slope of :func:`boundary_sum` (None where the rows lack
    it)."""
    out = {}
    for family in dict.fromkeys(r["family"] for r in rows):
        fr = [r for r in rows if r["family"] == family]
        done = [r for r in fr if r["complete"]]
        out[family] = {"slowest": slope(fr)} | {c: slope([r for r in fr if c in r["calls"]
                                                          and "seconds" in r["calls"][c]], c)
                                                 for c in CALLS}
        out[family]["top"] = slope(done[-2:]) if len(done) >= 2 else None
        out[family]["boundary"] = _boundary_slope(fr)
        over = [r for r in fr if not r["complete"] and r["nodes"] > (done[-1]["nodes"] if done
                                                                    else 0)]
        out[family]["bound"] = (float(np.log(over[0]["slowest"] / done[-1]["slowest"])
                                      / np.log(over[0]["nodes"] / done[-1]["nodes"]))
                                if done and over else None)
    return out


def _boundary_slope(rows):
    pts = [(r["nodes"], r["boundary_sum"]) for r in rows if r.get("boundary_sum")]
    if len(pts) < 2:
        return None
    n, b = np.log(np.array(pts, dtype=float)).T
    return float(np.polyfit(n, b, 1)[0])


def targets(rows, slopes):
    """Per target: {family: True/False/None (not measured)}. The time targets hold where every
    size up to their node count (5% over it) finishes within their seconds (10 s up to 2,500
    nodes, 60 s up to 10,000), a call that raises at its limit missing them; the memory
    target, where every size up to 2,500 nodes stays under 1 GB."""
    def up_to(family, n):
        return [r for r in rows if r["family"] == family and r["nodes"] <= 1.05 * n]

    out = {}
    for family in slopes:
        t = {}
        for key, n in (("t2500", 2500), ("t10000", 10000)):
            rs = up_to(family, n)
            t[key] = (all(r["complete"] and r["slowest"] <= TARGETS[key] for r in rs)
                      if rs else None)
        s = [slopes[family][k] for k in ("slowest", "top", "bound")
             if slopes[family].get(k) is not None]
        t["slope"] = all(x <= TARGETS["slope"] for x in s) if s else None
        rs = up_to(family, 2500)
        t["memory2500"] = all(r["memory"] < TARGETS["memory2500"] for r in rs) if rs else None
        out[family] = t
    return out


def _cell(call):
    if call is None:
        return "-"
    if call.get("error") == "infeasible":
        return f"infeasible ({call['seconds']:.2f} s)"
    if "error" in call:
        return f"**{call['error']}** after {call['seconds']:.1f} s"
    cut = " (cut)" if call.get("cut") else ""
    return (f"{call['seconds']:.2f} s{cut}, {call['peak'] / 2**20:,.1f} MB / "
            f"{call['cost']}")


def markdown(rows, slopes, met, machine, time_limit):
    limit = ("the planner's default (lowerset.default_time_limit)" if time_limit is None
             else f"{time_limit:g} s per call")
    lines = [f"Machine: {machine}; time limit: {limit}.", "",
             "Per call: wall time, \"(cut)\" where it stopped at its time limit and returned "
             "the best plan found, the result's peak (MB) / recompute cost (cost units); "
             "memory: the largest resident-set growth of the five calls (freed memory that "
             "the process reuses does not count again); peak RSS: the process's resident set "
             "at its highest during the calls (an upper bound, with Python and Numba's code).",
             "",
             "| family | nodes | lower sets | method | plain (MB) | `min_peak` "
             "| `solve` 0.9 x plain | `solve` halfway | `solve` least + 10% | `pareto` "
             "| memory (MB) | peak RSS (MB) | load avg |", "|---" * 13 + "|"]
    for r in rows:
        c = r["calls"]
        lines.append(
            f"| {r['family']} | {r['nodes']:,} | {lower_sets_text(r['lower_sets'])} | "
            f"{r['method']} | "
            f"{r['plain'] / 2**20:,.0f} | " + " | ".join(_cell(c.get(k)) for k in CALLS)
            + f" | {r['memory'] / 2**20:,.0f} | "
            + ("-" if r.get("rss_peak") is None else f"{r['rss_peak'] / 2**20:,.0f}")
            + f" | {' '.join(f'{x:.1f}' for x in r['load_average'])} |")
    lines += ["", "Slopes of log(time) against log(nodes): fitted over the complete sizes (the "
              "slowest `min_peak`/`solve` call; each call), between the two largest complete "
              "sizes, and a lower bound from the largest complete size to the first that passed "
              "the time limit. The slope target counts all three. Σ|∂|: the fitted slope of "
              "the sum of |∂(L)| over the prefixes of a topological order against the nodes, "
              "the size of the boundary arrays the DP reads (2 where long skips span the "
              "graph).", "",
              "| family | fitted (slowest call) | `min_peak` | `solve` halfway | `pareto` | "
              "two largest | bound from the limit | Σ\\|∂\\| | up to 2,500 nodes: <= 10 s | "
              "up to 10,000 nodes: <= 60 s | slope <= 1.2 | up to 2,500 nodes: memory < 1 GB |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def f(x):
        return "-" if x is None else f"{x:.2f}"

    def yes(x):
        return "not measured" if x is None else ("met" if x else "**missed**")

    for family, s in slopes.items():
        t = met[family]
        lines.append(f"| {family} | {f(s['slowest'])} | {f(s['min_peak'])} | "
                     f"{f(s['solve_half'])} | {f(s['pareto'])} | {f(s.get('top'))} | "
                     f">= {f(s.get('bound'))} | {f(s.get('boundary'))} | {yes(t['t2500'])} | "
                     f"{yes(t['t10000'])} | {yes(t['slope'])} | {yes(t['memory2500'])} |")
    return "\n".join(lines) + "\n"


def picture(rows, slopes, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for family, s in slopes.items():
        fr = [r for r in rows if r["family"] == family and r["slowest"] is not None]
        if not fr:
            continue
        label = family + ("" if s["slowest"] is None else f" (slope {s['slowest']:.2f}"
                          + ("" if s.get("top") is None else f"; {s['top']:.2f} at the top")
                          + ("" if s.get("bound") is None
                             else f"; >= {s['bound']:.2f} to the limit")
                          + ")")
        ax.loglog([r["nodes"] for r in fr], [r["slowest"] for r in fr], "o-", label=label)
        for r in fr:
            if not r["complete"]:
                ax.plot(r["nodes"], r["slowest"], "kx", ms=9)
    for t, n in ((TARGETS["t2500"], 2500), (TARGETS["t10000"], 10000)):
        ax.plot(n, t, "r*", ms=10)
    ax.set_xlabel("nodes")
    ax.set_ylabel("slowest min_peak / solve call (s)")
    ax.set_title("lowerset planner: time per call (red stars: targets; x: limit hit)",
                 fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


#: Phases of a planner call: (label, module, function); cumulative times, so they nest
#: (the pool and the search call the DP and the schedule).
#: A third item keeps only the time of calls made from that module.
PHASES = (("candidate pool (`planner._pool`)", (("planner.py", "_pool"),)),
          ("solve's search (`planner._bisect`)", (("planner.py", "_bisect"),)),
          ("  its time-centric DP calls (`planner._paper_time`)",
           (("planner.py", "_paper_time"),)),
          ("DP passes, all callers (`dp._drive`)", (("dp.py", "_drive"),)),
          ("lower sets and their family (`dp._get_family`)", (("dp.py", "_get_family"),)),
          ("local search (`refine.refine`)", (("refine.py", "refine"),)),
          ("  its schedules on the calling thread (`scheduling._peak_and_cost` called from "
           "refine.py; the ones computed ahead run on the pool's threads, which cProfile does "
           "not see)", (("scheduling.py", "_peak_and_cost"),), "refine.py"),
          ("schedule evaluation, all callers, calling thread (`scheduling._hooked_arrays`, "
           "`_fold`, `_peak_and_cost`)",
           (("scheduling.py", "_hooked_arrays"), ("scheduling.py", "_fold"),
            ("scheduling.py", "_peak_and_cost"))))
#: Own time by module.
MODULES = (("_kernels.py", "DP kernels (_kernels.py)"), ("dp.py", "dp.py"),
           ("lowersets.py", "lowersets.py"), ("planner.py", "planner.py"),
           ("refine.py", "refine.py"), ("_schedule_kernels.py", "schedule kernels "
                                                               "(_schedule_kernels.py)"),
           ("scheduling.py", "scheduling.py"), ("strategy.py", "strategy.py (eq. 1, 2)"))


def profile(family, nodes, method="auto"):
    """CProfile of ``min_peak`` and ``solve`` halfway on a fresh graph: a Markdown table of the
    phases' cumulative seconds and the modules' own seconds."""
    import cProfile
    import pstats

    depth, g = sized(family, nodes)
    plain = ls.schedule(g).peak
    least = ls.min_peak(build(family, depth), method).schedule.peak
    budget = (least + plain) / 2
    calls = (("`min_peak`", lambda: ls.min_peak(build(family, depth), method)),
             ("`solve` halfway", lambda: ls.solve(build(family, depth), budget,
                                                  method=method)))
    cols, totals = [], []
    for name, fn in calls:
        prof = cProfile.Profile()
        start = time.perf_counter()
        prof.runcall(fn)
        totals.append(time.perf_counter() - start)
        stats = pstats.Stats(prof).stats
        cum, own = {}, {}
        for (file, _, func), (_, _, tt, ct, callers) in stats.items():
            for label, funcs, *via in PHASES:
                if any(file.endswith("lowerset/" + m) and func == f for m, f in funcs):
                    if via:
                        ct = sum(c[3] for k, c in callers.items()
                                 if k[0].endswith("lowerset/" + via[0]))
                    cum[label] = cum.get(label, 0.0) + ct
            for mod, _ in MODULES:
                if file.endswith("lowerset/" + mod):
                    own[mod] = own.get(mod, 0.0) + tt
        own["other"] = sum(v[2] for v in stats.values()) - sum(own.values())
        cols.append((cum, own))
    head = [f"{family}, {g.n:,} nodes, {lower_sets_text(lower_sets(g))} lower sets, method "
            f"{ls.dp.resolve_method(g, method)}, under cProfile (load average "
            f"{' '.join(f'{x:.1f}' for x in os.getloadavg())})", "",
            "| phase (cumulative s; indented ones inside the one above) | "
            + " | ".join(n for n, _ in calls) + " |", "|---|" + "---|" * len(calls),
            "| whole call | " + " | ".join(f"{t:.2f}" for t in totals) + " |"]
    for label, *_ in PHASES:
        head.append(f"| {label} | " + " | ".join(f"{c[0].get(label, 0.0):.2f}"
                                                  for c in cols) + " |")
    head += ["", "| module (own s) | " + " | ".join(n for n, _ in calls) + " |",
             "|---|" + "---|" * len(calls)]
    for mod, label in MODULES + (("other", "other"),):
        head.append(f"| {label} | " + " | ".join(f"{c[1].get(mod, 0.0):.2f}" for c in cols)
                    + " |")
    return "\n".join(head) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--families", nargs="*", choices=FAMILIES,
                    default=list(FAMILIES if traced_graphs.available() else block_graphs.FAMILIES),
                    help="default: all, the traced stacks only where PyTorch is installed")
    ap.add_argument("--sizes", nargs="*", type=int, default=None,
                    help=f"nodes (default: {', '.join(map(str, SIZES))}; traced stacks: "
                    + "; ".join(f"{f} {', '.join(map(str, default_sizes(f)))}"
                                for f in TRACED) + ")")
    ap.add_argument("--max-nodes", type=int, default=None, help="leave out larger sizes")
    ap.add_argument("--time-limit", type=float, default=None,
                    help="seconds per call (default: the planner's own default)")
    ap.add_argument("--method", default="auto", choices=ls.METHODS)
    ap.add_argument("--out", type=Path, default=HERE.parent / "results" / "bench_scale",
                    help="writes <out>.json and <out>.md")
    ap.add_argument("--picture", type=Path,
                    default=HERE.parent / "results" / "bench_scale.png")
    ap.add_argument("--no-picture", action="store_true")
    ap.add_argument("--from-json", type=Path, default=None,
                    help="write the report and picture from this JSON of an earlier run")
    ap.add_argument("--profile", type=int, default=None, metavar="NODES",
                    help="only profile min_peak and solve on the first family at about NODES "
                    "nodes; writes <out>_profile.md")
    args = ap.parse_args(argv)
    traced = [f for f in args.families if f in TRACED]
    if traced and not traced_graphs.available():
        ap.error(f"family {traced[0]} traces a PyTorch model: run this with PyTorch installed, "
                 "as .venv-torch/bin/python (scripts/venv_torch.sh makes it)")
    if args.profile:
        warm_up(args.method)
        text = profile(args.families[0], args.profile, args.method)
        print(text)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        Path(str(args.out) + "_profile.md").write_text(text)
        return 0
    args.out.parent.mkdir(parents=True, exist_ok=True)

    def save(rows, **more):
        args.out.with_suffix(".json").write_text(json.dumps(
            {"machine": info, "time_limit": args.time_limit, "method": args.method,
             "rows": rows} | more, indent=1) + "\n")

    if args.from_json:
        data = json.loads(args.from_json.read_text())
        info, rows, args.time_limit = data["machine"], data["rows"], data["time_limit"]
    else:
        info = machine_info()
        print(machine_line(info), flush=True)
        warm_up(args.method)
        limit = "default" if args.time_limit is None else args.time_limit
        rows = run_all(args.families, args.sizes, limit, args.method,
                       log=lambda s: print(s, file=sys.stderr, flush=True), save=save,
                       max_nodes=args.max_nodes)
    slopes = fits(rows)
    met = targets(rows, slopes)
    text = markdown(rows, slopes, met, machine_line(info), args.time_limit)
    print(text)
    args.out.with_suffix(".md").write_text(text)
    save(rows, slopes=slopes, targets=met)
    if not args.no_picture:
        picture(rows, slopes, args.picture)
    return 0


if __name__ == "__main__":
    sys.exit(main())
