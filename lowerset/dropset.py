"""Strategies given by the values they drop, beyond the canonical strategies of lower sets.

A canonical strategy (paper, Sec. 3) drops ``V_i ∖ ∂(L_i)``: a value is dropped only together
with every function that reads it, in one segment. The executor's schedule
(:mod:`lowerset.scheduling`) needs none of that: from any set of dropped values it recomputes,
before each backward, the dropped values that backward reads and the dropped values those need,
each once, and frees by liveness analysis. A :class:`DropSetStrategy` is such a plan: a set of
dropped nodes, judged by its schedule alone. It reaches plans no lower-set sequence does, for
instance a residual network that drops each block's output and every normalization and
activation but keeps the convolutions between them (a lower-set sequence that drops a block's
output puts the whole next block in its segment).

References
----------
.. [1] Kusumoto et al., NeurIPS 2019, Sec. 3 (canonical strategy; liveness analysis).
.. [2] Jain et al., "Checkmate", MLSys 2020, Sec. 4 (a plan as the set of values kept).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from ._typing import BoolArray, IntArray, Number
from ._validate import check_budget, check_graph
from .exceptions import ArgumentTypeError, StrategyError
from .scheduling import _drop_rule, dropped_nodes, pinned_nodes, schedule
from .strategy import CanonicalStrategy, _json_graph, _read_plan_dict

if TYPE_CHECKING:
    from .graph import Graph
    from .scheduling import Schedule

__all__ = ["DropSetStrategy", "Strategy", "STRATEGY_TYPES", "drop_units"]

_FORMAT = "lowerset.dropset"
_VERSION = 1


class DropSetStrategy:
    """A recomputation strategy given by the nodes whose outputs it drops after the forward pass.

    The schedule (:func:`lowerset.schedule`) keeps every other value, recomputes a dropped one
    once, just before the first backward that needs it, and frees it after its last use. The
    plan has no lower sets, so eq. (1) and eq. (2) do not apply: its overhead is what its
    schedule recomputes.

    Parameters
    ----------
    graph : Graph
    dropped : iterable of node labels, or ndarray of bool with shape (n,)
        The dropped nodes. Each must be droppable (a function reads its outputs; it is neither
        pinned, ``NodeFacts.pinned``, nor a returned output), and an in-place function and the
        producer of the array it overwrites (``NodeFacts.inplace``) are dropped together or
        not at all.
    method, mode : str, optional
        How the plan was found; kept as information.
    budget : int or float, optional
        The budget in bytes it was planned for (a float is rounded down).
    planner_seconds : float, optional
        Wall time of the planner, seconds.

    Attributes
    ----------
    dropped : frozenset
        The labels of the dropped nodes.
    overhead : int
        ``schedule.recompute_cost``: the cost units the executor recomputes.

    Raises
    ------
    StrategyError
        If a node may not be dropped (the message names the first one and why) or an in-place
        group is split.
    GraphError
        If a label is not a node.
    ArgumentTypeError
        If `graph` is not a Graph, `dropped` is not iterable, or `budget` is not a number.
    ArgumentError
        If `budget` is negative, NaN or infinite.

    Examples
    --------
    >>> g = ls.Graph.chain(4, memory=10)
    >>> s = ls.DropSetStrategy(g, {0, 2})
    >>> s.schedule.recomputed, s.overhead
    ([2, 0], 2)
    """

    graph: Graph
    method: str | None
    mode: str | None
    budget: int | None
    planner_seconds: float | None

    def __init__(self, graph: Graph, dropped: Iterable[Hashable] | BoolArray, *,
                 method: str | None = None, mode: str | None = None,
                 budget: Number | None = None, planner_seconds: float | None = None) -> None:
        check_graph(graph, "graph")
        if isinstance(dropped, (str, bytes)) or not isinstance(dropped, (Iterable, np.ndarray)):
            raise ArgumentTypeError(f"dropped must be an iterable of node labels or a bool mask, "
                                    f"got {type(dropped).__name__}")
        mask = graph.mask(dropped)
        _check_droppable(graph, mask)
        self.graph = graph
        self._mask = mask
        mask.setflags(write=False)
        self.method = method
        self.mode = mode
        self.budget = None if budget is None else check_budget(budget)
        self.planner_seconds = planner_seconds

    @classmethod
    def of(cls, strategy: CanonicalStrategy, **meta: Any) -> DropSetStrategy:
        """The drop set of a canonical strategy (:func:`lowerset.scheduling.dropped_nodes`):
        the same schedule.

        Parameters
        ----------
        strategy : CanonicalStrategy
        **meta
            `method`, `mode`, `budget`, `planner_seconds` as in the constructor (default: the
            strategy's).
        """
        meta = {"method": strategy.method, "mode": strategy.mode, "budget": strategy.budget,
                "planner_seconds": strategy.planner_seconds, **meta}
        return cls(strategy.graph, dropped_nodes(strategy), **meta)

    def dropped_mask(self) -> BoolArray:
        """Return the bool mask of the dropped nodes (shape (n,), node ids of
        ``graph.labels``)."""
        return self._mask.copy()

    @cached_property
    def dropped(self) -> frozenset[Hashable]:
        """The labels of the dropped nodes."""
        return self.graph.nodes_of(self._mask)

    @cached_property
    def schedule(self) -> Schedule:
        """The :class:`~lowerset.Schedule` of a training step under this plan (computed once)."""
        return schedule(self)

    @property
    def overhead(self) -> int:
        """Cost units the schedule recomputes (``schedule.recompute_cost``)."""
        return self.schedule.recompute_cost

    def __repr__(self) -> str:
        return (f"DropSetStrategy(dropped={int(self._mask.sum())} nodes, "
                f"method={self.method!r}, mode={self.mode!r})")

    # -- JSON ------------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict (format "lowerset.dropset", version 1): the graph
        (nodes, edges, costs, memory) and the dropped labels in node order.

        Raises
        ------
        StrategyError
            If a node label is not a str or an int (JSON cannot keep other label types).
        """
        g = self.graph
        return {"format": _FORMAT, "version": _VERSION, "graph": _json_graph(g),
                "dropped": [g.labels[v] for v in np.flatnonzero(self._mask).tolist()],
                "method": self.method, "mode": self.mode, "budget": self.budget,
                "overhead": self.overhead, "peak": self.schedule.peak}

    @classmethod
    def from_dict(cls, data: Any, graph: Graph | None = None) -> DropSetStrategy:
        """Inverse of :meth:`to_dict`.

        Parameters
        ----------
        data : dict
        graph : Graph, optional
            If given, the stored graph must match it (:meth:`Graph.matches`) and the plan is
            attached to `graph`.

        Raises
        ------
        StrategyError
            If the dict is not a drop-set strategy of a known version, an entry is missing or
            malformed, a node may not be dropped, or its graph does not match `graph`.
        GraphError
            If the stored graph is invalid or a dropped label is not a node.
        ArgumentTypeError
            If `graph` is neither None nor a Graph.
        """
        graph, dropped, meta = _read_plan_dict(data, graph, _FORMAT, _VERSION,
                                               "drop-set strategy", "dropped", _labels_of)
        return cls(graph, dropped, **meta)


def _labels_of(raw: Any) -> list[Any]:
    """The dropped labels of a drop set's dict, or StrategyError where they are not a list."""
    if not isinstance(raw, list):
        raise StrategyError("malformed strategy: 'dropped' must be a list of node labels")
    return raw


def drop_units(graph: Graph) -> list[IntArray]:
    """The nodes a plan may drop, grouped into the units it drops whole: an in-place group
    (``NodeFacts.inplace``: a function that overwrites an array and the array's producer)
    whose members may all be dropped, else one node. A group with a member that may not be
    dropped is in no unit. Any union of units is a valid :class:`DropSetStrategy`.

    Parameters
    ----------
    graph : Graph

    Returns
    -------
    list of ndarray of int64
        Node ids per unit, in node order of each unit's first node.
    """
    _, _, droppable, tie = _drop_rule(graph)
    nodes = np.flatnonzero(droppable)
    if tie is None:
        return [np.array([v]) for v in nodes.tolist()]
    groups: dict[int, list[int]] = {}
    for v in nodes.tolist():
        groups.setdefault(int(tie[v]), []).append(v)
    size = np.bincount(tie, minlength=graph.n)
    return [np.array(m) for m in groups.values() if len(m) == size[tie[m[0]]]]


def _check_droppable(g: Graph, mask: BoolArray) -> None:
    """Raise :class:`StrategyError` naming the first node of `mask` (in node order) that may
    not be dropped, or the first in-place group `mask` splits."""
    _, _, droppable, tie = _drop_rule(g)
    bad = np.flatnonzero(mask & ~droppable)
    if bad.size:
        v = int(bad[0])
        returned = {u for u, _ in g.facts.returned}
        why = ("it is pinned (NodeFacts.pinned)" if pinned_nodes(g)[v]
               else "it is a returned output" if v in returned
               else "no function reads its outputs")
        raise StrategyError(f"node {g.labels[v]!r} may not be dropped: {why}")
    if tie is not None:
        whole = np.ones(g.n, dtype=bool)
        np.logical_and.at(whole, tie, mask)
        split = np.flatnonzero(mask & ~whole[tie])
        if split.size:
            v = int(split[0])
            kept = int(np.flatnonzero((tie == tie[v]) & ~mask)[0])
            raise StrategyError(
                f"node {g.labels[v]!r} is dropped but {g.labels[kept]!r} is not: an in-place "
                "function and the producer of the array it overwrites share one buffer and are "
                "dropped together or not at all")


#: The plan classes that :func:`lowerset.schedule` and the executors run (for ``isinstance``).
STRATEGY_TYPES = (CanonicalStrategy, DropSetStrategy)
#: The type of a plan the executors run.
Strategy = CanonicalStrategy | DropSetStrategy
