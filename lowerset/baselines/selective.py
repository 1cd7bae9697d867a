"""Selective checkpointing as canonical strategies: keep what is expensive to compute.

PyTorch's selective activation checkpointing (SAC) and the partitioner of ``torch.compile``
save the outputs of compute-intensive operations (matrix products, convolutions, attention)
and recompute the cheap ones after them (normalizations, activations, dropout). As a canonical
strategy (paper, Sec. 3) that is a sequence of lower sets, each a prefix of the forward order
ending at an expensive node: the expensive node ends its segment and is read by the next one,
so it stays on the boundary, while the cheap nodes inside a segment that no later segment reads
are dropped and recomputed from the boundary before them.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from .._validate import check_count, requires_graph
from ..exceptions import ArgumentError
from ..graph import Graph
from ..strategy import CanonicalStrategy

__all__ = ["selective_cuts", "selective_family"]


@requires_graph
def selective_cuts(G: Graph, min_cost: int, every: int = 1) -> CanonicalStrategy:
    """The canonical strategy whose lower sets end at every `every`-th node (in forward order)
    of cost T_v >= `min_cost`.

    Parameters
    ----------
    G : Graph
        The forward order is ``G.facts.forward_order`` (a topological order, so each of its
        prefixes is a lower set).
    min_cost : int
        Cost units: the nodes at least this expensive end a segment.
    every : int
        Keep one such cut in `every` (1: all of them), for coarser segments.

    Returns
    -------
    CanonicalStrategy
        ``method="selective"``; [V] when no node is that expensive.

    Raises
    ------
    ArgumentError
        If `min_cost` is not a positive number or `every` < 1.
    ArgumentTypeError
        If `G` is not a Graph.

    References
    ----------
    .. [1] Kusumoto et al., NeurIPS 2019, Sec. 3 (canonical strategies).

    Examples
    --------
    >>> cost = dict(enumerate([1, 9, 1, 9, 1, 1]))
    >>> g = ls.Graph(range(6), [(v, v + 1) for v in range(5)], cost, dict.fromkeys(range(6), 4))
    >>> [sorted(L) for L in ls.baselines.selective_cuts(g, 5).lower_sets]
    [[0, 1], [0, 1, 2, 3], [0, 1, 2, 3, 4, 5]]
    """
    if not (isinstance(min_cost, (int, float, np.integer)) and min_cost > 0):
        raise ArgumentError(f"min_cost must be a positive number of cost units, got {min_cost!r}")
    every = check_count(every, "every")
    order = np.asarray(G.facts.forward_order, dtype=np.int64)
    ends = np.flatnonzero(G.cost[order[:-1]] >= min_cost)[every - 1::every]
    # the node at forward position j is in the segment after every cut position before it
    seg = np.empty(G.n, dtype=np.int64)
    seg[order] = np.searchsorted(ends, np.arange(G.n), side="left")
    return CanonicalStrategy.from_segments(G, seg, method="selective")


def selective_family(G: Graph, thresholds: int = 8,
                     strides: Iterable[int] = (1, 2, 4, 8)) -> list[CanonicalStrategy]:
    """:func:`selective_cuts` at `thresholds` cost levels (quantiles of the distinct costs from
    the largest down) and each stride of `strides`: distinct strategies, from fine (every
    costly node ends a segment) to coarse. The planner adds them to its pool.

    Parameters
    ----------
    G : Graph
        The graph planned.
    thresholds : int, default 8
        Number of cost levels.
    strides : iterable of int, default (1, 2, 4, 8)
        The strides passed to :func:`selective_cuts`.

    Returns
    -------
    list of CanonicalStrategy
    """
    levels = np.unique(np.asarray(G.cost, dtype=np.int64))[::-1]
    if levels.size > thresholds:
        levels = levels[np.linspace(0, levels.size - 1, thresholds).round().astype(int)]
    out, seen = [], set()
    for c in levels.tolist():
        for every in strides:
            s = selective_cuts(G, int(c), every)
            key = s.segment_of_nodes().tobytes()
            if key not in seen:
                seen.add(key)
                out.append(s)
    return out
