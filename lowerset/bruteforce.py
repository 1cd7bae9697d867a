"""Exhaustive search over lower-set sequences for tiny graphs: the test oracle (paper, Sec. 4.1).

Everything here is written again from the paper's definitions with Python sets, independently of
the bitsets and Numba kernels the planners use:

- a lower set is a subset L ⊆ V with no edge from V∖L into L (Sec. 2), found by testing all 2^#V
  subsets;
- a strategy is a strictly increasing sequence ∅ ⊊ L_1 ⊊ ... ⊊ L_k = V (Sec. 3);
- its overhead is eq. (1), T(V ∖ U_k) = Σ_i T(V_i ∖ ∂(L_i)), and its peak is the maximum over i of
  eq. (2), M(i) = M(U_{i-1}) + 2 M(V_i) + M(δ+(L_i)∖L_i) + M(δ−(δ+(L_i))∖L_i).

The depth-first search carries the triplet (L_i, T({L_1 ≺ ... ≺ L_i}), M(U_i)) of Sec. 4.1 and the
peak so far, and visits *every* sequence (no pruning by budget, no dominance), so its work grows
like the number of ordered set partitions of V. The tests check it against
:class:`lowerset.CanonicalStrategy`, the package's single cost model, on every sequence of small
graphs; the DPs are then checked against it.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from itertools import combinations
from typing import TYPE_CHECKING

from .exceptions import ArgumentError

if TYPE_CHECKING:
    from .graph import Graph

#: A lower set of node labels.
Nodes = frozenset[Hashable]
#: A sequence with its figures: ``(overhead, peak, (L_1, ..., L_k))`` (cost units, bytes).
Scored = tuple[int, int, tuple[Nodes, ...]]

__all__ = [
    "MAX_NODES",
    "MAX_SUBSET_NODES",
    "subset_lower_sets",
    "sequence_cost",
    "all_sequences",
    "brute_min_budget",
    "brute_time_centric",
    "brute_memory_centric",
    "brute_schedule_points",
]

#: Largest #V accepted by the sequence search (edgeless graphs of 8 nodes have 545,835 sequences).
MAX_NODES = 8
#: Largest #V accepted by the enumeration of all subsets.
MAX_SUBSET_NODES = 16


def _plain(G):
    """Return (labels, preds, succs, cost, memory) of `G` as Python dicts of sets."""
    labels = list(G.labels)
    preds: dict[Hashable, set[Hashable]] = {v: set() for v in labels}
    succs: dict[Hashable, set[Hashable]] = {v: set() for v in labels}
    for v, w in G.edges:
        preds[w].add(v)
        succs[v].add(w)
    cost = {v: int(G.cost[G.index[v]]) for v in labels}
    memory = {v: int(G.memory[G.index[v]]) for v in labels}
    return labels, preds, succs, cost, memory


def subset_lower_sets(G: Graph, max_nodes: int = MAX_SUBSET_NODES) -> list[Nodes]:
    """Return every lower set of `G` by testing all 2^#V subsets (Sec. 2).

    A subset L is kept when no edge (v, w) has v ∉ L and w ∈ L.

    Parameters
    ----------
    G : Graph
    max_nodes : int
        Refuse graphs with more nodes than this.

    Returns
    -------
    list of frozenset
        The family L_G, ordered by size, then by the tuple of topological ids.

    Raises
    ------
    ArgumentError
        If ``G.n > max_nodes`` (also a ValueError).

    References
    ----------
    .. [1] Kusumoto et al., NeurIPS 2019, Sec. 2 (lower sets, L_G).

    Examples
    --------
    >>> from lowerset.bruteforce import subset_lower_sets
    >>> [sorted(L) for L in subset_lower_sets(ls.Graph.chain(2))]
    [[], [0], [0, 1]]
    """
    if G.n > max_nodes:
        raise ArgumentError(f"subset_lower_sets enumerates 2^#V subsets; #V = {G.n} > {max_nodes}")
    labels = list(G.labels)
    edges = list(G.edges)
    out = []
    for r in range(len(labels) + 1):
        for combo in combinations(labels, r):
            L = frozenset(combo)
            if all(v in L for v, w in edges if w in L):
                out.append(L)
    return out


class _Model:
    """Per-lower-set terms of eq. (1) and (2), from the definitions with Python sets."""

    def __init__(self, G):
        self.labels, self.preds, self.succs, self.cost, self.memory = _plain(G)
        self.V = frozenset(self.labels)

    def T(self, S):
        return sum(self.cost[v] for v in S)

    def M(self, S):
        return sum(self.memory[v] for v in S)

    def delta_plus(self, S):
        return {w for v in S for w in self.succs[v]}

    def delta_minus(self, S):
        return {u for w in S for u in self.preds[w]}

    def boundary(self, L):
        # ∂(L) = δ−(V∖L) ∩ L
        return frozenset(self.delta_minus(self.V - L) & L)

    def extra(self, L):
        # M(δ+(L)∖L) + M(δ−(δ+(L))∖L)
        dp = self.delta_plus(L)
        return self.M(dp - L) + self.M(self.delta_minus(dp) - L)


def sequence_cost(G: Graph, lower_sets: Sequence[Iterable[Hashable]]) -> tuple[int, int]:
    """Return (overhead, peak) of the canonical strategy of a sequence, from eq. (1) and (2).

    Written from the definitions with Python sets; the tests check that it agrees with
    :class:`lowerset.CanonicalStrategy`. The sequence is not validated.

    Parameters
    ----------
    G : Graph
    lower_sets : sequence of sets of node labels
        L_1 ⊊ ... ⊊ L_k = V.

    Returns
    -------
    overhead : int
        Eq. (1), cost units.
    peak : int
        max_i M(i) of eq. (2), bytes.

    References
    ----------
    .. [1] Kusumoto et al., NeurIPS 2019, Sec. 3, eq. (1) and (2).

    Examples
    --------
    >>> from lowerset.bruteforce import sequence_cost
    >>> sequence_cost(ls.Graph.chain(4, memory=10), [{0, 1}, {0, 1, 2, 3}])
    (3, 50)
    """
    model = _Model(G)
    prev: Nodes = frozenset()
    U: Nodes = frozenset()
    overhead, peak = 0, 0
    for L in lower_sets:
        L = frozenset(L)
        Vi = L - prev
        bnd = model.boundary(L)
        peak = max(peak, model.M(U) + 2 * model.M(Vi) + model.extra(L))
        overhead += model.T(Vi - bnd)
        U = U | bnd
        prev = L
    return overhead, peak


def all_sequences(G: Graph, family: Iterable[Iterable[Hashable]] | None = None,
                  max_nodes: int = MAX_NODES) -> list[Scored]:
    """Return every strictly increasing lower-set sequence ending with V, with its costs
    (Sec. 4.1).

    A depth-first search from ∅ that, from a prefix L_1 ⊊ ... ⊊ L_i, tries every lower set
    L' ⊋ L_i, updating the overhead T({L_1 ≺ ... ≺ L_i}) (eq. 1), the cache M(U_i) and the peak
    max_j M(j) (eq. 2) incrementally, as Sec. 4.1 describes. No budget and no dominance prune
    the search.

    Parameters
    ----------
    G : Graph
    family : iterable of sets of node labels, optional
        Only use these lower sets (for instance the pruned family of Sec. 4.3 with ∅ and V);
        the default is all of L_G, found by :func:`subset_lower_sets`. Sets that are not lower
        sets are an error.
    max_nodes : int
        Refuse graphs with more nodes than this.

    Returns
    -------
    list of (int, int, tuple of frozenset)
        ``(overhead, peak, (L_1, ..., L_k))`` for every sequence, overhead in cost units and
        peak in bytes.

    Raises
    ------
    ArgumentError
        If ``G.n > max_nodes``, or `family` holds a set that is not a lower set of `G` (also a
        ValueError).

    References
    ----------
    .. [1] Kusumoto et al., NeurIPS 2019, Sec. 4.1 (exhaustive search), Sec. 3 (eq. 1, 2).

    Examples
    --------
    >>> from lowerset.bruteforce import all_sequences
    >>> sorted(t for t, m, seq in all_sequences(ls.Graph.chain(3)))
    [1, 2, 2, 3]
    """
    if G.n > max_nodes:
        raise ArgumentError(
            f"all_sequences searches every lower-set sequence; #V = {G.n} > {max_nodes} nodes is "
            "too large for an exhaustive search")
    model = _Model(G)
    lowers = set(subset_lower_sets(G))
    if family is None:
        fam = lowers
    else:
        fam = {frozenset(L) for L in family}
        bad = [L for L in fam if L not in lowers]
        if bad:
            raise ArgumentError(f"{sorted(bad[0], key=repr)} is not a lower set of the graph")
    ordered = sorted(fam - {frozenset()}, key=len)
    # per lower set: T(L), M(L), ∂(L), and the last two terms of eq. (2)
    stats = {L: (model.T(L), model.M(L), model.boundary(L), model.extra(L)) for L in ordered}
    V = model.V
    out = []

    def dfs(L, t, U, mU, peak, seq):
        # invariant: seq = (L_1, ..., L_i) with L_i = L, t = T({L_1 ≺ ... ≺ L_i}),
        # U = U_i, mU = M(U_i) and peak = max_{j <= i} M(j)
        if L == V:
            out.append((t, peak, seq))
            return
        tL, mL = (stats[L][0], stats[L][1]) if L else (0, 0)
        for L2 in ordered:
            if len(L2) <= len(L) or not L < L2:
                continue
            t2, m2, bnd2, extra2 = stats[L2]
            Vi = L2 - L
            Mi = mU + 2 * (m2 - mL) + extra2
            t_new = t + model.T(Vi - bnd2)
            U2 = U | bnd2
            dfs(L2, t_new, U2, model.M(U2), max(peak, Mi), seq + (L2,))

    dfs(frozenset(), 0, frozenset(), 0, 0, ())
    return out


def _sequences(G, sequences, family):
    return all_sequences(G, family=family) if sequences is None else sequences


def brute_min_budget(G: Graph, family: Iterable[Iterable[Hashable]] | None = None,
                     sequences: list[Scored] | None = None) -> int:
    """Return the least peak memory (bytes) of any canonical strategy (Sec. 4.1, 4.4).

    Parameters
    ----------
    G : Graph
    family : iterable of sets, optional
        As in :func:`all_sequences`.
    sequences : list, optional
        The output of :func:`all_sequences`, to reuse it.

    Returns
    -------
    int

    Raises
    ------
    ArgumentError
        As :func:`all_sequences`.

    References
    ----------
    .. [1] Kusumoto et al., NeurIPS 2019, Sec. 4.1, 4.4, eq. (2).

    Examples
    --------
    >>> from lowerset.bruteforce import brute_min_budget
    >>> brute_min_budget(ls.Graph.chain(4, memory=10))
    50
    """
    return min(peak for _, peak, _ in _sequences(G, sequences, family))


def brute_time_centric(G: Graph, budget: int, family: Iterable[Iterable[Hashable]] | None = None,
                       sequences: list[Scored] | None = None) -> int | None:
    """Return the least overhead (eq. 1) of a sequence with peak (eq. 2) <= `budget`, or None.

    Parameters
    ----------
    G : Graph
    budget : int
        B in bytes.
    family, sequences : optional
        As in :func:`brute_min_budget`.

    Returns
    -------
    int or None
        None when no sequence fits in the budget.

    Raises
    ------
    ArgumentError
        As :func:`all_sequences`.

    References
    ----------
    .. [1] Kusumoto et al., NeurIPS 2019, Sec. 3 (General Recomputation Problem), Sec. 4.1.

    Examples
    --------
    >>> from lowerset.bruteforce import brute_time_centric
    >>> g = ls.Graph.chain(4, memory=10)
    >>> brute_time_centric(g, 50), brute_time_centric(g, 49)
    (1, None)
    """
    fits = [t for t, peak, _ in _sequences(G, sequences, family) if peak <= budget]
    return min(fits) if fits else None


def brute_memory_centric(G: Graph, budget: int,
                         family: Iterable[Iterable[Hashable]] | None = None,
                         sequences: list[Scored] | None = None) -> int | None:
    """Return the largest overhead (eq. 1) of a sequence with peak (eq. 2) <= `budget`, or None.

    Parameters
    ----------
    G : Graph
    budget : int
        B in bytes.
    family, sequences : optional
        As in :func:`brute_min_budget`.

    Returns
    -------
    int or None
        None when no sequence fits in the budget.

    Raises
    ------
    ArgumentError
        As :func:`all_sequences`.

    References
    ----------
    .. [1] Kusumoto et al., NeurIPS 2019, Sec. 4.4 (memory-centric strategy), Sec. 4.1.

    Examples
    --------
    >>> from lowerset.bruteforce import brute_memory_centric
    >>> brute_memory_centric(ls.Graph.chain(4, memory=10), 50)
    3
    """
    fits = [t for t, peak, _ in _sequences(G, sequences, family) if peak <= budget]
    return max(fits) if fits else None


def brute_schedule_points(G: Graph, sequences: list[Scored] | None = None) -> list[Scored]:
    """Return the schedule of every distinct plan over all lower-set sequences (Sec. 3).

    Two sequences that drop the same values, ``V_i`` minus the nodes with a successor in G
    outside ``L_i`` for ``i < k`` (a node whose outputs no function reads, in
    ``NodeFacts.args``, is never dropped), have the same schedule (:func:`lowerset.schedule`),
    so each such set is scheduled once, with the first sequence that drops it.

    Parameters
    ----------
    G : Graph
    sequences : list, optional
        The output of :func:`all_sequences` (computed when omitted).

    Returns
    -------
    list of (int, int, tuple of frozenset)
        ``(peak, recompute_cost, (L_1, ..., L_k))``: the schedule's whole-step peak in bytes
        and what it recomputes in cost units.

    Raises
    ------
    ArgumentError
        As :func:`all_sequences`.

    Examples
    --------
    >>> from lowerset.bruteforce import brute_schedule_points
    >>> sorted((p, c) for p, c, _ in brute_schedule_points(ls.Graph.chain(4, memory=10)))
    [(60, 1), (70, 0), (70, 1), (70, 2)]
    """
    from .strategy import CanonicalStrategy

    labels = G.labels
    consumed = {labels[s] for nf in G.facts.nodes for s, _ in nf.args if s >= 0}
    succs: dict[Hashable, set[Hashable]] = {v: set() for v in labels}
    for v, w in G.edges:
        succs[v].add(w)
    points = {}
    for _, _, seq in _sequences(G, sequences, None):
        dropped: set[Hashable] = set()
        prev: Nodes = frozenset()
        for L in seq[:-1]:
            dropped |= {v for v in L - prev if v in consumed and succs[v] <= L}
            prev = L
        key = frozenset(dropped)
        if key not in points:
            sched = CanonicalStrategy(G, [set(L) for L in seq]).schedule
            points[key] = (sched.peak, sched.recompute_cost, seq)
    return list(points.values())
