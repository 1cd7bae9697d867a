"""Canonical strategies and their cost model: overhead (eq. 1) and peak memory (eq. 2).

This module is the reference statement of the paper's cost model, written from the definitions
with node sets. The DP kernels evaluate the same quantities incrementally
(:func:`lowerset._kernels.transition`), and the tests check that both agree on every strategy the
planners return.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ._typing import BoolArray, IntArray, NodeSet, Number
from ._validate import check_budget, check_graph
from .exceptions import ArgumentError, ArgumentTypeError, StrategyError
from .graph import _graph_from_dict, _graph_to_dict
from .lowersets import check_lower_set
from .scheduling import schedule

if TYPE_CHECKING:
    from .graph import Graph
    from .scheduling import Schedule

__all__ = ["CanonicalStrategy"]

_FORMAT = "lowerset.strategy"
_VERSION = 1


class CanonicalStrategy:
    """The canonical strategy of a lower-set sequence L_1 ⊊ ... ⊊ L_k = V (paper, Sec. 3).

    Forward: after computing segment V_i = L_i ∖ L_{i-1}, keep ∂(L_i) and discard the rest of
    V_i. Backward, for i = k..1: recompute V_i from the cache of ∂(L_{i-1}), backpropagate
    through V_i, and free it.

    Parameters
    ----------
    graph : Graph
    lower_sets : sequence of iterables of node labels (or bool masks of shape (n,))
        L_1, ..., L_k; strictly increasing lower sets, the last equal to V. L_1 is not empty.
    method, mode : str, optional
        How the strategy was planned ("exact"/"approx"/a baseline; "time"/"memory"); kept as
        information.
    budget : int or float, optional
        The budget in bytes it was planned for (a float is rounded down).
    planner_seconds : float, optional
        Wall time of the planner, seconds.

    Attributes
    ----------
    lower_sets : list of frozenset
        L_1, ..., L_k.
    segments : list of frozenset
        V_1, ..., V_k.
    cached : list of frozenset
        ∂(L_1), ..., ∂(L_k): the values kept after each forward segment (∂(V) is empty).
    recomputed : frozenset
        V ∖ U_k, the nodes computed twice.
    overhead : int
        Eq. (1): T(V ∖ U_k) = Σ_i T(V_i ∖ ∂(L_i)), cost units.
    memory_profile : list of int
        M(1), ..., M(k) of eq. (2), bytes. As in the paper, a node outside L_i that is both a
        successor of L_i and a predecessor of such a successor is counted in both terms
        M(δ+(L_i)∖L_i) and M(δ−(δ+(L_i))∖L_i).
    peak_memory : int
        max_i M(i), bytes.

    Raises
    ------
    NotALowerSetError
        If some L_i is not a lower set (the message names an entering edge).
    StrategyError
        If the sequence is empty, not strictly increasing, or does not end with V.
    GraphError
        If a label is not a node.
    ArgumentTypeError
        If `graph` is not a Graph, `lower_sets` or one of its items is not iterable, or
        `budget` is not a number.
    ArgumentError
        If `budget` is negative, NaN or infinite.

    References
    ----------
    .. [1] Kusumoto et al., NeurIPS 2019, Sec. 3, eq. (1) and (2).

    Examples
    --------
    >>> g = ls.Graph.chain(4, memory=10)
    >>> s = ls.CanonicalStrategy(g, [{0, 1}, {0, 1, 2, 3}])
    >>> s.overhead, s.memory_profile, s.peak_memory
    (3, [50, 50], 50)
    """

    graph: Graph
    method: str | None
    mode: str | None
    budget: int | None
    planner_seconds: float | None
    overhead: int
    memory_profile: list[int]
    peak_memory: int

    def __init__(self, graph: Graph, lower_sets: Iterable[NodeSet], *, method: str | None = None,
                 mode: str | None = None, budget: Number | None = None,
                 planner_seconds: float | None = None) -> None:
        check_graph(graph, "graph")
        self.graph = graph
        if isinstance(lower_sets, (set, frozenset)) or (
                isinstance(lower_sets, np.ndarray) and lower_sets.ndim == 1):
            raise StrategyError("lower_sets must be a sequence of lower sets [L_1, ..., V], "
                                "not a single set")
        if not isinstance(lower_sets, Iterable):
            raise ArgumentTypeError(f"lower_sets must be a sequence of lower sets [L_1, ..., V], "
                                    f"got {type(lower_sets).__name__}")
        lower_sets = list(lower_sets)
        for i, L in enumerate(lower_sets):
            if not isinstance(L, (Iterable, np.ndarray)):
                raise ArgumentTypeError(f"lower set {i + 1} must be an iterable of node labels "
                                        f"or a bool mask, got {type(L).__name__} {L!r}")
        budget = None if budget is None else check_budget(budget)
        masks = [check_lower_set(graph, L) for L in lower_sets]
        if not masks:
            raise StrategyError("a canonical strategy needs at least one lower set (V)")
        prev = np.zeros(graph.n, dtype=bool)
        for i, m in enumerate(masks):
            if not (m >= prev).all() or m.sum() <= prev.sum():
                raise StrategyError(
                    f"lower set {i + 1} does not strictly contain the one before it; "
                    "the sequence must be strictly increasing")
            prev = m
        if not masks[-1].all():
            missing = graph.nodes_of(~masks[-1])
            raise StrategyError("the last lower set must be V; it misses "
                                f"{sorted(map(repr, missing))[:5]}")
        self._set(_segments_of_masks(masks, graph.n), method, mode, budget, planner_seconds)

    @classmethod
    def from_segments(cls, graph: Graph, seg: npt.ArrayLike, **meta: Any) -> CanonicalStrategy:
        """A strategy from the 0-based segment of each node, without checking it.

        Parameters
        ----------
        graph : Graph
            The graph the strategy plans.
        seg : array_like of int64, shape (n,)
            ``seg[v] = i`` for v in V_{i+1}; monotone along every edge, every segment 0..max
            non-empty.
        **meta
            `method`, `mode`, `budget`, `planner_seconds` as in the constructor.
        """
        self = cls.__new__(cls)
        self.graph = graph
        self._set(np.ascontiguousarray(seg, dtype=np.int64), **meta)
        return self

    def _set(self, seg, method=None, mode=None, budget=None, planner_seconds=None):
        seg.setflags(write=False)
        self._seg = seg
        self.method = method
        self.mode = mode
        self.budget = budget
        self.planner_seconds = planner_seconds
        self._evaluate()

    def _evaluate(self):
        """Eq. (1) and eq. (2) of every segment at once, in O(#V + #E + k) from the segment of
        each node (``seg[v] = i - 1`` for v in V_i):

        - v lies on ∂(L_i) exactly for ``seg[v] <= i - 1 < last[v]``, with ``last[v]`` the
          largest segment of its successors (so v is in U_i from i = seg[v] + 1 on, and the
          nodes on no boundary are recomputed: eq. (1));
        - w lies in δ+(L_i)∖L_i for ``first[w] <= i - 1 < seg[w]``, with ``first[w]`` the
          least segment of its predecessors;
        - p lies in δ−(δ+(L_i))∖L_i for ``min first[w] <= i - 1 < seg[p]`` over its successors
          w (then i - 1 < seg[p] <= seg[w]).

        Each term of eq. (2) is then a sum over a range of segments per node."""
        g = self.graph
        T, M = g.cost, g.memory
        seg = self._seg
        k = int(seg.max()) + 1
        has_succ = np.diff(g.succ_ptr) > 0
        has_pred = np.diff(g.pred_ptr) > 0
        last = seg.copy()
        if has_succ.any():
            last[has_succ] = np.maximum.reduceat(seg[g.succ_idx], g.succ_ptr[:-1][has_succ])
        first = np.full(g.n, k, dtype=np.int64)
        if has_pred.any():
            first[has_pred] = np.minimum.reduceat(seg[g.pred_idx], g.pred_ptr[:-1][has_pred])
        reach = np.full(g.n, k, dtype=np.int64)   # least first[w] over the successors w
        if has_succ.any():
            reach[has_succ] = np.minimum.reduceat(first[g.succ_idx], g.succ_ptr[:-1][has_succ])
        kept = last > seg
        self._last = last

        def ranged(lo, hi, weight):
            """Per segment i (0-based), the sum of `weight` over the nodes with lo <= i < hi."""
            on = lo < hi
            diff = np.zeros(k + 1, dtype=np.int64)
            np.add.at(diff, lo[on], weight[on])
            np.add.at(diff, hi[on], -weight[on])
            return np.cumsum(diff[:k])

        cached_before = ranged(seg + 1, np.where(kept, k, 0), M)
        own = np.bincount(seg, weights=M, minlength=k).astype(np.int64)
        profile = (cached_before + 2 * own + ranged(first, seg, M)
                   + ranged(reach, seg, M))
        self.memory_profile = [int(x) for x in profile]
        self.peak_memory = max(self.memory_profile)
        self.overhead = int(T[~kept].sum())
        self._recomputed_mask = ~kept

    @cached_property
    def _masks(self):
        """Bool masks (shape (n,)) of L_1, ..., L_k."""
        return [self._seg <= i for i in range(int(self._seg.max()) + 1)]

    @cached_property
    def _segment_masks(self):
        """Bool masks (shape (n,)) of V_1, ..., V_k."""
        return [self._seg == i for i in range(int(self._seg.max()) + 1)]

    @cached_property
    def _cached_masks(self):
        """Bool masks (shape (n,)) of ∂(L_1), ..., ∂(L_k)."""
        return [(self._seg <= i) & (self._last > i) for i in range(int(self._seg.max()) + 1)]

    @cached_property
    def lower_sets(self) -> list[frozenset[Hashable]]:
        """L_1 ⊂ ... ⊂ L_k = V, each a frozenset of labels."""
        return [self.graph.nodes_of(m) for m in self._masks]

    @cached_property
    def segments(self) -> list[frozenset[Hashable]]:
        """V_i = L_i ∖ L_(i-1), i = 1..k, each a frozenset of labels."""
        return [self.graph.nodes_of(m) for m in self._segment_masks]

    @cached_property
    def cached(self) -> list[frozenset[Hashable]]:
        """∂(L_i), i = 1..k: the nodes of L_i kept after segment i (a node of L_i with a
        successor outside it), each a frozenset of labels."""
        return [self.graph.nodes_of(m) for m in self._cached_masks]

    @cached_property
    def recomputed(self) -> frozenset[Hashable]:
        """The nodes recomputed in the backward pass (eq. 1: in some V_i, not in ∂(L_i)), a
        frozenset of labels."""
        return self.graph.nodes_of(self._recomputed_mask)

    @cached_property
    def schedule(self) -> Schedule:
        """The :class:`~lowerset.Schedule` of a training step under this strategy (computed
        once): its peak in bytes and the overhead the executor really pays,
        ``schedule.recompute_cost``."""
        return schedule(self)

    def masks(self) -> list[BoolArray]:
        """Return the bool masks (shape (n,), node ids of ``graph.labels``) of L_1, ..., L_k."""
        return [m.copy() for m in self._masks]

    def segment_of_nodes(self) -> IntArray:
        """Return the 0-based segment of each node (int64, shape (n,), node ids of
        ``graph.labels``): ``i`` for the nodes of V_{i+1}."""
        return self._seg.copy()

    def __len__(self) -> int:
        return int(self._seg.max()) + 1

    def __repr__(self) -> str:
        return (f"CanonicalStrategy(k={len(self)}, overhead={self.overhead}, "
                f"peak_memory={self.peak_memory}, method={self.method!r}, mode={self.mode!r})")

    # -- JSON ------------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict (format "lowerset.strategy", version 1).

        It holds the graph (nodes, edges, costs, memory) and the lower sets, so a file can be
        loaded without the graph and checked against one.

        Raises
        ------
        StrategyError
            If a node label is not a str or an int (JSON cannot keep other label types).
        """
        g = self.graph
        return {
            "format": _FORMAT,
            "version": _VERSION,
            "graph": _json_graph(g),
            "lower_sets": [sorted(L, key=g.index.__getitem__) for L in self.lower_sets],
            "method": self.method,
            "mode": self.mode,
            "budget": self.budget,
            "overhead": self.overhead,
            "peak_memory": self.peak_memory,
        }

    @classmethod
    def from_dict(cls, data: Any, graph: Graph | None = None) -> CanonicalStrategy:
        """Inverse of :meth:`to_dict`.

        Parameters
        ----------
        data : dict
        graph : Graph, optional
            If given, the stored graph must match it (:meth:`Graph.matches`: equal up to node
            order and measured workspace peaks) and the strategy is attached to `graph`, so
            its schedule uses `graph`'s own measurements.

        Raises
        ------
        StrategyError
            If the dict is not a lowerset strategy of a known version, an entry is missing or
            malformed (the lower sets are lists of labels forming a valid sequence, the budget
            a number of bytes or null, method and mode strings or null), or its graph does not
            match `graph`.
        GraphError
            If the stored graph is invalid.
        ArgumentTypeError
            If `graph` is neither None nor a Graph.
        """
        graph, lower_sets, meta = _read_plan_dict(data, graph, _FORMAT, _VERSION, "strategy",
                                                  "lower_sets", _lower_sets_of)
        return cls(graph, lower_sets, **meta)


def _segments_of_masks(masks, n):
    """The 0-based segment of each node (int64, shape (n,)) of strictly increasing lower sets
    given as bool masks: the number of them that leave the node out."""
    seg = np.full(n, len(masks), dtype=np.int64)
    for m in masks:
        seg -= np.asarray(m, dtype=bool)
    return seg


def _json_graph(g: Graph) -> dict[str, Any]:
    """The JSON of a plan's graph (nodes, edges, costs, memory; :meth:`to_dict`).

    Raises
    ------
    StrategyError
        If a node label is not a str or an int (JSON cannot keep other label types).
    """
    for v in g.labels:
        if not isinstance(v, (str, int)) or isinstance(v, bool):
            raise StrategyError(f"node label {v!r} is not a str or int; cannot write JSON")
    return _graph_to_dict(g, attrs=False)


def _lower_sets_of(raw: Any) -> list[set[Any]]:
    """The lower sets of a strategy's dict, or StrategyError where they are not lists of
    labels."""
    try:
        if not isinstance(raw, list) or not all(isinstance(L, list) for L in raw):
            raise TypeError("a list of lists of node labels expected")
        return [set(L) for L in raw]
    except TypeError as e:
        raise StrategyError(f"malformed strategy: invalid entry 'lower_sets': {e}") from None


def _read_plan_dict(data: Any, graph: Graph | None, fmt: str, version: int, what: str,
                    entry: str, parse: Callable[[Any], Any]
                    ) -> tuple[Graph, Any, dict[str, Any]]:
    """A plan's dict (a strategy's or a drop set's :meth:`to_dict`), checked in the order of
    its entries: (the graph to attach the plan to, ``parse(data[entry])``, ``method``,
    ``mode`` and ``budget`` as keyword arguments).

    Raises
    ------
    StrategyError
        If the dict is not of format `fmt` at `version`, "graph" or `entry` is missing, the
        graph, the entry (`parse` raises), method, mode or budget is malformed, or the stored
        graph does not match `graph`.
    GraphError
        If the stored graph is invalid.
    ArgumentTypeError
        If `graph` is neither None nor a Graph.
    """
    if graph is not None:
        check_graph(graph, "graph")
    if not isinstance(data, dict) or data.get("format") != fmt:
        raise StrategyError(f"not a lowerset {what} (missing format {fmt!r})")
    if data.get("version") != version:
        raise StrategyError(f"unsupported {what} version {data.get('version')!r}")
    missing = [k for k in ("graph", entry) if k not in data]
    if missing:
        raise StrategyError(f"malformed strategy: missing entry {missing[0]!r}")
    try:
        stored = _graph_from_dict(data["graph"])
    except (KeyError, TypeError) as e:
        raise StrategyError(f"malformed strategy: invalid entry 'graph': {e}") from None
    parsed = parse(data[entry])
    for key in ("method", "mode"):
        if data.get(key) is not None and not isinstance(data[key], str):
            raise StrategyError(f"malformed strategy: {key!r} must be a string or null, got "
                                f"{data[key]!r}")
    try:
        budget = None if data.get("budget") is None else check_budget(data["budget"])
    except (ArgumentError, ArgumentTypeError) as e:
        raise StrategyError(f"malformed strategy: {e}") from None
    if graph is not None and not graph.matches(stored):
        raise StrategyError("the strategy was planned for a different graph (nodes, edges, "
                            "costs, memory or execution facts differ)")
    meta = {"method": data.get("method"), "mode": data.get("mode"), "budget": budget}
    return stored if graph is None else graph, parsed, meta
