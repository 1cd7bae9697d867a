"""Lower sets, boundaries, and the two families the DPs search (paper, Sec. 2, 4.2 and 4.3).

A set L ⊆ V is a lower set when no edge enters it from V∖L; L_G is the family of all lower sets.
The boundary of L is ∂(L) = δ−(V∖L) ∩ L: the members of L with a successor outside L. The pruned
family of Sec. 4.3 is {L_v : v ∈ V} with L_v = {w : v is reachable from w}.
"""

from collections import namedtuple

import numpy as np

from . import _kernels
from .exceptions import NotALowerSetError, SearchLimitError

__all__ = [
    "is_lower_set",
    "check_lower_set",
    "boundary",
    "lower_sets",
    "pruned_lower_sets",
    "count_lower_sets",
    "DEFAULT_MAX_LOWER_SETS",
]

# 250k sets mean ~3e10 subset tests in the exact DP (about a minute on one core); larger families
# raise SearchLimitError at once instead of running for hours. Raise it knowingly.
DEFAULT_MAX_LOWER_SETS = 250_000

#: A family of lower sets prepared for the DP kernels, sorted by size (so by inclusion), with the
#: empty set first and V last. Arrays as returned by :func:`lowerset._kernels.set_stats`;
#: ``class_start[i]`` is the index of the first set of the same size as set ``i``.
Family = namedtuple(
    "Family",
    "sets size class_start tot_t tot_m bnd_bits bnd_t bnd_m bptr bidx extra",
)


def bits_of_mask(mask):
    """Pack a bool mask, shape (n,), into a uint64 bitset, shape (ceil(n / 64),)."""
    mask = np.asarray(mask, dtype=bool)
    n_words = (mask.shape[0] + 63) // 64
    padded = np.zeros(n_words * 64, dtype=bool)
    padded[: mask.shape[0]] = mask
    return np.packbits(padded.reshape(-1, 8)[:, ::-1]).view("<u8").astype(np.uint64)


def mask_of_bits(bits, n):
    """Unpack a uint64 bitset, shape (W,), into a bool mask, shape (n,)."""
    raw = np.ascontiguousarray(bits, dtype="<u8").view(np.uint8)
    return np.unpackbits(raw.reshape(-1, 1), axis=1)[:, ::-1].reshape(-1)[:n].astype(bool)


def is_lower_set(G, nodes):
    """Return True when `nodes` is a lower set of `G` (no edge from V∖L into L; Sec. 2).

    Parameters
    ----------
    G : Graph
    nodes : iterable of node labels, or ndarray of bool with shape (n,)

    Returns
    -------
    bool

    Raises
    ------
    GraphError
        If a label is not a node of `G`.

    Examples
    --------
    >>> g = ls.Graph.chain(3)
    >>> ls.is_lower_set(g, {0, 1}), ls.is_lower_set(g, {1})
    (True, False)
    """
    bits = bits_of_mask(G.mask(nodes))
    return _kernels.is_lower_set_bits(bits, G.n, G.pred_ptr, G.pred_idx) < 0


def check_lower_set(G, nodes):
    """Return the bool mask (shape (n,)) of `nodes`, or raise if it is not a lower set.

    Raises
    ------
    NotALowerSetError
        If an edge enters the set from outside; the message names one such edge.
    GraphError
        If a label is not a node of `G`.
    """
    mask = G.mask(nodes)
    v = _kernels.is_lower_set_bits(bits_of_mask(mask), G.n, G.pred_ptr, G.pred_idx)
    if v >= 0:
        u = next(p for p in G.preds(v) if not mask[p])
        raise NotALowerSetError(
            f"not a lower set: edge ({G.labels[u]!r}, {G.labels[v]!r}) enters it from outside"
        )
    return mask


def boundary(G, L):
    """Return the boundary ∂(L) = δ−(V∖L) ∩ L of a lower set (Sec. 2).

    Parameters
    ----------
    G : Graph
    L : iterable of node labels, or ndarray of bool with shape (n,)
        A lower set of `G`.

    Returns
    -------
    frozenset
        Labels of the members of `L` that have a successor outside `L`.

    Raises
    ------
    NotALowerSetError
        If `L` is not a lower set.

    References
    ----------
    .. [1] Kusumoto et al., NeurIPS 2019, Sec. 2 (boundary), Sec. 3 (canonical strategy).

    Examples
    --------
    >>> g = ls.Graph.chain(3)
    >>> sorted(ls.boundary(g, {0, 1}))
    [1]
    """
    mask = check_lower_set(G, L)
    out = set()
    for v in np.flatnonzero(mask):
        if any(not mask[w] for w in G.succs(v)):
            out.add(G.labels[v])
    return frozenset(out)


def _enumerate_bits(G, max_lower_sets):
    sets, status = _kernels.enumerate_lower_sets(G.n, G.n_words, G.pred_ptr, G.pred_idx,
                                                 int(max_lower_sets))
    if status == _kernels.STATUS_TOO_MANY:
        raise SearchLimitError(
            f"the graph has more than {max_lower_sets} lower sets; use method='approx' or raise "
            "max_lower_sets", limit="max_lower_sets")
    return sets


def _pruned_bits(G):
    return _kernels.ancestor_sets(G.n, G.n_words, G.pred_ptr, G.pred_idx)


def _to_frozensets(G, sets):
    return [G.nodes_of(mask_of_bits(row, G.n)) for row in sets]


def lower_sets(G, max_lower_sets=DEFAULT_MAX_LOWER_SETS):
    """Return every lower set of `G` (the family L_G of Sec. 2), the empty set and V included.

    Parameters
    ----------
    G : Graph
    max_lower_sets : int
        Give up above this many sets.

    Returns
    -------
    list of frozenset
        Each lower set once, in no particular order; ``#V + 1 <= len <= 2**#V``.

    Raises
    ------
    SearchLimitError
        If `G` has more than `max_lower_sets` lower sets.

    Examples
    --------
    >>> g = ls.Graph(["a", "b", "c"], [("a", "c"), ("b", "c")], cost=dict(a=1, b=1, c=1),
    ...              memory=dict(a=1, b=1, c=1))
    >>> sorted(sorted(L) for L in ls.lower_sets(g))
    [[], ['a'], ['a', 'b'], ['a', 'b', 'c'], ['b']]
    """
    return _to_frozensets(G, _enumerate_bits(G, max_lower_sets))


def count_lower_sets(G, max_lower_sets=DEFAULT_MAX_LOWER_SETS):
    """Return #L_G, the number of lower sets of `G` (empty set and V included).

    Raises
    ------
    SearchLimitError
        If `G` has more than `max_lower_sets` lower sets.
    """
    return int(_enumerate_bits(G, max_lower_sets).shape[0])


def pruned_lower_sets(G):
    """Return the pruned family {L_v : v ∈ V} of Sec. 4.3, L_v = {w : v is reachable from w}.

    Returns
    -------
    dict
        ``{v: frozenset(L_v)}`` for every node label v; #V sets, all distinct.

    References
    ----------
    .. [1] Kusumoto et al., NeurIPS 2019, Sec. 4.3.

    Examples
    --------
    >>> sorted(ls.pruned_lower_sets(ls.Graph.chain(3))[1])
    [0, 1]
    """
    anc = _pruned_bits(G)
    return {G.labels[v]: G.nodes_of(mask_of_bits(anc[v], G.n)) for v in range(G.n)}


def family(G, method, max_lower_sets=DEFAULT_MAX_LOWER_SETS):
    """Build the sorted family of lower sets a DP searches, with its per-set statistics.

    Parameters
    ----------
    G : Graph
    method : {"exact", "approx"}
        "exact": all of L_G (Sec. 4.2); "approx": ∅, the pruned sets L_v and V (Sec. 4.3). V is
        added because with several sinks no L_v equals V.
    max_lower_sets : int

    Returns
    -------
    Family

    Raises
    ------
    SearchLimitError
        For "exact", if `G` has more than `max_lower_sets` lower sets.
    """
    if method == "exact":
        sets = _enumerate_bits(G, max_lower_sets)
    else:
        anc = _pruned_bits(G)
        full = bits_of_mask(np.ones(G.n, dtype=bool))[None, :]
        empty = np.zeros((1, G.n_words), dtype=np.uint64)
        sets = np.unique(np.concatenate([empty, anc, full]), axis=0)
    size = np.unpackbits(sets.view(np.uint8), axis=1).sum(axis=1)
    order = np.argsort(size, kind="stable")
    sets = np.ascontiguousarray(sets[order])
    stats = _kernels.set_stats(sets, G.n, G.cost, G.memory, G.pred_ptr, G.pred_idx, G.succ_ptr,
                               G.succ_idx)
    size = stats[0]
    # first index of each size class (sizes are sorted)
    first = np.searchsorted(size, size, side="left").astype(np.int64)
    return Family(sets, size, first, *stats[1:])
