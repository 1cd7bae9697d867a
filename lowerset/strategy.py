"""Canonical strategies and their cost model: overhead (eq. 1) and peak memory (eq. 2).

This module is the reference statement of the paper's cost model, written from the definitions
with node sets. The DP kernels evaluate the same quantities incrementally
(:func:`lowerset._kernels.transition`), and the tests check that both agree on every strategy the
planners return.
"""

from collections.abc import Iterable
from functools import cached_property

import numpy as np

from ._validate import check_budget, check_graph
from .exceptions import ArgumentError, ArgumentTypeError, StrategyError
from .graph import _graph_from_dict, _graph_to_dict
from .lowersets import check_lower_set

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

    def __init__(self, graph, lower_sets, *, method=None, mode=None, budget=None,
                 planner_seconds=None):
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
            raise StrategyError(f"the last lower set must be V; it misses {sorted(map(repr, missing))[:5]}")
        self._set(masks, method, mode, budget, planner_seconds)

    @classmethod
    def from_family(cls, graph, masks, **meta):
        """A strategy from the planner's own lower sets (bool masks, shape (n,), strictly
        increasing lower sets ending at V), without checking them again; `meta`: `method`,
        `mode`, `budget`, `planner_seconds` as in the constructor."""
        self = cls.__new__(cls)
        self.graph = graph
        self._set(masks, **meta)
        return self

    def _set(self, masks, method=None, mode=None, budget=None, planner_seconds=None):
        self._masks = masks
        self.method = method
        self.mode = mode
        self.budget = budget
        self.planner_seconds = planner_seconds
        self._evaluate()

    def _evaluate(self):
        """Eq. (1) and eq. (2) of every segment at once: row i of each (k, n) or (k, #E) bool
        array is lower set L_i."""
        g = self.graph
        T, M = g.cost, g.memory
        src = np.repeat(np.arange(g.n), np.diff(g.succ_ptr))  # edge (src[j], dst[j])
        dst = g.succ_idx
        L = np.array(self._masks, dtype=bool).reshape(len(self._masks), g.n)
        prev = np.zeros_like(L)
        prev[1:] = L[:-1]
        Vi = L & ~prev
        leaving = L[:, src] & ~L[:, dst]       # edges from L_i to V∖L_i
        rows, cols = np.nonzero(leaving)
        bnd = np.zeros_like(L)                 # ∂(L_i) = δ−(V∖L_i) ∩ L_i
        bnd[rows, src[cols]] = True
        succ_out = np.zeros_like(L)            # δ+(L_i) ∖ L_i
        succ_out[rows, dst[cols]] = True
        rows, cols = np.nonzero(succ_out[:, dst] & ~L[:, src])
        pred_of = np.zeros_like(L)             # δ−(δ+(L_i)) ∖ L_i
        pred_of[rows, src[cols]] = True
        cached_before = np.zeros_like(L)       # U before segment i: ∂(L_1) ∪ ... ∪ ∂(L_{i-1})
        cached_before[1:] = np.logical_or.accumulate(bnd, axis=0)[:-1]

        def nbytes(mask):
            return np.where(mask, M, 0).sum(axis=1)

        profile = nbytes(cached_before) + 2 * nbytes(Vi) + nbytes(succ_out) + nbytes(pred_of)
        self.memory_profile = [int(x) for x in profile]
        self.peak_memory = max(self.memory_profile)
        self.overhead = int(np.where(Vi & ~bnd, T, 0).sum())
        self._segment_masks, self._cached_masks = list(Vi), list(bnd)
        self._recomputed_mask = ~(cached_before[-1] | bnd[-1])

    @cached_property
    def lower_sets(self):
        return [self.graph.nodes_of(m) for m in self._masks]

    @cached_property
    def segments(self):
        return [self.graph.nodes_of(m) for m in self._segment_masks]

    @cached_property
    def cached(self):
        return [self.graph.nodes_of(m) for m in self._cached_masks]

    @cached_property
    def recomputed(self):
        return self.graph.nodes_of(self._recomputed_mask)

    @cached_property
    def schedule(self):
        """The :class:`~lowerset.Schedule` of a training step under this strategy (computed
        once): its peak in bytes and the overhead the executor really pays,
        ``schedule.recompute_cost``."""
        from .scheduling import schedule

        return schedule(self)

    def masks(self):
        """Return the bool masks (shape (n,), node ids of ``graph.labels``) of L_1, ..., L_k."""
        return [m.copy() for m in self._masks]

    def __len__(self):
        return len(self.lower_sets)

    def __repr__(self):
        return (f"CanonicalStrategy(k={len(self)}, overhead={self.overhead}, "
                f"peak_memory={self.peak_memory}, method={self.method!r}, mode={self.mode!r})")

    # -- JSON ------------------------------------------------------------------------------------

    def to_dict(self):
        """Return a JSON-serialisable dict (format "lowerset.strategy", version 1).

        It holds the graph (nodes, edges, costs, memory) and the lower sets, so a file can be
        loaded without the graph and checked against one.

        Raises
        ------
        StrategyError
            If a node label is not a str or an int (JSON cannot keep other label types).
        """
        g = self.graph
        for v in g.labels:
            if not isinstance(v, (str, int)) or isinstance(v, bool):
                raise StrategyError(f"node label {v!r} is not a str or int; cannot write JSON")
        return {
            "format": _FORMAT,
            "version": _VERSION,
            "graph": _graph_to_dict(g, attrs=False),
            "lower_sets": [sorted(L, key=g.index.__getitem__) for L in self.lower_sets],
            "method": self.method,
            "mode": self.mode,
            "budget": self.budget,
            "overhead": self.overhead,
            "peak_memory": self.peak_memory,
        }

    @classmethod
    def from_dict(cls, data, graph=None):
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
        if graph is not None:
            check_graph(graph, "graph")
        if not isinstance(data, dict) or data.get("format") != _FORMAT:
            raise StrategyError("not a lowerset strategy (missing format 'lowerset.strategy')")
        if data.get("version") != _VERSION:
            raise StrategyError(f"unsupported strategy version {data.get('version')!r}")
        missing = [k for k in ("graph", "lower_sets") if k not in data]
        if missing:
            raise StrategyError(f"malformed strategy: missing entry {missing[0]!r}")
        try:
            stored = _graph_from_dict(data["graph"])
        except (KeyError, TypeError) as e:
            raise StrategyError(f"malformed strategy: invalid entry 'graph': {e}") from None
        raw = data["lower_sets"]
        try:
            if not isinstance(raw, list) or not all(isinstance(L, list) for L in raw):
                raise TypeError("a list of lists of node labels expected")
            lower_sets = [set(L) for L in raw]
        except TypeError as e:
            raise StrategyError(f"malformed strategy: invalid entry 'lower_sets': {e}") from None
        for key in ("method", "mode"):
            if data.get(key) is not None and not isinstance(data[key], str):
                raise StrategyError(f"malformed strategy: {key!r} must be a string or null, got "
                                    f"{data[key]!r}")
        try:
            budget = None if data.get("budget") is None else check_budget(data["budget"])
        except (ArgumentError, ArgumentTypeError) as e:
            raise StrategyError(f"malformed strategy: {e}") from None
        if graph is not None:
            if not graph.matches(stored):
                raise StrategyError("the strategy was planned for a different graph (nodes, "
                                    "edges, costs, memory or execution facts differ)")
        else:
            graph = stored
        return cls(graph, lower_sets, method=data.get("method"),
                   mode=data.get("mode"), budget=budget)
