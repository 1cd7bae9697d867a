"""Chen et al.'s sqrt(n) checkpointing, generalised to DAGs through articulation cuts."""

from __future__ import annotations

import math
import time

import numpy as np

from .._validate import check_count, requires_graph
from ..graph import Graph
from ..lowersets import mask_of_bits
from ..strategy import CanonicalStrategy
from ._cuts import _chain

__all__ = ["chen_sqrtn"]


@requires_graph
def chen_sqrtn(G: Graph, n_segments: int | None = None) -> CanonicalStrategy:
    """Chen's sqrt(n) strategy: about sqrt(#cuts) articulation cuts spaced evenly by memory.

    The candidate cut points are the articulation cuts of :func:`articulation_cuts` (lower sets
    whose boundary is a single node). With c candidates it keeps k = round(sqrt(c)) of them
    (or ``n_segments - 1``), choosing for j = 1..k the candidate whose cumulative activation
    memory M(L) is closest to j / (k + 1) of M(V); the canonical strategy of the chosen chain
    followed by V is returned. A graph without articulation cuts gets the one-segment strategy
    [V].

    Parameters
    ----------
    G : Graph
    n_segments : int, optional
        Number of segments to aim for; default sqrt of the number of candidates, plus one.

    Returns
    -------
    CanonicalStrategy
        ``method="chen-sqrtn"``; its overhead and peak come from eq. (1) and (2).

    Raises
    ------
    ArgumentError
        If `n_segments` is given and is < 1.
    ArgumentTypeError
        If `G` is not a Graph, or `n_segments` is given and is not an integer.

    References
    ----------
    .. [1] Chen et al., "Training deep nets with sublinear memory cost", 2016, Sec. 4.1.
    .. [2] Kusumoto et al., NeurIPS 2019, Sec. 2 and Table 1 (the "Chen's" column).

    Examples
    --------
    >>> s = ls.baselines.chen_sqrtn(ls.Graph.chain(16))
    >>> len(s), s.method
    (5, 'chen-sqrtn')
    """
    start = time.perf_counter()
    anc, cuts, cum = _chain(G)
    if n_segments is None:
        k = int(round(math.sqrt(len(cuts))))
    else:
        k = min(check_count(n_segments, "n_segments") - 1, len(cuts))
    chosen = []
    if k > 0 and cuts:
        cum = np.array(cum, dtype=np.float64)
        total = float(G.total_memory()) or 1.0
        picked = set()
        for j in range(1, k + 1):
            i = int(np.argmin(np.abs(cum - total * j / (k + 1))))
            picked.add(i)
        chosen = [mask_of_bits(anc[cuts[i]], G.n) for i in sorted(picked)]
    lower_sets = chosen + [np.ones(G.n, dtype=bool)]
    return CanonicalStrategy(G, lower_sets, method="chen-sqrtn",
                             planner_seconds=time.perf_counter() - start)
