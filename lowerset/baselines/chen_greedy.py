"""Chen et al.'s greedy checkpointing with a segment-size knob, on articulation cuts."""

from __future__ import annotations

import time

import numpy as np

from .._typing import Number
from .._validate import check_budget, check_count, requires_graph
from ..graph import Graph
from ..strategy import CanonicalStrategy
from ._cuts import articulation_cuts

__all__ = ["chen_greedy", "chen_greedy_sweep"]


def _greedy_cuts(cuts, sizes, segment_bytes):
    chosen, last = [], 0
    for i, size in enumerate(sizes):
        if size - last > segment_bytes:
            chosen.append(i)
            last = size
    return tuple(chosen)


@requires_graph
def chen_greedy(G: Graph, segment_bytes: Number) -> CanonicalStrategy:
    """Chen's greedy strategy: cut at the first articulation cut after `segment_bytes` of memory.

    Walking the articulation cuts in order, a cut is taken once the activation memory since the
    previous taken cut exceeds `segment_bytes` (Chen et al., Algorithm 3's budget b).

    Parameters
    ----------
    G : Graph
    segment_bytes : int or float
        The knob b, bytes of activations per segment (a float is rounded down).

    Returns
    -------
    CanonicalStrategy
        ``method="chen-greedy"``.

    Raises
    ------
    ArgumentError
        If `segment_bytes` is negative, NaN or infinite.
    ArgumentTypeError
        If `G` is not a Graph, or `segment_bytes` is not a number.

    References
    ----------
    .. [1] Chen et al., "Training deep nets with sublinear memory cost", 2016, Sec. 4.2,
       Algorithm 3.
    """
    segment_bytes = check_budget(segment_bytes, "segment_bytes")
    start = time.perf_counter()
    cuts = articulation_cuts(G)
    sizes = [int(G.memory[m].sum()) for _, m in cuts]
    chosen = [cuts[i][1] for i in _greedy_cuts(cuts, sizes, segment_bytes)]
    return CanonicalStrategy(G, chosen + [np.ones(G.n, dtype=bool)], method="chen-greedy",
                             planner_seconds=time.perf_counter() - start)


@requires_graph
def chen_greedy_sweep(G: Graph, n_knobs: int = 64) -> CanonicalStrategy:
    """Try :func:`chen_greedy` over a grid of knob values; return the least peak (eq. 2).

    The knob runs over `n_knobs` values spaced geometrically from the smallest gap between
    articulation cuts to M(V) (Checkmate sweeps it the same way); knob values giving the same
    cuts are evaluated once. Ties go to the smaller overhead.

    Parameters
    ----------
    G : Graph
    n_knobs : int
        At least 1.

    Returns
    -------
    CanonicalStrategy
        ``method="chen-greedy"``; ``budget`` is None (the knob is not a budget).

    Raises
    ------
    ArgumentError
        If `n_knobs` < 1.
    ArgumentTypeError
        If `G` is not a Graph, or `n_knobs` is not an integer.
    """
    n_knobs = check_count(n_knobs, "n_knobs")
    start = time.perf_counter()
    cuts = articulation_cuts(G)
    sizes = [int(G.memory[m].sum()) for _, m in cuts]
    gaps = [b - a for a, b in zip([0] + sizes, sizes) if b > a]
    lo = max(1, min(gaps)) if gaps else 1
    hi = max(lo + 1, G.total_memory())
    knobs = np.unique(np.geomspace(lo, hi, n_knobs).astype(np.int64))
    best, seen = None, set()
    for knob in [0] + knobs.tolist():
        chosen = _greedy_cuts(cuts, sizes, int(knob))
        if chosen in seen:
            continue
        seen.add(chosen)
        s = CanonicalStrategy(G, [cuts[i][1] for i in chosen] + [np.ones(G.n, dtype=bool)],
                              method="chen-greedy")
        if best is None or (s.peak_memory, s.overhead) < (best.peak_memory, best.overhead):
            best = s
    assert best is not None  # knob 0 always runs
    best.planner_seconds = time.perf_counter() - start
    return best
