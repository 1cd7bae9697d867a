"""The least peak, or the least recomputation within a budget, over canonical strategies, as a
mixed-integer linear program (MILP), proven with the schedule itself.

Variables (n nodes, k_q candidates at backward step q, s slots: outputs and states):

- a segment label ``s_v`` in 0..n-1 per node (integer; ``s_u <= s_w`` along every edge): the
  lower-set sequence ``L_i = {v : s_v <= i}``; a *drop* column ``d_v`` per node that may be
  dropped (:func:`lowerset.dropped_nodes`: not pinned, no returned output, a consumer, i.e. a
  node that reads one of its outputs): ``d_v = 1`` exactly when every successor of v in G
  (an edge that carries no array included) has v's label and some node has a larger one (v is
  in no boundary ``∂(L_i)`` and not in the last segment), with binaries ``g_vw`` (successor
  w's label is larger) and ``top_v`` (v is in the last segment) for the converse; an
  in-place function and the array it overwrites are dropped together or kept;
- a recomputation column ``r_vq`` for each node v that backward step q may recompute (v is
  needed by the backward of ``bwd[q]``, directly or through dropped inputs of such a node):
  ``r_vq <= d_v``, ``sum_q r_vq <= 1``, and ``r_vq`` only where the backward of ``bwd[q]``
  reads v directly (its own outputs when it reads them or has state to remake, the arguments
  it reads) or a consumer of v is recomputed at q. A dropped value's forward copy is gone at the
  end of the forward pass (``alive <= 1 - d_v`` there), so each read in the backward pass forces
  a recomputation before it; with these rows the recomputations are exactly the schedule's
  (first need, in forward order, each at most once);
- the positions, alive columns and memory rows of :mod:`lowerset.optimality._timeline`: about
  ``n + sum_q (k_q + 1)`` positions and one alive column per slot and position of its lifetime.

The objective is the peak P (bytes) or the recomputation cost ``sum T_v r_vq`` (cost units,
what ``schedule.recompute_cost`` counts) with ``P <= budget``. The memory rules are the
schedule's except where the module docstring of ``_timeline`` states a relaxation, so the
model's optimum is a lower bound; each solution's drop set is then scheduled
(:func:`lowerset.schedule`). When the schedule's peak is the model's, that is the optimum;
otherwise a cut raises the model's peak of that drop set to the schedule's (or, within a budget,
excludes it) and HiGHS runs again, until the two agree or the time runs out.

References
----------
.. [1] Kusumoto et al., NeurIPS 2019, Sec. 3 (canonical strategy, liveness analysis).
.. [2] Jain et al., Checkmate, MLSys 2020, Sec. 4 (stages, liveness in a MILP).
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from .._typing import BoolArray, FloatArray
from ..graph import Graph
from ..refine import strategy_of_labels
from ..scheduling import _drop_rule, dropped_of_labels, flat_facts
from ..strategy import CanonicalStrategy
from ._milp import Milp, floor_bound, proven
from ._timeline import Timeline, is_coarse


class CanonicalModel:
    """The MILP of the module docstring for graph `g`.

    Parameters
    ----------
    g : Graph
        The graph.
    coarse : {"auto", True, False}, default "auto"
        As :func:`lowerset.optimum`.
    """

    def __init__(self, g: Graph, coarse: bool | str = "auto") -> None:
        self.g = g
        f = self.f = flat_facts(g)
        _, _, droppable, tie = _drop_rule(g)
        self.droppable = droppable
        # the consumers of each node's outputs (edges that carry an array)
        consumers: list[set[int]] = [set() for _ in range(g.n)]
        for w, nf in enumerate(g.facts.nodes):
            for u, _ in nf.args:
                if u >= 0:
                    consumers[u].add(w)
        self.consumers = [sorted(c) for c in consumers]
        self.milp = m = Milp()
        self.cands = [self._candidates(q) for q in range(f.bwd.shape[0])]
        self.coarse = is_coarse(coarse, g, sum(len(c) for c in self.cands))
        self.tl = Timeline(g, m, None, self.cands, self.coarse)
        self._labels(tie)
        self._recomputations()
        self._dropped_gone()

    def _direct(self, q):
        """Nodes the backward of ``bwd[q]`` needs recomputed when they are dropped."""
        f = self.f
        j = int(f.bwd[q])
        need = set()
        if f.rout_ptr[j + 1] > f.rout_ptr[j] or (f.state[j] > 0 and not f.stoch[j]):
            need.add(j)
        for r in range(f.rarg_ptr[j], f.rarg_ptr[j + 1]):
            s = int(f.arg_node[f.rarg_idx[r]])
            if s >= 0:
                need.add(s)
        return {v for v in need if self.droppable[v]}

    def _candidates(self, q):
        f = self.f
        out, stack = set(), list(self._direct(q))
        while stack:
            v = stack.pop()
            if v in out:
                continue
            out.add(v)
            for a in range(f.arg_ptr[v], f.arg_ptr[v + 1]):
                s = int(f.arg_node[a])
                if s >= 0 and self.droppable[s] and s not in out:
                    stack.append(s)
        return sorted(out)

    def _labels(self, tie):
        g, m = self.g, self.milp
        n = g.n
        K = max(n, 2)
        self.label = [m.var(0, K - 1, integer=True) for _ in range(n)]
        for u in range(n):
            for w in g.succ_idx[g.succ_ptr[u]:g.succ_ptr[u + 1]].tolist():
                m.row([(self.label[u], 1), (self.label[w], -1)], ub=0)
        sinks = [v for v in range(n) if g.succ_ptr[v + 1] == g.succ_ptr[v]]
        zs = []
        for v in sinks:
            z = m.binary()
            m.row([(self.label[v], 1), (z, -(K - 1))], lb=0)
            zs.append(z)
        m.row([(z, 1) for z in zs], lb=1)
        raw = {}
        for v in np.flatnonzero(self.droppable).tolist():
            d = raw[v] = m.binary()
            s = self.label[v]
            succs = g.succs(v).tolist()  # dropped: no successor in G in a later segment
            m.row([(s, 1), (d, 1)], ub=K - 1)
            either = [(d, 1)]
            for w in succs:
                m.row([(self.label[w], 1), (s, -1), (d, K - 1)], ub=K - 1)
                gw = m.binary()
                m.row([(self.label[w], 1), (s, -1), (gw, -K)], lb=1 - K)
                either.append((gw, 1))
            top = m.binary()
            m.row([(s, 1), (top, -(K - 1))], lb=0)
            either.append((top, 1))
            m.row(either, lb=1)
        self.drop = dict(raw)
        if tie is not None:
            groups: dict[int, list[int]] = {}
            for v in range(n):
                groups.setdefault(int(tie[v]), []).append(v)
            for vs in groups.values():
                if len(vs) == 1:
                    continue
                if not all(v in raw for v in vs):
                    for v in vs:
                        self.drop.pop(v, None)
                    continue
                d = m.binary()
                for v in vs:
                    m.row([(d, 1), (raw[v], -1)], ub=0)
                    self.drop[v] = d
                m.row([(d, 1)] + [(raw[v], -1) for v in vs], lb=1 - len(vs))

    def _recomputations(self):
        m = self.milp
        by_node: dict[int, list[int]] = {}
        at = {}
        for col, v, q in self.tl.runs:
            by_node.setdefault(v, []).append(col)
            at[v, q] = col
        for (v, q), col in at.items():
            if v not in self.drop:
                m.row([(col, 1)], ub=0)
                continue
            m.row([(col, 1), (self.drop[v], -1)], ub=0)
            if v in self._direct(q):
                continue
            cons = [at[w, q] for w in self.consumers[v] if (w, q) in at]
            m.row([(col, 1)] + [(c, -1) for c in cons], ub=0)
        for v, cols in by_node.items():
            m.row([(c, 1) for c in cols], ub=1)
        self.cost = {col: int(self.g.cost[v]) for col, v, _ in self.tl.runs}

    def _dropped_gone(self):
        """A dropped value's forward copy (and a non-stochastic state) is gone at the gap."""
        f, m, tl = self.f, self.milp, self.tl
        for x in tl.slots():
            v = tl.owner(x)
            if v not in self.drop or (x >= f.n_out and f.stoch[v]):
                continue
            a = tl.alive.get((x, tl.gap))
            if a is not None:
                m.row([(a, 1), (self.drop[v], 1)], ub=1)

    # -- solutions ---------------------------------------------------------------------------

    def drop_vars(self) -> dict[int, int]:
        """Distinct drop columns, with one node each."""
        seen: dict[int, int] = {}
        for v, c in self.drop.items():
            seen.setdefault(c, v)
        return seen

    def strategy(self, values: FloatArray) -> tuple[CanonicalStrategy, BoolArray]:
        """The CanonicalStrategy of a solution's labels, and its dropped set (bool per node).

        Parameters
        ----------
        values : ndarray of float64
            HiGHS's solution, one value per column.
        """
        s = np.rint(values[self.label]).astype(np.int64)
        _, inv = np.unique(s, return_inverse=True)
        seg = inv.astype(np.int64).reshape(-1)
        return strategy_of_labels(self.g, seg, method="optimum"), dropped_of_labels(self.g, seg)

    def cut(self, dropped: BoolArray, peak: float | None = None,
            cost: float | None = None) -> None:
        """Raise the model's peak (bytes) or cost (cost units) of drop set `dropped` to `peak`
        or `cost`, or exclude the set (both None).

        Parameters
        ----------
        dropped : ndarray of bool, shape (n,)
            The drop set, one bool per node.
        peak : float, optional
            Its peak, bytes.
        cost : float, optional
            Its cost, cost units.
        """
        terms: list[tuple[int, float]] = []
        rhs = 1.0   # hamming distance to `dropped` = sum(terms) + 1 - rhs
        for c, v in self.drop_vars().items():
            if dropped[v]:
                terms.append((c, -1))
                rhs -= 1
            else:
                terms.append((c, 1))
        if peak is None and cost is None:
            self.milp.row(terms, lb=rhs)
            return
        if peak is not None:   # P + peak * hamming >= peak (P in units of scale bytes)
            peak = peak / self.tl.scale
            self.milp.row([(self.tl.peak, 1)] + [(c, peak * a) for c, a in terms],
                          lb=peak * rhs)
        if cost is not None:   # sum T r + cost * hamming >= cost
            self.milp.row(list(self.cost.items()) + [(c, cost * a) for c, a in terms],
                          lb=cost * rhs)


def solve_canonical(g: Graph, budget: int | None, time_limit: float | None,
                    coarse: bool | str = "auto") -> dict[str, Any]:
    """Minimise the peak (budget None) then the cost at it, or the cost within `budget`.

    Parameters
    ----------
    g : Graph
        The graph.
    budget : int or None
        Bytes of the whole step.
    time_limit : float or None
        Seconds for HiGHS; None: none.
    coarse : {"auto", True, False}, default "auto"
        As :func:`lowerset.optimum`.

    Returns
    -------
    dict with keys strategy, peak, cost, bound, status, seconds, cuts
        ``bound`` bounds the objective (bytes without a budget, cost units with one).
    """
    t0 = time.perf_counter()
    model = CanonicalModel(g, coarse)

    def left():
        if time_limit is None:
            return None
        return time_limit - (time.perf_counter() - t0)

    out: dict[str, Any] = {"cuts": 0, "rows": model.milp.n_rows, "cols": model.milp.n_cols,
           "coarse": model.coarse}
    if budget is None:
        res = _least_peak(model, left)
        out.update(res)
        if res["status"] != "optimal":
            out["seconds"] = time.perf_counter() - t0
            return out
        budget_res = _least_cost(model, res["peak"], left)
        if budget_res["strategy"] is not None and budget_res["status"] == "optimal":
            out.update(strategy=budget_res["strategy"], cost=budget_res["cost"])
        out["cuts"] += budget_res["cuts"]
        out["bound"] = res["bound"]
    else:
        out.update(_least_cost(model, budget, left))
    out["seconds"] = time.perf_counter() - t0
    return out


def _timed_out(left):
    return left() is not None and left() <= 0


def _least_peak(model, left):
    m = model.milp
    m.set_objective({model.tl.peak: 1.0})
    best, cuts = None, 0
    while True:
        sol = m.solve(time_limit=left())
        if sol.values is None:
            return dict(strategy=best and best[0], peak=best and best[1],
                        cost=best and best[2], bound=floor_bound(sol.bound * model.tl.scale),
                        status="time_limit", cuts=cuts)
        s, dropped = model.strategy(sol.values)
        peak, cost = s.schedule.peak, s.schedule.recompute_cost
        if best is None or (peak, cost) < best[1:]:
            best = (s, peak, cost)
        bound = floor_bound(sol.bound * model.tl.scale)
        if proven(best[1], sol.bound * model.tl.scale):
            status = "optimal" if sol.status == "optimal" else "time_limit"
            return dict(strategy=best[0], peak=best[1], cost=best[2], bound=best[1],
                        status=status, cuts=cuts)
        if sol.status != "optimal" or _timed_out(left):
            return dict(strategy=best[0], peak=best[1], cost=best[2], bound=bound,
                        status="time_limit", cuts=cuts)
        model.cut(dropped, peak)
        cuts += 1


def _least_cost(model, budget, left):
    m = model.milp
    m.set_objective(model.cost)
    m.ub[model.tl.peak] = budget / model.tl.scale
    best, cuts = None, 0
    bound: float = 0
    while True:
        sol = m.solve(time_limit=left())
        if sol.status == "infeasible":
            if best is not None:   # the cuts left nothing better
                return dict(strategy=best[0], peak=best[1], cost=best[2], bound=best[2],
                            status="optimal", cuts=cuts)
            return dict(strategy=None, peak=None, cost=None, bound=math.inf,
                        status="infeasible", cuts=cuts)
        if sol.values is None:
            return dict(strategy=None, peak=None, cost=None, bound=max(bound, sol.bound),
                        status="time_limit", cuts=cuts)
        s, dropped = model.strategy(sol.values)
        peak, cost = s.schedule.peak, s.schedule.recompute_cost
        bound = max(bound, floor_bound(sol.bound))
        if peak <= budget and (best is None or cost < best[2]):
            best = (s, peak, cost)
        if best is not None and best[2] <= bound:
            return dict(strategy=best[0], peak=best[1], cost=best[2], bound=best[2],
                        status="optimal", cuts=cuts)
        if sol.status != "optimal" or _timed_out(left):
            return dict(strategy=best and best[0], peak=best and best[1], cost=best and best[2],
                        bound=bound, status="time_limit", cuts=cuts)
        if peak > budget:
            model.cut(dropped)
        else:   # the schedule recomputes more than the model counts for this drop set
            model.cut(dropped, cost=cost)
        cuts += 1
