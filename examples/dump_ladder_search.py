"""Dump the strategies of the earlier ladder search (``solve_liveness``) for
``examples/bench_budgets.py --legacy``.

``solve_liveness`` (the paper's DP at a ladder of eq. (2) budgets, keeping the lowest simulated
peak) exists up to commit 6336e5e^; ``lowerset.solve`` and ``min_peak`` take its place after it.
This script runs it there, on the networks of ``reproduce_table1.py``'s CPU preset, and writes
each plan's lower sets (node labels: forward positions) per ``network/method``::

    git worktree add /tmp/ladder 6336e5e^
    PYTHONPATH=/tmp/ladder .venv/bin/python examples/dump_ladder_search.py ladder.json
    .venv/bin/python examples/bench_budgets.py --legacy ladder.json
"""

import json
import pathlib
import sys
import time

# appended, not prepended: the old checkout on PYTHONPATH must provide lowerset and chainer_ext
sys.path.append(str(pathlib.Path(__file__).resolve().parents[1]))

import chainer  # noqa: E402
import numpy as np  # noqa: E402

import lowerset  # noqa: E402
from chainer_ext import trace  # noqa: E402
from examples.models import NETWORKS  # noqa: E402
from examples.reproduce_table1 import PRESETS  # noqa: E402


def main(path):
    if not hasattr(lowerset, "solve_liveness"):
        sys.exit(f"{lowerset.__file__} has no solve_liveness: put a checkout of commit 6336e5e^ "
                 "first on PYTHONPATH (see the module docstring)")
    out = {}
    for name, (batch, size) in PRESETS["cpu"].items():
        net = NETWORKS[name]
        np.random.seed(0)
        model = net.build(size)
        x, t = net.make_batch(batch, size)
        with chainer.using_config("train", True):
            g = trace(lambda: net.loss(model, x, t))
        for method in ("exact", "approx"):
            t0 = time.perf_counter()
            s = lowerset.solve_liveness(g, method, time_limit=300)
            out[f"{name}/{method}"] = {"lower_sets": [sorted(int(v) for v in L)
                                                      for L in s.lower_sets]}
            print(f"{name} {method}: {len(s.lower_sets)} lower sets, "
                  f"{time.perf_counter() - t0:.1f} s", flush=True)
    with open(path, "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: dump_ladder_search.py OUT.json")
    main(sys.argv[1])
