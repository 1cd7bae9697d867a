"""DTR's own simulator (simrd) and lowerset.dtr on the same training step.

simrd (``uwsampl/dtr-prototype``, folder ``simrd``) is the simulator of Kirisame et al.'s DTR
paper. This script imports it from a checkout given on the command line (it is not part of
lowerset and nothing of it is copied here), writes the step that ``lowerset.dtr`` simulates as
a simrd program, runs both at the same budgets and prints their recomputation side by side.

The simrd program of a graph with single-output nodes and no views, state or externals (the
authors' ``cg_*.txt`` graphs with default facts, or a unit chain): every forward ``f<v>`` (cost
T_v, M_v bytes) in forward order; the seed gradient (pinned: the caller holds it); every
backward ``b<v>`` (cost T_v) reading the arrays the facts say and its output's gradient and
making one gradient per argument, each summed at once into a pending one by an ``add`` of cost
0 (Chainer's sums); each array released after its last read (simrd's eager eviction frees it);
returned outputs pinned. Two simrd runtimes: its own (gradients are ordinary tensors, evicted
and rematerialized like any other) and one whose gradient storages are never evictable, as in
``lowerset.dtr``.

Usage (simrd needs ``attrs``; see README "Is static planning worth it?")::

    python examples/compare_simrd.py --simrd /tmp/simrd_src/simrd
    python examples/compare_simrd.py --simrd ... --graph ../shared/graphs/cg_resnet50.txt

References
----------
.. [1] Kirisame et al., "Dynamic Tensor Rematerialization", ICLR 2021.
"""

import argparse
import math
import os
import sys

import numpy as np

import lowerset as ls

OURS = ("dtr", "dtr_local", "lru", "size")
THEIRS = {"dtr": "DTREqClass", "dtr_local": "DTRLocal", "lru": "LRU", "size": "LargestStorage"}


def unit_chain(n, mb=1_000_000):
    """N unit layers of `mb` bytes whose backward reads its input only (simrd's
    uniform_linear model)."""
    g = ls.Graph.chain(n, memory=mb)
    F = g.facts
    nodes = tuple(ls.NodeFacts(**{**nf.to_dict(), "args": nf.args, "reads_outputs": ()})
                  for nf in F.nodes)
    return g.with_facts(ls.ExecutionFacts(**{**F.__dict__, "nodes": nodes}))


def deaths(g):
    """Program position (forward, then backward positions) of each node's last read."""
    F = g.facts
    n = g.n
    death = {v: p for p, v in enumerate(F.forward_order)}
    for p, v in enumerate(F.forward_order):
        for s, _ in F.nodes[v].args:
            death[s] = max(death[s], p)
    for q, v in enumerate(F.backward_order):
        nf = F.nodes[v]
        for s, _ in (nf.args[i] for i in nf.reads_args):
            death[s] = max(death[s], n + q)
        if nf.reads_outputs:
            death[v] = max(death[v], n + q)
    for v, _ in F.returned:
        death[v] = math.inf
    return death


def simrd_program(g, rt, Operator):
    """Run the step of `g` on simrd runtime `rt`."""
    F = g.facts
    n = g.n
    death = deaths(g)
    dying = {}
    for v, p in death.items():
        dying.setdefault(p, []).append(v)
    t = {}
    for p, v in enumerate(F.forward_order):
        args = [t[s] for s, _ in F.nodes[v].args]
        op = Operator(float(g.cost[v]), (int(g.memory[v]),), (-1,), f"f{v}")
        (t[v],) = rt.compute(args, op, names=(f"x{v}",))
        if (v, 0) in F.returned:
            rt.pin(t[v])
        for u in dying.get(p, []):
            rt.release(t[u])
    pending = {}
    for v, _ in F.seeds:
        (pending[v],) = rt.compute([], Operator(0.0, (int(g.memory[v]),), (-1,), "seed"),
                                   names=(f"seed{v}",))
        rt.pin(pending[v])
    for q, v in enumerate(F.backward_order):
        nf = F.nodes[v]
        reads = [t[nf.args[i][0]] for i in nf.reads_args] + ([t[v]] if nf.reads_outputs else [])
        gy = [pending.pop(v)] if v in pending else []
        targets = [s for (s, _), gives in zip(nf.args, nf.grad_args) if gives]
        if targets:
            op = Operator(float(g.cost[v]), tuple(int(g.memory[s]) for s in targets),
                          (-1,) * len(targets), f"b{v}")
            grads = rt.compute(reads + gy, op, names=tuple(f"g{v}_{s}" for s in targets))
            for s, gx in zip(targets, grads):
                if s in pending:
                    add = Operator(0.0, (int(g.memory[s]),), (-1,), f"add{v}_{s}")
                    (total,) = rt.compute([pending[s], gx], add, names=(f"sum{v}_{s}",))
                    rt.release(pending[s])
                    rt.release(gx)
                    gx = total
                pending[s] = gx
        for x in gy:
            rt.release(x)
        for u in dying.get(n + q, []):
            rt.release(t[u])


def load_simrd(path):
    """Simrd's runtime, heuristics and Operator, imported from the checkout at `path`; and a
    runtime subclass that never evicts gradients."""
    sys.path.insert(0, os.path.abspath(path))
    from simrd import heuristic, runtime
    from simrd.tensor import Operator

    class KeepGradients(runtime.RuntimeV2EagerOptimized):
        """simrd's runtime with gradient storages (of b*, add*, seed ops) outside the pool."""

        @staticmethod
        def _grad(s):
            return not s.tensors[0].op.name.startswith("f")

        def _make_evictable(self, s):
            return True if self._grad(s) else super()._make_evictable(s)

        def _make_unevictable(self, s):
            return True if self._grad(s) else super()._make_unevictable(s)

    return {"simrd": runtime.RuntimeV2EagerOptimized, "simrd, no gradient eviction":
            KeepGradients}, heuristic, runtime.RematExceededError, Operator


def run_simrd(g, budget, name, runtime_cls, heuristic, RematExceededError, Operator):
    """Forward and backward rematerialization cost (cost units) and peak of simrd, or the
    reason it stopped."""
    rt = runtime_cls(budget, getattr(heuristic, THEIRS[name])(), stats=True,
                     remat_limit=50 * float(g.total_cost()))
    try:
        simrd_program(g, rt, Operator)
    except MemoryError:
        return "OOM"
    except RematExceededError:
        return "thrash"
    fwd = bwd = 0.0
    for row in rt.telemetry.operator.values():  # id, name, outputs, compute, size, alias, count
        cost = row[3] * row[6]
        if row[1].startswith("f"):
            fwd += cost
        else:
            bwd += cost
    return int(fwd), int(bwd), int(rt.telemetry.summary["max_memory"])


def run_ours(g, budget, name):
    try:
        s = ls.dtr(g, budget, name)
    except ls.InfeasibleBudgetError as e:
        return "thrash" if "thrash" in e.reason else "OOM"
    return s.recompute_cost, s.peak


def cell(r):
    return r if isinstance(r, str) else str(r[0])


def compare(g, budgets, runtimes, heuristic, errors, Operator, title, names=OURS):
    print(f"\n{title}: recompute cost (cost units) of lowerset.dtr | simrd, forward ops "
          "[+ backward ops] | simrd keeping gradients")
    print("| budget | " + " | ".join(f"{h}: ours / simrd / simrd no grad eviction"
                                     for h in names) + " |")
    print("|---:|" + "---|" * len(names))
    for label, budget in budgets:
        cells = []
        for h in names:
            ours = run_ours(g, budget, h)
            native, kept = [run_simrd(g, budget, h, rc, heuristic, errors, Operator)
                            for rc in runtimes.values()]
            nat = native if isinstance(native, str) else (
                f"{native[0]}" + (f" + {native[1]}" if native[1] else ""))
            cells.append(f"{cell(ours)} / {nat} / {cell(kept)}")
        print(f"| {label} | " + " | ".join(cells) + " |")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--simrd", required=True, help="the simrd folder of a dtr-prototype checkout")
    p.add_argument("--graph", default=None, help="an authors' cg_*.txt file (default: "
                   "../shared/graphs/cg_resnet50.txt next to the repository)")
    p.add_argument("--chains", default="16,36,64,100,196,400")
    a = p.parse_args(argv)
    runtimes, heuristic, RematExceededError, Operator = load_simrd(a.simrd)
    errors = RematExceededError
    ns = [int(x) for x in a.chains.split(",")]
    for n in ns:
        g = unit_chain(n)
        arrays = math.ceil(2 * math.sqrt(n)) + 1
        compare(g, [(f"{arrays} arrays", arrays * 1_000_000)], runtimes, heuristic, errors,
                Operator, f"unit chain N={n}")
    path = a.graph or os.path.join(os.path.dirname(__file__), "..", "..", "shared", "graphs",
                                   "cg_resnet50.txt")
    g = ls.read_cg(path)
    full = ls.schedule(ls.CanonicalStrategy(g, [set(g.labels)])).peak
    least = ls.min_peak(g, "approx").schedule.peak
    budgets = [(f"{ls.units.format_size(b)}", int(b))
               for b in np.linspace(least, full, 5)[:-1]]
    compare(g, budgets, runtimes, heuristic, errors, Operator, os.path.basename(path))


if __name__ == "__main__":
    main()
