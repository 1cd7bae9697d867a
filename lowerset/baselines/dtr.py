"""Dynamic Tensor Rematerialization (DTR) simulated over a training step: a runtime cache as a
baseline for static plans.

DTR (Kirisame et al., ICLR 2021) plans nothing: it runs the step, evicts arrays greedily when
an allocation would pass the budget, and rematerializes an evicted array when a function reads
it, any number of times. :func:`dtr` simulates it over the same step and the same byte
accounting as :func:`lowerset.schedule`, so its peak and recomputation compare with those of
a canonical strategy directly: its events are folded by the fold that folds a
:class:`~lowerset.Schedule` (:func:`lowerset._schedule_kernels.fold_run`). The runtime's policy
is in :mod:`._dtr_runtime`, the heuristics in :mod:`._dtr_heuristics`.
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Hashable

from .._typing import Number
from .._validate import check_budget, check_choice, requires_graph
from ..exceptions import ArgumentError, ArgumentTypeError
from ..graph import Graph
from ..scheduling import EventArrays, Schedule
from ._dtr_heuristics import HEURISTICS
from ._dtr_runtime import Runtime

__all__ = ["dtr", "DTRSchedule", "HEURISTICS"]


class DTRSchedule(Schedule):
    """The events of one training step under DTR, with their memory (a :class:`Schedule`).

    ``events``, ``fold``, ``peak``, ``timeline`` and ``resident`` are those of any schedule;
    the event kinds are ``forward``, ``backward``, ``seed_grad``, ``free_grad``,
    ``free_value`` and ``free_state`` (eager eviction of a dead array) as in the hooked
    schedule, and ``rematerialize``, ``evict`` and ``evict_state``. ``recomputed`` lists the
    rematerialized nodes in order (a node may appear many times) and ``recompute_cost`` is
    their total cost T in cost units.

    Parameters
    ----------
    graph : Graph
        The step simulated.
    arrays : tuple of ndarray
        The events as arrays ``(kind, node, nbytes, optr, oidx)``, as :class:`Schedule`
        takes them.
    budget : int
        Bytes (whole step).
    heuristic : str
        The eviction heuristic simulated: "dtr", "dtr_local", "lru" or "size".
    rematerializations : dict
        Node label -> number of rematerializations (nodes never rematerialized left out).
    evictions : int
        Storages evicted (eager frees not counted).
    seconds : float
        Wall time of the simulation.
    """

    budget: int
    heuristic: str
    rematerializations: dict[Hashable, int]
    evictions: int
    seconds: float

    def __init__(self, graph: Graph, arrays: EventArrays, budget: int, heuristic: str,
                 rematerializations: dict[Hashable, int], evictions: int,
                 seconds: float) -> None:
        super().__init__(graph, None, arrays)
        self.budget = budget
        self.heuristic = heuristic
        self.rematerializations = rematerializations
        self.evictions = evictions
        self.seconds = seconds

    def __repr__(self) -> str:
        return (f"DTRSchedule({len(self)} events, peak={self.peak} bytes, budget={self.budget} "
                f"bytes, heuristic={self.heuristic!r}, recompute_cost={self.recompute_cost})")


@requires_graph
def dtr(G: Graph, budget: Number, heuristic: str = "dtr",
        max_overhead: float = 50) -> DTRSchedule:
    """Simulate DTR over one training step of `G` within `budget` bytes.

    The program is the step of `G`'s execution facts: every forward in ``forward_order``,
    the seeds' initial gradients, every backward in ``backward_order``. Before a function runs,
    the arrays it reads are pinned and the evicted ones rematerialized by replaying the
    functions that made them (recursively); before anything is allocated, unpinned arrays are
    evicted, lowest `heuristic` score first, until the allocation fits; an array nothing reads
    any more is freed at once. Bytes are counted as :func:`lowerset.schedule` counts them
    (parameters, inputs, gradients, workspace; a view shares its base's buffer). Returned
    outputs, gradients, a stochastic function's state and what pinned or in-place functions
    make are never evicted; a pinned function never runs twice.

    Parameters
    ----------
    G : Graph
        With execution facts (``lowerset.default_facts`` for a graph without them).
    budget : int or float
        Bytes for the whole step.
    heuristic : {"dtr", "dtr_local", "lru", "size"}
        ``"dtr"``: h_DTR with evicted neighbourhoods as union-find equivalence classes;
        ``"dtr_local"``: the array's own cost over bytes times staleness; ``"lru"``: least
        recently used; ``"size"``: largest first (:mod:`._dtr_heuristics`).
    max_overhead : float
        Thrashing bound: rematerializations may cost at most this times T(V) (default 50).

    Returns
    -------
    DTRSchedule
        ``.peak`` (bytes, at most `budget`), ``.recompute_cost`` (cost units),
        ``.rematerializations`` (per node label), ``.events``.

    Raises
    ------
    InfeasibleBudgetError
        If DTR cannot complete the step within `budget`: an allocation does not fit with every
        evictable array evicted (the message names the function and the bytes it needed), or
        the rematerializations pass `max_overhead` x T(V) (thrashing). ``.method`` is
        ``"dtr"`` and ``.reason`` says which.
    ArgumentError
        If `budget` is negative or not finite, `heuristic` is unknown, or `max_overhead` is
        not positive.
    ArgumentTypeError
        If `G` is not a Graph or `budget` or `max_overhead` is not a number.

    References
    ----------
    .. [1] Kirisame et al., "Dynamic Tensor Rematerialization", ICLR 2021, Sec. 3 (runtime,
       eager eviction), Sec. 4 (h_DTR, equivalence classes).
    .. [2] Kusumoto et al., NeurIPS 2019, Sec. 3 (the step and its memory, as
       :func:`lowerset.schedule` counts it).

    Examples
    --------
    >>> g = ls.Graph.chain(8, memory=10)
    >>> plain = ls.dtr(g, budget=10**6)
    >>> plain.recompute_cost, plain.peak == ls.schedule(g).peak
    (0, True)
    >>> s = ls.dtr(g, budget=70)
    >>> s.peak <= 70, s.recompute_cost, s.rematerializations
    (True, 5, {0: 1, 1: 2, 2: 1, 4: 1})
    """
    budget = check_budget(budget)
    check_choice(heuristic, "heuristic", HEURISTICS)
    if isinstance(max_overhead, bool) or not isinstance(max_overhead, numbers.Real):
        raise ArgumentTypeError(f"max_overhead must be a number, got {max_overhead!r}")
    if not (max_overhead > 0 and math.isfinite(max_overhead)):
        raise ArgumentError(f"max_overhead must be a positive number, got {max_overhead!r}")
    start = time.perf_counter()
    rt = Runtime(G, budget, heuristic, float(max_overhead)).run()
    remats = {G.labels[v]: int(c) for v, c in enumerate(rt.remats.tolist()) if c}
    return DTRSchedule(G, rt.events.arrays(), budget, heuristic, remats, rt.evictions,
                       time.perf_counter() - start)
