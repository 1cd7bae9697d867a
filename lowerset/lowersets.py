"""Lower sets, boundaries, and the families the DPs search (paper, Sec. 2, 4.2 and 4.3).

A set L ⊆ V is a lower set when no edge enters it from V∖L; L_G is the family of all lower sets.
The boundary of L is ∂(L) = δ−(V∖L) ∩ L: the members of L with a successor outside L. The pruned
family of Sec. 4.3 is {L_v : v ∈ V} with L_v = {w : v is reachable from w}. The ordered family
adds the prefixes of two topological orders (:func:`ordered_lower_sets`). The contracted family
(:func:`contracted_lower_sets`) holds the lower sets that keep each node owning no memory with
its one input, and the isolated nodes together, and the pruned ones.
"""

from __future__ import annotations

from collections import namedtuple
from collections.abc import Hashable

import numpy as np
import numpy.typing as npt

from . import _kernels, _limits
from ._typing import BoolArray, IntArray, NodeSet
from ._validate import check_count, requires_graph
from .exceptions import LowersetError, NotALowerSetError, SearchLimitError
from .graph import Graph

__all__ = [
    "is_lower_set",
    "check_lower_set",
    "boundary",
    "lower_sets",
    "pruned_lower_sets",
    "ordered_lower_sets",
    "contracted_lower_sets",
    "count_lower_sets",
    "DEFAULT_MAX_LOWER_SETS",
]

#: Default of ``max_lower_sets``. One exact DP pass tests about #L_G**2 / 2 pairs of lower sets:
#: at 50,000 sets that is 1.25e9 pairs, 5-10 s on one core for a fan (the 15-way fan's 32,769
#: sets take about 3 s a pass, GoogLeNet's 27,358 about the same), while the 131,073 sets of a
#: 17-way fan would take about a minute a pass. Larger families raise SearchLimitError before
#: anything is stored (a 17-way fan at once, from an antichain of 17 nodes). The DP's time also
#: grows with its Pareto fronts, which the count does not show (two parallel chains of 100
#: nodes, 10,201 sets, take about 6 s a pass): pass ``time_limit`` for a bound on time.
DEFAULT_MAX_LOWER_SETS = 50_000

#: A family of lower sets prepared for the DP kernels, sorted by size (so by inclusion), with the
#: empty set first and V last. Arrays as returned by :func:`lowerset._kernels.set_stats`;
#: ``class_start[i]`` is the index of the first set of the same size as set ``i``; ``chain``
#: says whether each set is a subset of the next, and then ``bfirst``, ``bcum_t``, ``bcum_m``
#: are those of :func:`lowerset._kernels.chain_boundaries` (else empty int64 arrays).
#: ``a_lo``, ``pre``, ``marks`` restrict the DP's transitions (:func:`windowed`): set ``b``
#: is reached from the sets ``a_lo[b] <= a < class_start[b]`` and from the first ``pre[b]``
#: landmark indices ``marks``; :func:`family` leaves every transition in (zeros, no marks).
#: ``span`` holds each set's first word that is not all ones and last nonzero word
#: (:func:`lowerset._kernels.word_spans`), which bound the DP's subset tests.
Family = namedtuple(
    "Family",
    "sets size class_start tot_t tot_m bnd_bits bnd_t bnd_m bptr bidx extra chain bfirst bcum_t "
    "bcum_m a_lo pre marks span",
)


def bits_of_mask(mask: npt.ArrayLike) -> npt.NDArray[np.uint64]:
    """Pack a bool mask into a uint64 bitset, shape (ceil(n / 64),).

    Parameters
    ----------
    mask : array_like of bool, shape (n,)
        One entry per node id.
    """
    mask = np.asarray(mask, dtype=bool)
    n_words = (mask.shape[0] + 63) // 64
    padded = np.zeros(n_words * 64, dtype=bool)
    padded[: mask.shape[0]] = mask
    return np.packbits(padded.reshape(-1, 8)[:, ::-1]).view("<u8").astype(np.uint64)


def mask_of_bits(bits: npt.ArrayLike, n: int) -> BoolArray:
    """Unpack a uint64 bitset into a bool mask, shape (n,); or bitsets into masks, shape (k, n).

    Parameters
    ----------
    bits : array_like of uint64, shape (W,) or (k, W)
        One bitset, or k of them.
    n : int
        Number of nodes.
    """
    bits = np.ascontiguousarray(bits, dtype="<u8")
    raw = bits.view(np.uint8).reshape(bits.shape[:-1] + (-1, 1))
    bools = np.unpackbits(raw, axis=-1)[..., ::-1]
    return bools.reshape(bits.shape[:-1] + (-1,))[..., :n].astype(bool)


@requires_graph
def is_lower_set(G: Graph, nodes: NodeSet) -> bool:
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


@requires_graph
def check_lower_set(G: Graph, nodes: NodeSet) -> BoolArray:
    """Return the bool mask (shape (n,)) of `nodes`, or raise if it is not a lower set.

    Parameters
    ----------
    G : Graph
        The graph.
    nodes : iterable of hashable
        Node labels of `G`.

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


@requires_graph
def boundary(G: Graph, L: NodeSet) -> frozenset[Hashable]:
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


def _fix_for_too_many(at_least):
    return (f"one pass of the exact DP tests about #L**2 / 2 pairs of lower sets, here at least "
            f"{at_least ** 2 / 2:.2g}; use method='approx', or pass a larger max_lower_sets "
            "together with a time_limit")


def _antichain_width(G):
    """The size of an antichain of `G` found in O(#V + #E): the widest level of the longest-path
    layering (a path visits each level once), or the sinks, whichever is larger."""
    level = np.zeros(G.n, dtype=np.int64)
    for v in range(G.n):
        p = G.pred_idx[G.pred_ptr[v]:G.pred_ptr[v + 1]]
        if p.shape[0]:
            level[v] = level[p].max() + 1
    sinks = int(np.count_nonzero(np.diff(G.succ_ptr) == 0))
    return max(int(np.bincount(level).max()), sinks)


def _count(G, max_lower_sets, deadline):
    """Return (#L_G, hist) with ``hist[k]`` the number of lower sets of k nodes.

    Raises SearchLimitError, before allocating anything of the family's size, when #L_G >
    `max_lower_sets` (at once when an antichain of more than log2(max_lower_sets) nodes proves
    it) or when the deadline passes.
    """
    cache = G.__dict__.setdefault("_family_cache", {})
    if "count" in cache:
        count, hist = cache["count"]
        if count > max_lower_sets:
            raise SearchLimitError(
                f"the graph has {count} lower sets, more than max_lower_sets={max_lower_sets}; "
                + _fix_for_too_many(count), limit="max_lower_sets")
        return count, hist
    width = _antichain_width(G)
    if (1 << width) > max_lower_sets:
        raise SearchLimitError(
            f"the graph has at least 2**{width} lower sets ({width} nodes form an antichain, and "
            f"every subset of it tops a different lower set), more than "
            f"max_lower_sets={max_lower_sets}; " + _fix_for_too_many(2 ** width),
            limit="max_lower_sets")
    cur = np.zeros(G.n_words, dtype=np.uint64)
    choice = np.zeros(G.n + 1, dtype=np.int8)
    state = np.zeros(2, dtype=np.int64)
    hist = np.zeros(G.n + 1, dtype=np.int64)
    count = 0
    chunk = _limits.Chunker(initial=4096)
    while True:
        # one more than the limit proves that the family is too large
        budget = min(chunk.start(), max_lower_sets + 1 - count)
        found = _kernels.count_lower_sets_chunk(G.n, G.pred_ptr, G.pred_idx, cur, choice, state,
                                                hist, budget)
        chunk.done(found)
        count += found
        if count > max_lower_sets:
            raise SearchLimitError(
                f"the graph has more than max_lower_sets={max_lower_sets} lower sets; "
                + _fix_for_too_many(count), limit="max_lower_sets")
        if found < budget:
            break
        deadline.check(lambda: f"while counting the lower sets ({count} so far)")
    cache["count"] = (count, hist)
    return count, hist


def _enumerate_bits(G, max_lower_sets, deadline=_limits.NO_DEADLINE):
    """All lower sets as rows of a (#L_G, W) uint64 array, sorted by size (so by inclusion).

    Counts them first (:func:`_count`), then stores them in chunks into an array of exactly that
    many rows.
    """
    count, hist = _count(G, max_lower_sets, deadline)
    pos = np.zeros(G.n + 1, dtype=np.int64)
    pos[1:] = np.cumsum(hist)[:-1]
    sets = np.zeros((count, G.n_words), dtype=np.uint64)
    cur = np.zeros(G.n_words, dtype=np.uint64)
    choice = np.zeros(G.n + 1, dtype=np.int8)
    state = np.zeros(2, dtype=np.int64)
    stored = 0
    chunk = _limits.Chunker(initial=4096)
    while True:
        budget = chunk.start()
        found = _kernels.enumerate_lower_sets_chunk(G.n, G.pred_ptr, G.pred_idx, cur, choice,
                                                    state, sets, pos, budget)
        chunk.done(found)
        stored += found
        if found < budget:
            break
        deadline.check(lambda: f"while enumerating the lower sets ({stored} of {count} stored)")
    if stored != count:  # pragma: no cover - the count and the enumeration are the same search
        raise LowersetError(f"internal error: counted {count} lower sets, enumerated {stored}")
    return sets


def _family_bytes(n_sets, G):
    """Bytes the DP needs per family: the sets and boundaries (2 W words each), nine int64 per-set
    arrays, and the DP's initial fronts (four int64 entries of capacity 4 per set, plus two
    int64 ranges)."""
    return n_sets * (16 * G.n_words + 9 * 8 + 4 * 4 * 8 + 2 * 8)


def _pruned_bits(G):
    return _kernels.ancestor_sets(G.n, G.n_words, G.pred_ptr, G.pred_idx)


def _to_frozensets(G, sets):
    return [G.nodes_of(mask_of_bits(row, G.n)) for row in sets]


@requires_graph
def lower_sets(G: Graph,
               max_lower_sets: int = DEFAULT_MAX_LOWER_SETS) -> list[frozenset[Hashable]]:
    """Return every lower set of `G` (the family L_G of Sec. 2), the empty set and V included.

    Parameters
    ----------
    G : Graph
    max_lower_sets : int
        Give up above this many sets (>= 1).

    Returns
    -------
    list of frozenset
        Each lower set once, by increasing size; ``#V + 1 <= len <= 2**#V``.

    Raises
    ------
    SearchLimitError
        If `G` has more than `max_lower_sets` lower sets (``limit="max_lower_sets"``, raised
        before the sets are stored), or the frozensets would not fit in memory
        (``limit="memory"``).
    ArgumentError, ArgumentTypeError
        If `G` is not a Graph or `max_lower_sets` is not a positive integer.

    Examples
    --------
    >>> g = ls.Graph(["a", "b", "c"], [("a", "c"), ("b", "c")], cost=dict(a=1, b=1, c=1),
    ...              memory=dict(a=1, b=1, c=1))
    >>> sorted(sorted(L) for L in ls.lower_sets(g))
    [[], ['a'], ['a', 'b'], ['a', 'b', 'c'], ['b']]
    """
    max_lower_sets = check_count(max_lower_sets, "max_lower_sets")
    count, _ = _count(G, max_lower_sets, _limits.NO_DEADLINE)
    # a frozenset of k labels takes about 200 + 40 k bytes; k <= n
    _limits.check_memory(count * (8 * G.n_words + 200 + 40 * G.n),
                         f"{count} lower sets as frozensets",
                         "count them with count_lower_sets, or plan with method='approx'")
    return _to_frozensets(G, _enumerate_bits(G, max_lower_sets))


@requires_graph
def count_lower_sets(G: Graph, max_lower_sets: int = DEFAULT_MAX_LOWER_SETS) -> int:
    """Return #L_G, the number of lower sets of `G` (empty set and V included).

    The sets are counted by the same depth-first search that enumerates them, without storing
    them.

    Parameters
    ----------
    G : Graph
    max_lower_sets : int
        Give up above this many sets (>= 1).

    Returns
    -------
    int

    Raises
    ------
    SearchLimitError
        If `G` has more than `max_lower_sets` lower sets.
    ArgumentError, ArgumentTypeError
        If `G` is not a Graph or `max_lower_sets` is not a positive integer.

    Examples
    --------
    >>> ls.count_lower_sets(ls.Graph(range(3), [], dict.fromkeys(range(3), 1),
    ...                              dict.fromkeys(range(3), 1)))
    8
    """
    max_lower_sets = check_count(max_lower_sets, "max_lower_sets")
    return _count(G, max_lower_sets, _limits.NO_DEADLINE)[0]


@requires_graph
def pruned_lower_sets(G: Graph) -> dict[Hashable, frozenset[Hashable]]:
    """Return the pruned family {L_v : v ∈ V} of Sec. 4.3, L_v = {w : v is reachable from w}.

    Parameters
    ----------
    G : Graph
        The graph.

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


def _generations(G):
    """Each node's generation: 0 for a source, else one more than its predecessors' largest
    (the length of the longest path that ends at it)."""
    gen = np.zeros(G.n, dtype=np.int64)
    ptr, idx = G.pred_ptr, G.pred_idx
    for v in range(G.n):   # ids are a topological order
        if ptr[v + 1] > ptr[v]:
            gen[v] = gen[idx[ptr[v]:ptr[v + 1]]].max() + 1
    return gen


def _orders(G):
    """The two topological orders whose prefixes the ordered family adds: the graph's own (a
    traced graph's is its execution order, branch after branch) and by generations (the
    branches side by side), ties in the graph's order."""
    return np.arange(G.n), np.argsort(_generations(G), kind="stable")


def _prefix_bits(G, order):
    """(n + 1, n_words) uint64: row i holds the first i nodes of `order`."""
    onehot = np.zeros((G.n + 1, G.n_words), dtype=np.uint64)
    order = np.asarray(order, dtype=np.int64)
    onehot[np.arange(1, G.n + 1), order // 64] = np.left_shift(np.uint64(1),
                                                              (order % 64).astype(np.uint64))
    return np.bitwise_or.accumulate(onehot, axis=0)


def _ordered_bits(G):
    """The ordered family's sets, some repeated, in no particular order (see
    :func:`ordered_lower_sets`)."""
    return np.concatenate([_pruned_bits(G)] + [_prefix_bits(G, o) for o in _orders(G)])


@requires_graph
def ordered_lower_sets(G: Graph) -> list[frozenset[Hashable]]:
    """Return the ordered family: the pruned sets L_v (Sec. 4.3), and every prefix of two
    topological orders, the graph's own and by generations (longest path from a source).

    Both orders' prefixes are lower sets. In a block of parallel branches the pruned family
    holds no set with two branches begun, so a sequence of its sets takes the whole block as
    one segment; the prefixes of the graph's order finish the branches one after another, and
    those of the generations order advance them side by side. On graphs with wide blocks
    (Inception-like stacks, GoogLeNet, PSPNet) the time-centric DP over this family comes
    within a few percent of the exact DP's optimum (eq. 1) with #V to 3 #V + 2 sets instead of
    tens of thousands; on a chain it is the pruned family. The family extends Sec. 4.3 (the
    paper searches the pruned family alone); ``dp.solve(..., method="ordered")`` runs the
    paper's DP over it.

    Parameters
    ----------
    G : Graph
        The graph.

    Returns
    -------
    list of frozenset
        Each set once, by increasing size; ∅ and V included; at most 3 #V + 2 sets.

    Examples
    --------
    Two branches a -> b and c -> d, listed branch after branch: the graph's order adds
    {a, b, c}, the generations order {a, c}.

    >>> g = ls.Graph(["a", "b", "c", "d"], [("a", "b"), ("c", "d")],
    ...              cost=dict.fromkeys("abcd", 1), memory=dict.fromkeys("abcd", 1))
    >>> [sorted(L) for L in ls.ordered_lower_sets(g)]
    [[], ['a'], ['c'], ['a', 'b'], ['a', 'c'], ['c', 'd'], ['a', 'b', 'c'], ['a', 'b', 'c', 'd']]
    """
    return _to_frozensets(G, _unique_by_size(_ordered_bits(G)))


def contraction(G: Graph) -> tuple[IntArray, Graph]:
    """Group the nodes that own no memory with the node they read, and the isolated nodes
    with each other: ``(group, quotient)``.

    A node with M_v = 0 (a view, the output of an in-place write: what a traced step holds of
    it is its input's buffer) and exactly one predecessor joins the group of that
    predecessor, so a chain of views joins the node that owns the buffer. Splitting a group
    between two segments moves no byte (its memory is its first node's) and changes no
    recomputation that the schedule would not charge to the first node, but every way of
    splitting it multiplies the lower sets: on traced transformer stacks the groups divide
    them by 7 to 13 (GPT-like: 1,450 a layer to 116).

    The nodes with neither a predecessor nor a successor in G form one group. Such a node
    reads only externals and no node reads it (a BatchNorm's step counter in a compiled graph,
    ``num_batches_tracked + 1``): it lies on no boundary and is never dropped, and moving every
    one of them into the last segment (removing a segment left empty) keeps the dropped nodes,
    hence the schedule, of any plan, while k of them multiply the lower sets by up to 2**k
    (ResNet-50's compiled graph: 53, an antichain of 54, which sent "auto" to the pruned
    family).

    Parameters
    ----------
    G : Graph
        The graph.

    Returns
    -------
    group : ndarray of int64, shape (n,)
        Per node id, the id of its group's first node (its own id where it joins none).
    quotient : Graph
        One node per group, labelled by that first node's id, with an edge between two groups
        where G has one between their members; costs and bytes summed over each group.
    """
    cache = G.__dict__.setdefault("_family_cache", {})
    if "contraction" not in cache:
        group = np.arange(G.n, dtype=np.int64)
        for v in range(G.n):   # ids are a topological order: a predecessor's group is final
            preds = np.unique(G.pred_idx[G.pred_ptr[v]:G.pred_ptr[v + 1]])
            if G.memory[v] == 0 and preds.shape[0] == 1:
                group[v] = group[preds[0]]
        isolated = np.flatnonzero((np.diff(G.pred_ptr) == 0) & (np.diff(G.succ_ptr) == 0))
        group[isolated] = isolated[:1]
        cache["contraction"] = (group, _quotient(G, group))
    return cache["contraction"]


def _quotient(G, group):
    src = np.repeat(np.arange(G.n, dtype=np.int64), np.diff(G.succ_ptr))
    a, b = group[src], group[np.asarray(G.succ_idx, dtype=np.int64)]
    edges = sorted({(int(x), int(y)) for x, y in zip(a[a != b], b[a != b])})
    roots = np.unique(group)
    cost = np.zeros(G.n, dtype=np.int64)
    memory = np.zeros(G.n, dtype=np.int64)
    np.add.at(cost, group, G.cost)
    np.add.at(memory, group, G.memory)
    return Graph(roots.tolist(), edges, {int(r): int(cost[r]) for r in roots},
                 {int(r): int(memory[r]) for r in roots})


def _contracted_bits(G, max_lower_sets, deadline):
    """The contracted family's sets, some repeated, in no particular order (see
    :func:`contracted_lower_sets`)."""
    group, Q = contraction(G)
    q_sets = _enumerate_bits(Q, max_lower_sets, deadline)
    qid = np.array([Q.index[int(r)] for r in group], dtype=np.int64)   # node -> quotient id
    mapped = _kernels.map_groups(q_sets, qid, G.n_words)
    full = bits_of_mask(np.ones(G.n, dtype=bool))[None, :]
    return np.concatenate([mapped, _pruned_bits(G), full])


def _contracted_count(G, max_lower_sets, deadline):
    """The number of lower sets of the quotient (:func:`contraction`), which bounds the
    contracted family from below and, with #V + 1 more, from above; SearchLimitError above
    `max_lower_sets`."""
    try:
        return _count(contraction(G)[1], max_lower_sets, deadline)[0]
    except SearchLimitError as e:
        if e.limit != "max_lower_sets":
            raise
        raise SearchLimitError("the graph with its memoryless nodes contracted into their "
                               f"inputs (lowerset.lowersets.contraction) {e}",
                               limit="max_lower_sets") from None


@requires_graph
def contracted_lower_sets(
        G: Graph, max_lower_sets: int = DEFAULT_MAX_LOWER_SETS) -> list[frozenset[Hashable]]:
    """Return the contracted family: the lower sets of `G` that keep each group of
    :func:`contraction` whole (a node owning no memory with the node it reads; the isolated
    nodes), and the pruned sets L_v (Sec. 4.3).

    It is all of L_G (Sec. 4.2) where no node of `G` is memoryless and at most one is
    isolated, and the groups cut it where they are (views, in-place writes, isolated nodes).
    ``dp.solve(..., method="contracted")`` runs the paper's exact DP over it; it holds the
    pruned family, so its optimum is at most the approximate DP's.

    Parameters
    ----------
    G : Graph
    max_lower_sets : int
        Give up where the quotient has more lower sets than this (>= 1).

    Returns
    -------
    list of frozenset
        Each set once, by increasing size; ∅ and V included.

    Raises
    ------
    SearchLimitError
        If the quotient has more than `max_lower_sets` lower sets.

    Examples
    --------
    ``b`` is a view of ``a`` (no memory of its own) that ``d`` reads; ``c`` and ``e`` read
    ``a``. A set holds ``a`` without ``b`` only where it is a pruned set (L_a, L_c, L_e):

    >>> g = ls.Graph(list("abcde"), [("a", "b"), ("b", "d"), ("a", "c"), ("a", "e")],
    ...              cost=dict.fromkeys("abcde", 1), memory=dict(a=4, b=0, c=4, d=4, e=4))
    >>> sorted(map(sorted, set(ls.lower_sets(g)) - set(ls.contracted_lower_sets(g))))
    [['a', 'c', 'e']]
    """
    max_lower_sets = check_count(max_lower_sets, "max_lower_sets")
    return _to_frozensets(G, _unique_by_size(_contracted_bits(G, max_lower_sets,
                                                              _limits.NO_DEADLINE)))


def _unique_by_size(sets):
    """The distinct rows of `sets` (rows of bits) by number of members, then as
    ``np.unique(axis=0)`` orders them (:func:`lowerset._kernels.unique_rows_by_size`)."""
    return _kernels.unique_rows_by_size(np.ascontiguousarray(sets))


def family(G: Graph, method: str, max_lower_sets: int = DEFAULT_MAX_LOWER_SETS,
           deadline: _limits.Deadline = _limits.NO_DEADLINE) -> Family:
    """Build the sorted family of lower sets a DP searches, with its per-set statistics.

    Parameters
    ----------
    G : Graph
    method : {"exact", "approx", "ordered", "contracted"}
        "exact": all of L_G (Sec. 4.2); "approx": ∅, the pruned sets L_v and V (Sec. 4.3). V is
        added because with several sinks no L_v equals V. "ordered": the pruned sets and the
        prefixes of two topological orders (:func:`ordered_lower_sets`). "contracted": the
        lower sets that keep each memoryless node with its input, and the pruned sets
        (:func:`contracted_lower_sets`).
    max_lower_sets : int
    deadline : lowerset._limits.Deadline
        Checked between the chunks of every phase.

    Returns
    -------
    Family

    Raises
    ------
    SearchLimitError
        For "exact" ("contracted"), if `G` (its quotient) has more than `max_lower_sets` lower
        sets; if the family and the
        DP's first fronts would not fit in memory (``limit="memory"``); if the deadline passes.
    """
    if method == "exact":
        count, _ = _count(G, max_lower_sets, deadline)
        _limits.check_memory(_family_bytes(count, G), f"the exact DP over {count} lower sets",
                             "use method='approx', or a smaller max_lower_sets")
        sets = _enumerate_bits(G, max_lower_sets, deadline)
    elif method == "contracted":
        count = _contracted_count(G, max_lower_sets, deadline) + G.n + 1
        _limits.check_memory(_family_bytes(count, G),
                             f"the contracted DP over {count} lower sets",
                             "use method='approx', or a smaller max_lower_sets")
        sets = _unique_by_size(_contracted_bits(G, max_lower_sets, deadline))
    elif method == "ordered":
        _limits.check_memory(_family_bytes(3 * G.n + 2, G), f"the ordered DP over {G.n} nodes",
                             "plan a smaller graph")
        sets = _unique_by_size(_ordered_bits(G))   # both orders' prefixes hold ∅ and V
    else:
        _limits.check_memory(_family_bytes(G.n + 2, G), f"the approximate DP over {G.n} nodes",
                             "plan a smaller graph")
        anc = _pruned_bits(G)
        full = bits_of_mask(np.ones(G.n, dtype=bool))[None, :]
        empty = np.zeros((1, G.n_words), dtype=np.uint64)
        sets = _unique_by_size(np.concatenate([empty, anc, full]))
    stats = _set_stats(G, sets, deadline)
    size = stats[0]
    # first index of each size class (sizes are sorted)
    first = np.searchsorted(size, size, side="left").astype(np.int64)
    s = sets.shape[0]
    every = (np.zeros(s, dtype=np.int64), np.zeros(s, dtype=np.int64), np.zeros(0, dtype=np.int64))
    return Family._make((sets, size, first, *stats[1:], *_chain(G, sets, stats[6], stats[7]),
                         *every, _kernels.word_spans(sets)))


def landmarks(approx: Family, count: int) -> np.ndarray:
    """The landmark lower sets of the windowed DP (:func:`windowed`; not in the paper).

    Parameters
    ----------
    approx : Family
        The graph's pruned family, ``family(G, "approx")`` (Sec. 4.3).
    count : int
        How many runs of consecutive pruned sets (by size) to take one from.

    Returns
    -------
    ndarray of uint64, shape (k, W)
        Bit rows: ∅, V and, in each run, the pruned set with the least boundary bytes M(∂(L))
        (a cheap place to cut); k <= count + 2.
    """
    s = approx.sets.shape[0]
    step = max(1, -(-(s - 2) // count))
    rows = [0, s - 1]
    for lo in range(1, s - 1, step):
        hi = min(s - 1, lo + step)
        rows.append(lo + int(np.argmin(approx.bnd_m[lo:hi])))
    return approx.sets[np.unique(rows)]


def windowed_family(fam: Family) -> bool:
    """Whether the DP's transitions over a family are restricted (:func:`windowed`).

    Parameters
    ----------
    fam : Family

    Returns
    -------
    bool
    """
    return fam.marks.shape[0] > 0


def windowed(fam: Family, marks: np.ndarray, window: int) -> Family:
    """A family whose DP transitions L_a -> L_b are restricted to those that add at most
    `window` nodes (``|L_b| - |L_a| <= window``) or join two landmark sets (not in the
    paper: the DP of graphs of ``lowerset.dp.windowed_from(method)`` nodes or more).

    Every landmark and window transition of a subfamily holding the same landmarks is one of
    this family's, so its feasible budgets are feasible here too.

    Parameters
    ----------
    fam : Family
        The family, as :func:`family` builds it.
    marks : ndarray of uint64, shape (k, W)
        The landmark lower sets (:func:`landmarks`), each a set of `fam`.
    window : int
        Nodes (>= 1).

    Returns
    -------
    Family
        `fam` with ``a_lo``, ``pre`` and ``marks`` set.

    Raises
    ------
    LowersetError
        If a landmark is not a set of `fam` (an internal error).
    """
    s = fam.sets.shape[0]
    found = []
    for row in marks:
        size = int(np.unpackbits(row.view(np.uint8)).sum())
        lo, hi = np.searchsorted(fam.size, [size, size + 1])
        hit = lo + np.flatnonzero(np.all(fam.sets[lo:hi] == row, axis=1))
        if hit.shape[0] != 1:  # pragma: no cover - every family holds the pruned sets
            raise LowersetError("internal error: a landmark lower set is not in the family")
        found.append(int(hit[0]))
    idx = np.array(sorted(found), dtype=np.int64)
    is_mark = np.zeros(s, dtype=bool)
    is_mark[idx] = True
    a_lo = np.searchsorted(fam.size, fam.size - window, side="left").astype(np.int64)
    pre = np.where(is_mark, np.searchsorted(idx, a_lo), 0).astype(np.int64)
    return fam._replace(a_lo=a_lo, pre=pre, marks=idx)


def _chain(G, sets, bptr, bidx):
    """(chain, bfirst, bcum_t, bcum_m) of the family `sets` (see :data:`Family`): a chain's
    transitions sum the boundary nodes they share by binary search (U-Net-like graphs: about
    a hundred boundary nodes a set at 2,500 nodes)."""
    chain = bool(np.all((sets[:-1] & ~sets[1:]) == 0))
    if not chain:
        empty = np.zeros(0, dtype=np.int64)
        return False, empty, empty, empty
    _limits.check_memory(24 * int(bptr[-1]), "the boundaries of the lower sets, by first set",
                         "plan a smaller graph")
    return (True, *_kernels.chain_boundaries(sets, bptr, bidx, G.cost, G.memory))


def _set_stats(G, sets, deadline):
    """:func:`lowerset._kernels.set_stats` in chunks, checking `deadline` between them."""
    s, n = sets.shape[0], G.n
    size, tot_t, tot_m, bnd_t, bnd_m, bcount, extra = (np.zeros(s, dtype=np.int64)
                                                        for _ in range(7))
    bnd_bits = np.zeros_like(sets)
    front = np.zeros(n, dtype=np.bool_)
    front_preds = np.zeros(n, dtype=np.bool_)
    touched = np.zeros(n, dtype=np.int64)
    lo = 0
    chunk = _limits.Chunker(initial=256)
    while lo < s:
        hi = min(s, lo + chunk.start())
        _kernels.set_stats_range(sets, lo, hi, n, G.cost, G.memory, G.pred_ptr, G.pred_idx,
                                 G.succ_ptr, G.succ_idx, size, tot_t, tot_m, bnd_bits, bnd_t,
                                 bnd_m, bcount, extra, front, front_preds, touched)
        chunk.done(hi - lo)
        lo = hi
        deadline.check(lambda: f"while computing the statistics of the lower sets ({lo} of {s})")
    bptr = np.zeros(s + 1, dtype=np.int64)
    np.cumsum(bcount, out=bptr[1:])
    _limits.check_memory(8 * int(bptr[-1]), "the boundaries of the lower sets",
                         "use method='approx', or a smaller max_lower_sets")
    bidx = np.zeros(int(bptr[-1]), dtype=np.int64)
    lo = 0
    chunk = _limits.Chunker(initial=1024)
    while lo < s:
        hi = min(s, lo + chunk.start())
        _kernels.boundary_lists(bnd_bits, lo, hi, n, bptr, bidx)
        chunk.done(hi - lo)
        lo = hi
        deadline.check(lambda: f"while listing the boundaries of the lower sets ({lo} of {s})")
    return size, tot_t, tot_m, bnd_bits, bnd_t, bnd_m, bptr, bidx, extra
