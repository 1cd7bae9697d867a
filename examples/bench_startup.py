"""Start-up cost of the ``lowerset`` command line: where a fresh process spends its time.

``lowerset plan`` on a small graph is dominated by start-up, not by planning. This benchmark
runs fresh Python processes and prints the split, as medians over ``--repeats`` runs, in wall
time and in CPU time (user + system; on a shared, loaded machine the wall time is longer by the
time other processes hold the cores, and the CPU time is the figure that does not depend on
them):

- *interpreter*: ``python -c pass``;
- inside one process: ``import numpy``, ``import numba``, ``import lowerset`` (the rest of the
  package), ``read_cg`` of the graph, the first ``lowerset.solve`` (which loads the cached Numba
  kernels and initialises Numba's CPU target) and a second ``solve`` on a fresh copy of the graph
  (planning alone); *kernel loading* is the first minus the second;
- *end to end*: ``python -m lowerset plan GRAPH --budget B -o FILE``, timed from outside;
- optionally the authors' C++ DP (``--cpp BINARY``, built from pfnet-research/recompute
  ``mksch/``), ``BINARY -b B < cg_<graph>.txt``, for comparison. It solves eq. (2) at budget B,
  not the executor model.

Examples
--------
::

    .venv/bin/python examples/bench_startup.py --graph vgg19 --repeats 7
    .venv/bin/python examples/bench_startup.py --graph googlenet --cpp /tmp/dp2.out
"""

import argparse
import json
import os
import pathlib
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from examples._machine import machine_info, machine_line  # noqa: E402

#: Runs inside the child process: milestones as (name, wall, cpu) since the previous one.
PROBE = r"""
import json, sys, time
w0, c0 = time.perf_counter(), time.process_time()
out = {"process_cpu_at_first_line": c0}
def mark(name):
    global w0, c0
    w, c = time.perf_counter(), time.process_time()
    out[name] = (w - w0, c - c0)
    w0, c0 = w, c
import numpy
mark("import numpy")
import numba
mark("import numba")
import lowerset
mark("import lowerset")
g = lowerset.read_cg(sys.argv[1])
mark("read_cg")
lowerset.solve(g, budget=int(sys.argv[2]), method=sys.argv[3])
mark("first solve")
g = lowerset.read_cg(sys.argv[1])
lowerset.solve(g, budget=int(sys.argv[2]), method=sys.argv[3])
mark("second solve")
print(json.dumps(out))
"""


def _timed(cmd, **kw):
    """Run `cmd`; return (wall seconds, CPU seconds of the child, completed process)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, **kw)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({proc.returncode}): "
                           f"{proc.stderr.decode(errors='replace').strip()[-500:]}")
    return wall, cpu, proc


def measure(graph_path, budget, method, repeats, cpp=None):
    """Return the medians (dict of name -> (wall s, cpu s)) and the raw runs."""
    py = sys.executable
    env = dict(os.environ)
    rows = {}

    def add(name, wall, cpu):
        rows.setdefault(name, []).append((wall, cpu))

    with tempfile.TemporaryDirectory() as tmp:
        plan = os.path.join(tmp, "plan.json")
        for _ in range(repeats):
            w, c, _p = _timed([py, "-c", "pass"], env=env)
            add("interpreter (python -c pass)", w, c)
            w, c, p = _timed([py, "-c", PROBE, str(graph_path), str(budget), method], env=env)
            marks = json.loads(p.stdout.decode().strip().splitlines()[-1])
            add("  interpreter start, CPU before the first line", 0.0,
                marks.pop("process_cpu_at_first_line"))
            for name, (wi, ci) in marks.items():
                add(name, wi, ci)
            w, c, _p = _timed([py, "-m", "lowerset", "plan", str(graph_path), "--budget",
                               str(budget), "--method", method, "-o", plan], env=env,
                              cwd=str(ROOT))
            add("end to end: python -m lowerset plan", w, c)
            if cpp:
                with open(graph_path, "rb") as f:
                    w, c, _p = _timed([cpp, "-b", str(budget)], stdin=f)
                add(f"authors' C++ ({os.path.basename(cpp)} -b B)", w, c)
    med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v))
           for k, v in rows.items()}
    first, second = med.get("first solve"), med.get("second solve")
    if first and second:
        med["  of which kernel loading (first - second solve)"] = (first[0] - second[0],
                                                                  first[1] - second[1])
    return med, rows


def main(argv=None):
    """Run the benchmark and print the table; return the medians."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--graph", default="vgg19", help="authors' graph name (cg_<graph>.txt)")
    p.add_argument("--graphs-dir", default=str(ROOT.parent / "shared" / "graphs"))
    p.add_argument("--budget", default="11.4GB", help="bytes or a size such as 11.4GB")
    p.add_argument("--method", choices=("exact", "approx"), default="exact")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--cpp", help="the authors' compiled DP binary, to time beside ours")
    p.add_argument("--json", help="write the medians and runs here")
    a = p.parse_args(argv)
    from lowerset.units import parse_size

    budget = parse_size(a.budget)
    path = pathlib.Path(a.graphs_dir) / f"cg_{a.graph}.txt"
    if not path.is_file():
        p.error(f"{path} not found (set --graphs-dir)")
    med, rows = measure(path, budget, a.method, a.repeats, a.cpp)
    info = machine_info()
    load = os.getloadavg()
    print(f"Machine: {machine_line(info)}; load average {load[0]:.1f} {load[1]:.1f} "
          f"{load[2]:.1f} over {os.cpu_count()} logical cores")
    print(f"Graph {a.graph}, budget {budget} bytes, method {a.method}; medians of "
          f"{a.repeats} fresh processes.\n")
    print("| step | wall s | CPU s |\n|---|---|---|")
    for name, (w, c) in med.items():
        print(f"| {name} | {w:.3f} | {c:.3f} |")
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(
            {"machine": info, "loadavg": load, "graph": a.graph, "budget": budget,
             "method": a.method, "medians": med, "runs": rows}, indent=1))
    return med


if __name__ == "__main__":
    main()
