"""Articulation cuts: the lower sets Chen et al.'s checkpointing can split a DAG at."""

from __future__ import annotations

from .. import _kernels
from .._typing import BoolArray
from .._validate import requires_graph
from ..graph import Graph
from ..lowersets import mask_of_bits

__all__ = ["articulation_cuts"]


@requires_graph
def articulation_cuts(G: Graph) -> list[tuple[int, BoolArray]]:
    """Return the lower sets L_v whose boundary is the single node v, as a nested chain.

    L_v = {w : v is reachable from w} (Sec. 4.3). When ∂(L_v) = {v}, every edge leaving L_v
    starts at v: v is an articulation point of the graph in Chen et al.'s sense, and caching v
    alone suffices to recompute everything after it. V itself is excluded. Sets that are not
    nested in the chain so far (possible with several sinks) are skipped.

    Parameters
    ----------
    G : Graph

    Returns
    -------
    list of (int, ndarray of bool with shape (n,))
        ``(v, mask of L_v)`` by increasing size; each mask strictly contains the previous one.

    Raises
    ------
    ArgumentTypeError
        If `G` is not a Graph.

    References
    ----------
    .. [1] Chen et al., "Training deep nets with sublinear memory cost", 2016 (Sec. 4).
    .. [2] Kusumoto et al., NeurIPS 2019, Sec. 2 ("Chen's recomputation algorithm").
    """
    anc, chain, _ = _chain(G)
    return [(v, mask_of_bits(anc[v], G.n)) for v in chain]


def _chain(G):
    """(ancestor bitsets of every node, the node ids v of :func:`articulation_cuts` in order,
    M(L_v) of each in bytes), without a mask per node."""
    anc = _kernels.ancestor_sets(G.n, G.n_words, G.pred_ptr, G.pred_idx)
    size, _, tot_m, *_, bptr, bidx, _ = _kernels.set_stats(anc, G.n, G.cost, G.memory,
                                                          G.pred_ptr, G.pred_idx, G.succ_ptr,
                                                          G.succ_idx)
    cuts = [v for v in range(G.n)
            if size[v] < G.n and bptr[v + 1] - bptr[v] == 1 and bidx[bptr[v]] == v]
    cuts.sort(key=lambda v: int(size[v]))
    chain: list[int] = []
    for v in cuts:
        # L_u ⊆ L_v exactly when u is an ancestor of v (or v itself)
        u = chain[-1] if chain else None
        if u is None or (int(anc[v, u >> 6]) >> (u & 63)) & 1 and size[v] > size[u]:
            chain.append(v)
    return anc, chain, [int(tot_m[v]) for v in chain]
