"""Local search over lower-set sequences, each judged by its execution schedule.

The planner's candidates (:mod:`lowerset.planner`) come from the paper's DP, which optimises
eq. (2); the schedule (:func:`lowerset.schedule`) is judged by liveness analysis, so a plan one
move away from a DP plan can peak lower or recompute less. :func:`refine` searches those moves.

A lower-set sequence L_1 ⊊ ... ⊊ L_k = V is written as a segment index per node,
``seg[v] = i`` for v ∈ V_i = L_i ∖ L_{i-1} (0-based), monotone along every edge
(u → v implies ``seg[u] <= seg[v]``); every such labelling with no empty segment is a sequence
and back. The moves from a labelling:

- one node to the segment before or after its own, or to a new segment of its own just before
  or after its segment, where its predecessors and successors allow;
- *drop* a kept node v that may be dropped: v, its successors and everything of v's segment or
  later they descend from go to a new segment just before v's (v then shares its segment with
  all its successors, so it is dropped unless that segment is the last);
- *keep* a dropped node v: for each successor w, w and what descends from it in v's segment go
  to a new segment just after it (v is then on the boundary ∂(L_i)).

The drop move reaches plans that no single-node move does: from [V], a node is dropped only
when its successors share a segment that is not the last. (Merging two adjacent segments,
tried as a further move, improved none of 1,600 random local optima and none of the traced
networks' plans.)

The schedule, hence the peak and the overhead, depends only on the dropped nodes (``V_i ∖
∂(L_i)`` for ``i < k``, :func:`lowerset.scheduling.dropped_nodes`), so each distinct dropped set
is scheduled at most once in full. A move is judged against caps that follow from the best
objective so far (a higher recomputation cost than the best plan within the budget, a peak over
the budget or over the best peak): its schedule stops where it passes one (the kernel's
``cost_cap`` and ``peak_cap``), which the decision needs no more than, and what it showed is
kept on the graph for later searches. The search is a first-improvement hill climb: it takes
the first move that improves the objective and resumes the scan from the next node. At a local
optimum of these moves it tries pairs of moves (the first in order of its own objective, which
need not improve: keeping one value and dropping another is such a pair) where there are at
most :data:`PAIR_MOVES` pairs, and climbs on from a pair that improves. It stops when neither
improves or after `max_evaluations` schedules. It is a local search, not an
optimum over all lower-set sequences (:func:`lowerset.optimum` measures how far it is).

References
----------
.. [1] Kusumoto et al., NeurIPS 2019, Sec. 2 (lower sets), Sec. 3 (canonical strategy; liveness
   analysis).
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
from collections.abc import Callable
from typing import Any

import numpy as np

from . import _limits
from ._kernels import closure
from ._typing import IntArray, Number
from ._validate import check_budget, check_count
from .exceptions import SearchLimitError
from .graph import Graph
from .scheduling import (
    _drop_rule,
    _peak_and_cost,
    dropped_key,
    dropped_of_labels,
    known_schedules,
    remember_schedule,
    segment_labels,
)
from .strategy import CanonicalStrategy

__all__ = ["refine", "MAX_EVALUATIONS"]

#: Default bound on the distinct schedules one :func:`refine` call computes (about 0.2-0.5 ms
#: each on graphs of 100-600 nodes); it keeps the result independent of the machine's speed.
MAX_EVALUATIONS = 4000

#: At a local optimum of single moves, the search tries pairs of moves where there are at most
#: this many (the square of the single moves' count: graphs up to about 60 nodes; on graphs of
#: hundreds of nodes the pairs would cost tens of seconds), computing at most PAIR_EVALUATIONS
#: schedules for them in one call.
PAIR_MOVES = 40_000
PAIR_EVALUATIONS = 1000

#: Moves per thread whose schedules are under way ahead of the scan that asks for them (on one
#: core: none). A move that improves leaves those of the moves after it computed for nothing.
AHEAD = 2


def strategy_of_labels(graph: Graph, seg: IntArray, **meta: Any) -> CanonicalStrategy:
    """The :class:`CanonicalStrategy` of a monotone labelling without empty segments.

    Parameters
    ----------
    graph : Graph
        The graph labelled.
    seg : ndarray of int64, shape (n,)
        The 0-based segment of each node id.
    **meta
        As :meth:`CanonicalStrategy.from_segments`.
    """
    return CanonicalStrategy.from_segments(graph, seg, **meta)


class _Scheduler:
    """Peak (bytes) and recomputation cost (cost units) of labellings, one schedule per dropped
    set.

    ``memo`` holds the schedules the search has asked for, in the order it asked: its size is
    what ``max_evaluations`` bounds. A schedule the graph already knows
    (:func:`lowerset.scheduling.known_schedules`: an earlier search or candidate on it) is
    taken from there, and counts all the same. With a thread pool, :meth:`submit` starts the
    schedules of the next few moves while the search judges the one before (the kernel
    releases the GIL); they wait outside ``memo`` until the search asks for them, so the
    search takes the same path, and stops at the same count, as one that computes each
    schedule when it asks."""

    def __init__(self, graph, pool=None):
        self.graph = graph
        self.droppable = _drop_rule(graph)[2]
        self.memo = {}
        self._known = known_schedules(graph)
        self._ahead = {}
        self._seen = {}
        self._pool = pool

    def dropped(self, seg):
        """Bool per node: the nodes the labelling's sequence drops (:func:`dropped_of_labels`)."""
        return dropped_of_labels(self.graph, seg)

    def __call__(self, seg, caps=None):
        """``(peak, cost)`` of labelling `seg`; with `caps` (:meth:`_Objective.caps`), None
        where its cost or its peak passes them. A schedule judged against caps is stopped
        there (:func:`_schedule_within`) and kept, in ``memo`` and on the graph, as what it
        showed: ``(None, cost, floor)``. An ask that such a record does not decide (one
        without caps, or with caps it does not pass) computes the schedule again; within a
        search the caps only tighten, so its own records decide its later asks."""
        d, key = self._keyed(seg)
        out: Any = self.memo.get(key)   # a tuple wherever _decides says it decides
        if not _decides(out, caps):
            future = self._ahead.pop(key, None)
            out = self._known.get(key)
            if not _decides(out, caps):
                out = future.result() if future is not None else None
                if not _decides(out, caps):
                    out = _schedule_within(self.graph, d, caps)
                remember_schedule(self.graph, key, out)
            self.memo[key] = out
        return None if out[0] is None else out

    def _keyed(self, seg, keep=False):
        """The labelling's dropped nodes and their packed bytes (the memo's key); those of a
        labelling :meth:`submit` saw (`keep`) are not computed again."""
        found = self._seen.pop(id(seg), None)
        if found is not None and found[0] is seg:
            return found[1], found[2]
        d = self.dropped(seg)
        key = dropped_key(d)
        if keep:
            self._seen[id(seg)] = (seg, d, key)
        return d, key

    def submit(self, seg, caps=None):
        """Start the schedule of labelling `seg` on the pool (against `caps`, as
        :meth:`__call__`), unless it is under way or known well enough."""
        if self._pool is None:
            return
        d, key = self._keyed(seg, keep=True)
        if (key not in self.memo and key not in self._ahead
                and not _decides(self._known.get(key), caps)):
            self._ahead[key] = self._pool.submit(_schedule_within, self.graph, d, caps)

    def abandon(self):
        """Forget the labellings submitted for a scan that has ended: their schedules that have
        not started are cancelled; those under way or done stay for a later ask."""
        self._seen.clear()
        for key in [k for k, f in self._ahead.items() if f.cancel()]:
            del self._ahead[key]


def _schedule_within(graph, dropped, caps):
    """The schedule of `dropped` against `caps` (cost cap, peak cap; None: none): ``(peak,
    cost)``, or where it passes them ``(None, cost, floor)``: the cost is exact and the peak
    is above `floor` (bytes; -1 where the cost stopped it)."""
    cost_cap, peak_cap = caps or (None, None)
    peak, cost = _peak_and_cost(graph, dropped, cost_cap, peak_cap)
    if peak is not None:
        return peak, cost
    return None, cost, (peak_cap if cost_cap is None or cost <= cost_cap else -1)


def _decides(point, caps):
    """Whether `point` (a record of :func:`_schedule_within`, or None) answers an ask with
    `caps`: a whole schedule does; a stopped one where its cost or its peak's floor shows it
    beyond `caps`."""
    if point is None:
        return False
    if point[0] is not None:
        return True
    if caps is None:
        return False
    cost_cap, peak_cap = caps
    return ((cost_cap is not None and point[1] > cost_cap)
            or (peak_cap is not None and point[2] >= peak_cap))


class _Objective:
    """Key to minimise: (peak, cost) without a budget; with one, plans within it first, by
    (cost, peak), then the others by (peak, cost)."""

    def __init__(self, budget):
        self.budget = budget

    def __call__(self, peak, cost):
        if self.budget is None:
            return 0, peak, cost
        return (0, cost, peak) if peak <= self.budget else (1, peak, cost)

    def caps(self, best):
        """(cost cap, peak cap): a schedule whose cost or peak passes them has a key above
        `best` (a key of this objective); None where no cap follows. As `best` falls, they
        only tighten."""
        if self.budget is not None and best[0] == 0:
            return best[1], self.budget    # within the budget: a higher cost or over it
        return None, best[1]               # a higher peak


def _relabel(seg2):
    """Doubled positions (segment i at 2i, new segments at odd positions, -1 first) to the
    0-based segments of the labelling they order."""
    present = np.zeros(int(seg2.max()) + 2, dtype=np.int64)
    present[seg2 + 1] = 1
    return (np.cumsum(present) - 1)[seg2 + 1]


def _node_moves(graph, seg, sizes, v):
    """Labellings that move node `v` (see the module docstring)."""
    s = int(seg[v])
    preds = graph.pred_idx[graph.pred_ptr[v]:graph.pred_ptr[v + 1]]
    succs = graph.succ_idx[graph.succ_ptr[v]:graph.succ_ptr[v + 1]]
    # doubled bounds: a predecessor's segment at most, a successor's at least
    lo = 2 * int(seg[preds].max()) if preds.size else -2
    hi = 2 * int(seg[succs].min()) if succs.size else 2 * len(sizes)
    targets = [2 * s - 2, 2 * s + 2]
    if sizes[s] > 1:
        targets += [2 * s - 1, 2 * s + 1]
    k = len(sizes)
    for p in targets:
        inside = 0 <= p <= 2 * k - 2 if p % 2 == 0 else -1 <= p <= 2 * k - 1
        if inside and lo <= p <= hi:
            seg2 = 2 * seg
            seg2[v] = p
            yield _relabel(seg2)


def _drop_move(graph, seg, v):
    """Node `v` with its successors in a new segment just before `v`'s own, with everything
    of that segment or later they descend from: `v` can then be dropped."""
    s = int(seg[v])
    succs = graph.succ_idx[graph.succ_ptr[v]:graph.succ_ptr[v + 1]]
    pulled = closure(graph.pred_ptr, graph.pred_idx, np.append(succs, v), seg >= s)
    seg2 = 2 * seg
    seg2[pulled] = 2 * s - 1
    return _relabel(seg2)


def _keep_moves(graph, seg, v):
    """For each successor w of a dropped node `v`: w, with what descends from it in `v`'s
    segment, in a new segment just after it: `v` is then a boundary node, kept."""
    s = int(seg[v])
    for w in graph.succ_idx[graph.succ_ptr[v]:graph.succ_ptr[v + 1]]:
        pushed = closure(graph.succ_ptr, graph.succ_idx, np.array([w]), seg == s)
        seg2 = 2 * seg
        seg2[pushed] = 2 * s + 1
        yield _relabel(seg2)


def _moves(graph, seg, dropped, droppable, start):
    """Every move, from node `start` on (cyclically); yields (labelling, node moved)."""
    sizes = np.bincount(seg)
    for j in range(graph.n):
        v = (start + j) % graph.n
        for seg2 in _node_moves(graph, seg, sizes, v):
            yield seg2, v
        if dropped[v]:
            for seg2 in _keep_moves(graph, seg, v):
                yield seg2, v
        elif droppable[v]:
            yield _drop_move(graph, seg, v), v


def refine(graph: Graph, strategy: CanonicalStrategy, budget: Number | None = None, *,
           max_evaluations: int = MAX_EVALUATIONS,
           deadline: Callable[[], object] | None = None) -> CanonicalStrategy:
    """Improve `strategy` by local search over lower-set sequences (see the module docstring).

    Parameters
    ----------
    graph : Graph
    strategy : CanonicalStrategy
        The start, a strategy of `graph`.
    budget : int, optional
        Bytes of the whole step (``schedule.peak``). None: minimise the peak, then the
        recomputation cost (``schedule.recompute_cost``, cost units). Given: minimise the
        recomputation cost among plans whose peak is at most `budget` (a start above it first
        lowers its peak).
    max_evaluations : int
        Distinct schedules to compute at most (>= 1).
    deadline : callable, optional
        Called between moves; raises :class:`SearchLimitError` to stop the search: with
        ``limit="time_limit"`` the search returns the best plan found so far, with any other
        limit the error propagates.

    Returns
    -------
    CanonicalStrategy
        `strategy` itself when no move improves it, else a strategy whose (peak, cost) is
        better under the objective; ``method``, ``mode`` and ``budget`` are `strategy`'s.

    Raises
    ------
    ArgumentError
        If `budget` is negative, NaN or infinite, or `max_evaluations` < 1.
    """
    if budget is not None:
        budget = check_budget(budget)
    check_count(max_evaluations, "max_evaluations", 1)
    key = _Objective(budget)
    workers = _limits.cores()
    with (concurrent.futures.ThreadPoolExecutor(workers) if workers > 1
          else contextlib.nullcontext()) as pool:   # one core: no pool, schedules when asked
        run = _Scheduler(graph, pool)
        try:
            seg, changed = _climb(graph, run, key, segment_labels(strategy), max_evaluations,
                                  deadline)
        finally:
            run.abandon()   # the pool's shutdown would otherwise run what is still queued
    if not changed:
        return strategy
    return strategy_of_labels(graph, seg, method=strategy.method, mode=strategy.mode,
                              budget=strategy.budget)


def _climb(graph, run, key, seg, max_evaluations, deadline):
    """The hill climb of :func:`refine` from labelling `seg`: (the last labelling, whether it
    differs from `seg`)."""
    best = key(*run(seg))
    start, changed, pair_cap = 0, False, None
    while len(run.memo) < max_evaluations:
        try:
            found = _improving_move(graph, run, key, seg, best, start, max_evaluations,
                                    deadline)
            if found is None and len(run.memo) < max_evaluations:
                # a local optimum of single moves: try two moves in a row, the first one's
                # result in order of its objective (it need not improve by itself)
                if pair_cap is None:
                    pair_cap = min(max_evaluations, len(run.memo) + PAIR_EVALUATIONS)
                found = _improving_pair(graph, run, key, seg, best, pair_cap, deadline)
        except SearchLimitError as e:
            if e.limit != "time_limit":
                raise
            break   # the time limit: the best labelling so far
        if found is None:
            break
        seg, best, start = found
        changed = True
    return seg, changed


def _ahead(moves, run, caps=None):
    """`moves`, each one's schedule submitted (:meth:`_Scheduler.submit`, against `caps`) when
    it is :data:`AHEAD` per thread before the scan reaches it; what a scan leaves is abandoned
    when the next starts."""
    run.abandon()
    window: collections.deque[Any] = collections.deque()
    size = AHEAD * _limits.cores()
    for move in moves:
        run.submit(move[0], caps)
        window.append(move)
        if len(window) > size:
            yield window.popleft()
    yield from window


def _improving_move(graph, run, key, seg, best, start, max_evaluations, deadline):
    """The first move from `seg` (scanning from node `start`) whose objective is below `best`:
    (labelling, objective, next start), or None (none, or `max_evaluations` reached)."""
    moves = _moves(graph, seg, run.dropped(seg), run.droppable, start)
    caps = key.caps(best)
    for seg2, v in _ahead(moves, run, caps):
        if deadline is not None:
            deadline()
        point = run(seg2, caps)   # None: beyond the caps, so not below best
        k2 = None if point is None else key(*point)
        if k2 is not None and k2 < best:
            return seg2, k2, v + 1
        if len(run.memo) >= max_evaluations:
            return None
    return None


def _improving_pair(graph, run, key, seg, best, max_evaluations, deadline):
    """The first pair of moves from `seg` whose result's objective is below `best`, the first
    moves in order of their own objective, where there are at most :data:`PAIR_MOVES` pairs;
    as :func:`_improving_move`."""
    segs = []
    for seg1, _ in _moves(graph, seg, run.dropped(seg), run.droppable, 0):
        segs.append(seg1)
        if len(segs) ** 2 > PAIR_MOVES:
            return None
    firsts = []
    for i, (seg1, _) in enumerate(_ahead(((s1, None) for s1 in segs), run)):
        firsts.append((key(*run(seg1)), i, seg1))
        if len(run.memo) >= max_evaluations:
            return None
    for _, _, seg1 in sorted(firsts, key=lambda t: t[:2]):
        found = _improving_move(graph, run, key, seg1, best, 0, max_evaluations, deadline)
        if found is not None or len(run.memo) >= max_evaluations:
            return found
    return None
