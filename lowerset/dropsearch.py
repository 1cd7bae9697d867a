"""Search over dropped sets beyond canonical strategies, each judged by its schedule.

:func:`search_dropped` looks for the set of dropped nodes with the least recomputation cost
(``schedule.recompute_cost``, cost units) whose schedule peaks within a budget (bytes), among
all sets the executor can run (:class:`lowerset.DropSetStrategy`), not only those of lower-set
sequences. It starts from two plans and climbs from the better one:

- the given plan (in practice the planner's canonical strategy);
- the cheapest feasible prefix of the droppable units sorted by recomputation cost per byte
  freed (T over M of the unit's nodes), the order of a greedy knapsack: dropping more never
  recomputes less (a dropped value is recomputed when a backward or a needed recomputation
  reads it, and dropping more only adds readers that need recomputing), so the first prefix
  that fits is the cheapest one that fits;
- a first-improvement hill climb over three moves: *keep* a dropped unit; *swap*: keep a
  dropped unit and drop one kept unit that costs less; *repair*: keep a dropped unit and drop
  kept units in cost-per-byte order, one more at a time, while together they cost less. It
  stops at a local optimum, after `max_evaluations` schedules, or at the deadline.

A unit is a droppable node, or an in-place group (a function that overwrites an array and the
array's producer, dropped together). Every schedule is stopped by the kernel where it passes
the budget or the best cost so far (``cost_cap``, ``peak_cap``), which the decision needs no
more than. The search is local. Every drop set is a plan of general recomputation, so
``lowerset.optimum(g, budget, model="general")`` bounds its recomputation from below;
``examples/bench_optimality.py`` sets the two side by side, and tests/test_dropset.py against
an exhaustive search over every union of units on small graphs.

References
----------
.. [1] Kusumoto et al., NeurIPS 2019, Sec. 3 (liveness analysis of a plan).
.. [2] Jain et al., "Checkmate", MLSys 2020 (rematerialization beyond lower sets).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ._typing import BoolArray
from ._validate import check_budget, check_count
from .dropset import DropSetStrategy, drop_units
from .exceptions import SearchLimitError
from .graph import Graph
from .scheduling import _known_peak_and_cost, _peak_and_cost, dropped_nodes
from .strategy import CanonicalStrategy

__all__ = ["search_dropped"]

#: Schedules one search computes at most, by default.
MAX_EVALUATIONS = 20_000


def search_dropped(graph: Graph, budget: int, start: CanonicalStrategy | DropSetStrategy, *,
                   max_evaluations: int = MAX_EVALUATIONS,
                   deadline: Callable[[], object] | None = None) -> DropSetStrategy | None:
    """The least-recomputation drop set found within `budget` (see the module docstring).

    Parameters
    ----------
    graph : Graph
    budget : int
        Bytes of the whole step (``schedule.peak``).
    start : CanonicalStrategy or DropSetStrategy
        A plan of `graph`; one of the two starting points.
    max_evaluations : int
        Schedules to compute at most (>= 1).
    deadline : callable, optional
        Called between schedules; raises :class:`SearchLimitError` to stop the search: with
        ``limit="time_limit"`` it returns the best plan found so far, with any other limit the
        error propagates.

    Returns
    -------
    DropSetStrategy or None
        A plan whose schedule peaks at most `budget` and recomputes strictly less than
        `start`'s, with `start`'s ``method`` and ``mode`` and ``budget=budget``; None when the
        search finds none.

    Raises
    ------
    ArgumentError
        If `budget` is negative, NaN or infinite, or `max_evaluations` < 1.
    """
    budget = check_budget(budget)
    check_count(max_evaluations, "max_evaluations", 1)
    run = _Evaluations(graph, budget, max_evaluations, deadline)
    start_mask = dropped_nodes(start)
    peak, cost = _known_peak_and_cost(graph, start_mask)   # the planner scheduled it
    if peak <= budget:
        run.best, run.best_cost = start_mask, cost
    try:
        _greedy_prefix(run)
        if run.best is not None:
            _climb(run)
    except _Spent:
        pass
    except SearchLimitError as e:
        if e.limit != "time_limit":
            raise
    if run.best is None or (peak <= budget and run.best_cost >= cost):
        return None
    return DropSetStrategy(graph, run.best, method=start.method, mode=start.mode, budget=budget)


class _Evaluations:
    """The schedules of one search: the units, their cost-per-byte order, the best feasible
    set so far and its cost, and the schedules left of `max_evaluations` (past it,
    :class:`_Spent`)."""

    def __init__(self, graph, budget, max_evaluations, deadline):
        self.graph = graph
        self.budget = budget
        self.left = max_evaluations
        self.deadline = deadline
        self.units = drop_units(graph)
        cost = np.asarray(graph.cost, dtype=np.float64)
        # the bytes of a node's outputs, a view's included: M_v counts a view as 0 bytes, but
        # a kept view holds its base, so it weighs what its base does
        out_bytes = np.array([sum(nf.outputs) for nf in graph.facts.nodes], dtype=np.float64)
        self.unit_cost = np.array([cost[u].sum() for u in self.units])
        unit_bytes = np.array([out_bytes[u].sum() for u in self.units])
        # cost per byte, cheapest first (a unit of no bytes last)
        self.ratio = self.unit_cost / np.maximum(unit_bytes, 1e-9)
        self.order = np.argsort(self.ratio, kind="stable")
        self.best: BoolArray | None = None
        self.best_cost: int | None = None

    def attempt(self, dropped):
        """Schedule `dropped` against the budget and the best cost so far: "better" (it fits
        and recomputes less, and becomes the best), "over_cost" (it recomputes at least the
        best) or "over_budget"."""
        if self.deadline is not None:
            self.deadline()
        if self.left <= 0:
            raise _Spent()
        self.left -= 1
        cap = None if self.best_cost is None else self.best_cost - 1
        peak, cost = _peak_and_cost(self.graph, dropped, cost_cap=cap, peak_cap=self.budget)
        if cap is not None and cost > cap:
            return "over_cost"
        if peak is None or peak > self.budget:
            return "over_budget"
        self.best, self.best_cost = dropped.copy(), cost
        return "better"

    def dropped_units(self):
        """Ids of the units the best set drops, most expensive first."""
        best = self.best
        assert best is not None   # the climb starts from a set that fits
        ids = [i for i, u in enumerate(self.units) if best[u[0]]]
        return sorted(ids, key=lambda i: -self.unit_cost[i])


class _Spent(Exception):
    """`max_evaluations` schedules computed: the search returns its best."""


def _greedy_prefix(run):
    """Schedule the prefixes of the units in cost-per-byte order, shortest first, until one
    fits (the cheapest prefix that does) or one recomputes at least the best so far (so does
    every longer one)."""
    dropped = np.zeros(run.graph.n, dtype=bool)
    for k in range(len(run.order) + 1):
        if k:
            dropped[run.units[run.order[k - 1]]] = True
        if run.attempt(dropped) != "over_budget":
            return


def _climb(run):
    """First-improvement hill climb from the best set over keep, swap and repair moves (see
    the module docstring), until no move improves."""
    while _improve(run):
        pass


def _improve(run):
    """Whether a keep, swap or repair move from the best set improves it (the first that does
    is taken at once)."""
    dropped = run.dropped_units()
    for i in dropped:
        trial = run.best.copy()
        trial[run.units[i]] = False
        if run.attempt(trial) == "better":
            return True
    kept = [j for j in run.order.tolist() if not run.best[run.units[j][0]]]
    return any(_swap(run, i, kept) or _repair(run, i, kept) for i in dropped)


def _swap(run, i, kept):
    """Keep unit `i` and drop one kept unit of lower cost: whether one improves."""
    base = run.best.copy()
    base[run.units[i]] = False
    for j in kept:
        if run.unit_cost[j] < run.unit_cost[i]:
            trial = base.copy()
            trial[run.units[j]] = True
            if run.attempt(trial) == "better":
                return True
    return False


def _repair(run, i, kept):
    """Keep unit `i` and drop the kept units in cost-per-byte order, one more at a time, while
    they cost less than `i` together and the set recomputes less than the best: whether a
    set so formed improves (several cheap values for one dear one)."""
    trial = run.best.copy()
    trial[run.units[i]] = False
    spent = 0.0
    for j in kept:
        spent += run.unit_cost[j]
        if spent >= run.unit_cost[i]:
            return False
        trial[run.units[j]] = True
        verdict = run.attempt(trial)
        if verdict != "over_budget":
            return verdict == "better"
    return False
