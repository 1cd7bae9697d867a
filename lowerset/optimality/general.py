"""The least peak, or the least recomputation within a budget, over general recomputation
schedules (Checkmate's model, Jain et al., MLSys 2020), as a mixed-integer linear program.

A general schedule runs the step's forward functions in forward stages and their backward
functions once each, in the framework's order, as a canonical one does; in between it may run
any forward function again, any number of times: in forward stage t, before the forward of
``fwd[t]``, any earlier node; in backward step q, before the backward of ``bwd[q]``, any node
whose outputs or state a backward at step q or later may still read. Each such run is a binary
column R (Checkmate's R; its S, what is kept from one stage to the next, is the alive column at
the stage's first position). A run needs every argument's output alive, a stochastic function
its kept state (the random draws: never made again), and a backward its reads; pinned functions
(a side effect) and functions with a returned output run once. Arrays are freed after their last
use (Checkmate's FREE), and the bytes are counted by the rules of
:mod:`lowerset.optimality._timeline`, the canonical model's, gradients included.

Size, for n nodes, n_b backward steps and s slots (outputs and states): about n^2/2 + n_b n
positions, as many R columns, and one alive column per slot and position of its lifetime:
O(s n^2) columns and rows. Every canonical schedule is one of these with the same memory
(the canonical model is this one with the recomputations fixed by the drop set), so the general
optimum is never above the canonical one; it is below where recomputing a value more than once,
or in the forward pass, or at a step other than the canonical schedule's, lowers the peak or
the cost. Its objective counts as the schedule does: the peak P in bytes, or the recomputation
cost ``sum T_v R`` in cost units within ``P <= budget``.

References
----------
.. [1] Jain et al., Checkmate: Breaking the Memory Wall with Optimal Tensor Rematerialization,
   MLSys 2020, Sec. 4 (the MILP: R, S, FREE, U).
.. [2] Kusumoto et al., NeurIPS 2019, Sec. 3.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from ..graph import Graph
from ..scheduling import flat_facts
from ._milp import Milp, floor_bound
from ._timeline import Timeline, is_coarse


def _last_reads(g):
    """Per node, the last backward step at which its outputs or state may be read (-1: none)."""
    f = flat_facts(g)
    last = np.full(g.n, -1, dtype=np.int64)
    for q, j in enumerate(f.bwd.tolist()):
        if f.rout_ptr[j + 1] > f.rout_ptr[j] or f.state[j] > 0:
            last[j] = max(last[j], q)
        for r in range(f.rarg_ptr[j], f.rarg_ptr[j + 1]):
            s = int(f.arg_node[f.rarg_idx[r]])
            if s >= 0:
                last[s] = max(last[s], q)
    for w in f.fwd.tolist()[::-1]:   # a recomputation of a consumer reads every argument
        for a in range(f.arg_ptr[w], f.arg_ptr[w + 1]):
            v = int(f.arg_node[a])
            if v >= 0:
                last[v] = max(last[v], last[w])
    return last


def _reruns(g):
    """Bool per node: it may run more than once (not pinned, no returned output)."""
    ok = ~np.array([nf.pinned for nf in g.facts.nodes], dtype=bool)
    for v, _ in g.facts.returned:
        ok[v] = False
    return ok


class GeneralModel:
    """The MILP of the module docstring for graph `g`.

    Parameters
    ----------
    g : Graph
        The graph.
    once : bool, default False
        Each value recomputed at most once.
    coarse : {"auto", True, False}, default "auto"
        As :func:`lowerset.optimum`.
    """

    def __init__(self, g: Graph, once: bool = False, coarse: bool | str = "auto") -> None:
        self.g = g
        f = flat_facts(g)
        ok, last = _reruns(g), _last_reads(g)
        cands = [[v for v in range(g.n) if ok[v] and last[v] >= q]
                 for q in range(f.bwd.shape[0])]
        self.milp = Milp()
        n_runs = sum(len(c) for c in cands) + sum(
            int(ok[f.fwd[:t]].sum()) for t in range(g.n))
        self.coarse = is_coarse(coarse, g, n_runs)
        self.tl = Timeline(g, self.milp, lambda u: bool(ok[u]), cands, self.coarse)
        self.cost = {col: int(g.cost[v]) for col, v, _ in self.tl.runs}
        if once:   # each value recomputed at most once (anywhere)
            by_node: dict[int, list[int]] = {}
            for col, v, _ in self.tl.runs:
                by_node.setdefault(v, []).append(col)
            for cols in by_node.values():
                self.milp.row([(c, 1) for c in cols], ub=1)


def solve_general(g: Graph, budget: int | None, time_limit: float | None, once: bool = False,
                  coarse: bool | str = "auto") -> dict[str, Any]:
    """Minimise the peak (budget None) then the cost at it, or the cost within `budget` then
    the peak at it.

    Parameters
    ----------
    g : Graph
        The graph.
    budget : int or None
        Bytes of the whole step.
    time_limit : float or None
        Seconds for HiGHS; None: none.
    once : bool, default False
        Over schedules that recompute each value at most once.
    coarse : {"auto", True, False}, default "auto"
        As :func:`lowerset.optimum`.

    Returns
    -------
    dict with keys peak, cost, bound, status, seconds, recomputed
        ``bound`` bounds the objective (bytes without a budget, cost units with one);
        ``recomputed`` counts the runs per node beyond the first (ndarray of int64, shape (n,)).
    """
    t0 = time.perf_counter()
    model = GeneralModel(g, once, coarse)
    m, P = model.milp, model.tl.peak

    def left():
        return None if time_limit is None else max(0.0, time_limit - (time.perf_counter() - t0))

    out: dict[str, Any] = {"rows": m.n_rows, "cols": m.n_cols, "coarse": model.coarse}
    first, second = ({P: 1.0}, model.cost) if budget is None else (model.cost, {P: 1.0})
    k = model.tl.scale   # P is in units of k bytes
    if budget is not None:
        m.ub[P] = budget / k
    m.set_objective(first)
    sol = m.solve(time_limit=left())
    if sol.status == "infeasible":
        out.update(peak=None, cost=None, bound=math.inf, status="infeasible")
        return _done(out, t0)
    bound = floor_bound(sol.bound * (k if budget is None else 1))
    if sol.values is None:
        out.update(peak=None, cost=None, bound=bound, status="time_limit")
        return _done(out, t0)
    if model.coarse:   # a relaxation: its optimum bounds, its solution is no schedule
        out.update(peak=None, cost=None, bound=bound, status="bound")
        return _done(out, t0)
    status = sol.status
    best = sol.values
    assert sol.objective is not None   # a solution found has its objective
    if status == "optimal":
        # the tie: the other objective with this one at its optimum
        m.row(list(first.items()), ub=sol.objective + (0.5 / k if budget is None else 0.5))
        m.set_objective(second)
        sol2 = m.solve(time_limit=left())
        if sol2.values is not None:
            best = sol2.values
        if sol2.status != "optimal":
            status = "time_limit"
    out.update(peak=round(sol.objective * k) if budget is None else _peak_of(model, best),
               cost=int(round(sum(c * best[i] for i, c in model.cost.items()))),
               bound=bound, status=status, recomputed=_recomputed(model, best))
    if budget is not None and out["status"] == "optimal":
        out["bound"] = out["cost"]
    return _done(out, t0)


def _peak_of(model, values):
    return int(round(values[model.tl.peak] * model.tl.scale))


def _recomputed(model, values):
    out = np.zeros(model.g.n, dtype=np.int64)
    for col, v, _ in model.tl.runs:
        out[v] += int(round(values[col]))
    return out


def _done(out, t0):
    out["seconds"] = time.perf_counter() - t0
    return out
