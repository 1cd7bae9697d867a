r"""Record the device-budget planner's results on a sample of graphs, for tests/test_scale.py.

For each graph (the authors' seven, default facts; block-repetitive graphs of
``examples/block_graphs.py``) and method ("approx", "exact"): the plain step's peak, ``min_peak``
(schedule peak in bytes, recompute cost in cost units) and ``solve`` at 0.9, 0.75 and 0.6 x the
plain peak (the same, or null where the budget is infeasible), each call on a fresh graph, with
its wall time. A call that passes ``--time-limit`` is left out (with the method's later calls
on that graph) and listed under "limited". The test checks that the planner never does worse
than these figures; the file names the commit of the planner that recorded them.

``--lowerset DIR`` imports lowerset from DIR (a checkout of another commit, e.g. a
``git worktree``); the script prints which ``lowerset/__init__.py`` it runs.

Usage::

    python examples/record_planner_results.py tests/data/planner_results.json \\
        [--lowerset /tmp/oldplanner] [--commit SHA] [--time-limit 30] [--only cg/vgg19 ...]
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

CG = ("vgg19", "unet", "resnet50", "googlenet", "resnet152", "densenet", "pspnet")
#: (family, depth): 98-770 nodes.
FAMILY_SAMPLE = (("transformer", 6), ("transformer", 24), ("transformer", 48), ("resnet", 10),
                 ("resnet", 50), ("unet", 9), ("unet", 45), ("inception", 9),
                 ("inception", 23))
FRACTIONS = (0.9, 0.75, 0.6)
METHODS = ("approx", "exact")


def default_graphs_dir():
    env = os.environ.get("LOWERSET_GRAPHS")
    if env:
        return Path(env)
    return HERE.parents[1] / "shared" / "graphs"


def all_specs():
    return [f"cg/{n}" for n in CG] + [f"{f}/{d}" for f, d in FAMILY_SAMPLE]


def graph_of(spec, graphs_dir):
    """A fresh graph for `spec`: "cg/<name>" or "<family>/<depth>"."""
    import block_graphs
    import lowerset as ls

    kind, name = spec.split("/")
    if kind == "cg":
        return ls.read_cg(Path(graphs_dir) / f"cg_{name}.txt")
    return block_graphs.build(kind, int(name))


def warm_up():
    """Compile the Numba kernels so that no recorded call pays for the JIT."""
    import block_graphs
    import lowerset as ls

    g = block_graphs.build("transformer", 2)
    plain = ls.schedule(g).peak
    for method in METHODS:
        ls.min_peak(block_graphs.build("transformer", 2), method)
        try:
            ls.solve(g, 0.75 * plain, method=method)
        except ls.InfeasibleBudgetError:
            pass


def record(spec, method, graphs_dir, time_limit):
    """One row; "limited" names the first call that passed the time limit (later ones skipped)."""
    import lowerset as ls

    g = graph_of(spec, graphs_dir)
    plain = ls.schedule(g).peak
    row = {"graph": spec, "method": method, "nodes": g.n, "plain": plain,
           "seconds": {}}
    calls = [("min_peak", None)] + [(str(f), f) for f in FRACTIONS]
    for key, f in calls:
        start = time.perf_counter()
        try:
            if f is None:
                s = ls.min_peak(graph_of(spec, graphs_dir), method, time_limit=time_limit)
            else:
                s = ls.solve(graph_of(spec, graphs_dir), f * plain, method=method,
                             time_limit=time_limit)
            row[key] = [int(s.schedule.peak), int(s.schedule.recompute_cost)]
        except ls.InfeasibleBudgetError:
            row[key] = None
        except ls.SearchLimitError:
            row["limited"] = key
            row["seconds"][key] = round(time.perf_counter() - start, 3)
            break
        row["seconds"][key] = round(time.perf_counter() - start, 3)
    return row


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--graphs", type=Path, default=default_graphs_dir())
    ap.add_argument("--lowerset", type=Path, default=None,
                    help="import lowerset from this checkout (its root folder)")
    ap.add_argument("--commit", default=None, help="the commit named in the file "
                    "(default: git rev-parse HEAD of --lowerset or of this checkout)")
    ap.add_argument("--time-limit", type=float, default=30.0, help="seconds per call")
    ap.add_argument("--only", nargs="*", default=None, help="graph specs, e.g. cg/vgg19 unet/9")
    args = ap.parse_args(argv)
    root = args.lowerset.resolve() if args.lowerset else HERE.parent
    sys.path.insert(0, str(root))
    sys.path.insert(1, str(HERE))
    import lowerset as ls

    print(f"lowerset: {ls.__file__}", file=sys.stderr, flush=True)
    commit = args.commit or subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"],
                                           capture_output=True, text=True).stdout.strip()
    specs = args.only if args.only else all_specs()
    warm_up()
    rows = []
    for spec in specs:
        if spec.startswith("cg/") and not (args.graphs / f"cg_{spec[3:]}.txt").is_file():
            print(f"{spec}: not found under {args.graphs}, skipped", file=sys.stderr)
            continue
        for method in METHODS:
            rows.append(record(spec, method, args.graphs, args.time_limit))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"commit": commit, "lowerset": ls.__file__,
                                    "time_limit": args.time_limit,
                                    "fractions": list(FRACTIONS), "load_average":
                                    [round(x, 2) for x in os.getloadavg()],
                                    "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
