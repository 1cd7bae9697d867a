"""Tests of lowerset.lowersets: is_lower_set, boundary, L_G, the pruned family (Sec. 2, 4.3),
the ordered family.

Oracles: all 2^#V subsets filtered by the definition (lowerset.bruteforce.subset_lower_sets),
``#L_G == len(list(nx.antichains(G)))`` (a lower set is determined by its antichain of maximal
elements), ``L_v == nx.ancestors(G, v) | {v}``, and the prefixes of the graph's order and of
``nx.topological_generations``.
"""

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, note, settings
from hypothesis import strategies as st

import lowerset as ls
from conftest import contracted_family_by_definition, ordered_family_by_definition
from lowerset.bruteforce import subset_lower_sets
from strategies import dags, examples, wide_dags


def naive_is_lower_set(G, L):
    """No edge (v, w) with v outside L and w inside (Sec. 2)."""
    return all(v in L for v, w in G.edges if w in L)


def naive_boundary(G, L):
    """∂(L) = δ−(V∖L) ∩ L, from the definition."""
    outside = set(G.labels) - set(L)
    delta_minus = {v for v, w in G.edges if w in outside}
    return frozenset(delta_minus & set(L))


def edgeless(n):
    return ls.Graph(range(n), [], {v: 1 for v in range(n)}, {v: 1 for v in range(n)})


def diamond():
    return ls.Graph("abcd", [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")],
                    dict.fromkeys("abcd", 1), dict.fromkeys("abcd", 1))


def wide(n_layers, width):
    """Layers of `width` nodes, every node of a layer feeding every node of the next."""
    nodes = [(i, j) for i in range(n_layers) for j in range(width)]
    edges = [((i, j), (i + 1, k)) for i in range(n_layers - 1) for j in range(width)
             for k in range(width)]
    return ls.Graph(nodes, edges, dict.fromkeys(nodes, 1), dict.fromkeys(nodes, 1))


# -- fixed cases ---------------------------------------------------------------------------------


class TestFixed:
    def test_empty_graph_raises(self):
        with pytest.raises(ls.GraphError, match="empty"):
            ls.Graph([], [], {}, {})

    def test_cycle_raises_naming_it(self):
        with pytest.raises(ls.GraphError, match=r"cycle: .*'x'.*'y'|cycle: .*'y'.*'x'"):
            ls.Graph(["x", "y", "z"], [("x", "y"), ("y", "x"), ("x", "z")],
                     dict.fromkeys("xyz", 1), dict.fromkeys("xyz", 1))

    @pytest.mark.parametrize("n", [1, 2, 5, 10])
    def test_edgeless_every_subset(self, n):
        g = edgeless(n)
        family = ls.lower_sets(g)
        assert len(family) == len(set(family)) == 2 ** n == ls.count_lower_sets(g)
        assert set(family) == set(subset_lower_sets(g))

    def test_single_node(self):
        g = ls.Graph.chain(1)
        assert set(ls.lower_sets(g)) == {frozenset(), frozenset({0})}
        assert ls.pruned_lower_sets(g) == {0: frozenset({0})}
        assert ls.boundary(g, {0}) == frozenset()

    @pytest.mark.parametrize("n", [1, 2, 7])
    def test_path(self, n):
        g = ls.Graph.chain(n)
        assert set(ls.lower_sets(g)) == {frozenset(range(k)) for k in range(n + 1)}
        assert ls.count_lower_sets(g) == n + 1
        assert ls.pruned_lower_sets(g) == {v: frozenset(range(v + 1)) for v in range(n)}
        for k in range(1, n):
            assert ls.boundary(g, set(range(k))) == {k - 1}

    def test_diamond(self):
        g = diamond()
        expected = {"", "a", "ab", "ac", "abc", "abcd"}
        assert set(ls.lower_sets(g)) == {frozenset(s) for s in expected}
        assert ls.pruned_lower_sets(g) == {"a": frozenset("a"), "b": frozenset("ab"),
                                           "c": frozenset("ac"), "d": frozenset("abcd")}
        assert ls.boundary(g, "a") == frozenset("a")
        assert ls.boundary(g, "ab") == frozenset("ab")  # a -> c and b -> d leave
        assert ls.boundary(g, "abc") == frozenset("bc")
        assert ls.boundary(g, "abcd") == frozenset()
        assert ls.boundary(g, "") == frozenset()
        assert not ls.is_lower_set(g, "bc")
        assert ls.is_lower_set(g, "ac")

    def test_docstring_example_two_sources(self):
        g = ls.Graph("abc", [("a", "c"), ("b", "c")], dict.fromkeys("abc", 1),
                     dict.fromkeys("abc", 1))
        assert sorted(sorted(L) for L in ls.lower_sets(g)) == [[], ["a"], ["a", "b"],
                                                              ["a", "b", "c"], ["b"]]

    def test_boundary_of_non_lower_set_names_edge(self):
        g = diamond()
        with pytest.raises(ls.NotALowerSetError, match=r"\('a', 'b'\)"):
            ls.boundary(g, {"b"})

    def test_is_lower_set_accepts_mask(self):
        g = ls.Graph.chain(3)
        assert ls.is_lower_set(g, np.array([True, True, False]))
        assert not ls.is_lower_set(g, np.array([False, True, False]))

    def test_unknown_node(self):
        with pytest.raises(ls.GraphError, match="99"):
            ls.is_lower_set(ls.Graph.chain(3), {99})
        with pytest.raises(ls.GraphError, match="99"):
            ls.boundary(ls.Graph.chain(3), {0, 99})

    def test_max_lower_sets(self):
        g = edgeless(6)  # 64 lower sets
        assert ls.count_lower_sets(g, max_lower_sets=64) == 64
        with pytest.raises(ls.SearchLimitError) as info:
            ls.count_lower_sets(g, max_lower_sets=63)
        assert info.value.limit == "max_lower_sets"
        with pytest.raises(ls.SearchLimitError):
            ls.lower_sets(g, max_lower_sets=10)


class TestMultiWord:
    """Graphs of more than 64 nodes use several uint64 words per bitset."""

    def test_long_chain(self):
        n = 130
        g = ls.Graph.chain(n)
        family = ls.lower_sets(g)
        assert set(family) == {frozenset(range(k)) for k in range(n + 1)}
        assert ls.count_lower_sets(g) == n + 1
        pruned = ls.pruned_lower_sets(g)
        assert all(pruned[v] == frozenset(range(v + 1)) for v in (0, 63, 64, 65, 127, 128, 129))
        assert ls.boundary(g, set(range(64))) == {63}
        assert ls.boundary(g, set(range(65))) == {64}
        assert ls.is_lower_set(g, set(range(100)))
        assert not ls.is_lower_set(g, set(range(100)) - {70})

    def test_wide_graph(self):
        # 35 layers of 2 nodes, complete bipartite between layers: 70 nodes;
        # lower sets = ∅ plus, per layer i, 3 ways to cut it (one of two nodes, or both)
        g = wide(35, 2)
        assert g.n == 70
        family = ls.lower_sets(g)
        assert len(family) == len(set(family)) == 1 + 3 * 35
        G = g.to_networkx()
        assert len(family) == len(list(nx.antichains(G)))
        assert all(naive_is_lower_set(g, L) for L in family)
        pruned = ls.pruned_lower_sets(g)
        assert all(pruned[v] == frozenset(nx.ancestors(G, v) | {v}) for v in g.labels)
        L = frozenset((i, j) for i in range(33) for j in range(2)) | {(33, 0)}
        assert L in set(family)
        assert ls.boundary(g, L) == naive_boundary(g, L) == {(32, 0), (32, 1), (33, 0)}

    def test_independent_chains_across_words(self):
        # two chains of 40 (80 nodes): #L_G = 41 * 41
        nodes = [(c, i) for c in range(2) for i in range(40)]
        edges = [((c, i), (c, i + 1)) for c in range(2) for i in range(39)]
        g = ls.Graph(nodes, edges, dict.fromkeys(nodes, 1), dict.fromkeys(nodes, 1))
        family = ls.lower_sets(g)
        assert len(set(family)) == len(family) == 41 * 41
        assert all(naive_is_lower_set(g, L) for L in family[:: 37])


# -- properties on random DAGs -------------------------------------------------------------------


@given(dags(max_nodes=12))
def test_enumeration_equals_all_subsets(g):
    family = ls.lower_sets(g)
    assert len(family) == len(set(family)), "a lower set appears twice"
    assert set(family) == set(subset_lower_sets(g))
    assert frozenset() in family and frozenset(g.labels) in family
    assert ls.count_lower_sets(g) == len(family)
    assert g.n + 1 <= len(family) <= 2 ** g.n


@given(dags(max_nodes=14))
def test_every_set_is_lower_and_count_is_antichains(g):
    family = ls.lower_sets(g)
    note(f"#L_G = {len(family)}")
    assert all(naive_is_lower_set(g, L) for L in family)
    assert all(ls.is_lower_set(g, L) for L in family)
    assert len(family) == len(set(family)) == len(list(nx.antichains(g.to_networkx())))


@given(dags(max_nodes=14))
def test_pruned_family(g):
    G = g.to_networkx()
    pruned = ls.pruned_lower_sets(g)
    assert set(pruned) == set(g.labels)
    for v, Lv in pruned.items():
        assert Lv == frozenset(nx.ancestors(G, v) | {v})
    assert len(set(pruned.values())) == g.n  # distinct: v is the only maximal element of L_v
    assert set(pruned.values()) <= set(ls.lower_sets(g))


@given(dags(max_nodes=14))
def test_ordered_family(g):
    family = ls.ordered_lower_sets(g)
    assert set(family) == ordered_family_by_definition(g)
    assert len(family) == len(set(family)) <= 3 * g.n + 2
    assert [len(L) for L in family] == sorted(len(L) for L in family)
    assert set(family) <= set(ls.lower_sets(g))


@given(dags(max_nodes=12, max_memory=2))
def test_contracted_family(g):
    family = ls.contracted_lower_sets(g)
    assert set(family) == contracted_family_by_definition(g)
    assert len(family) == len(set(family))
    assert [len(L) for L in family] == sorted(len(L) for L in family)
    fam = ls.lowersets.family(g, "contracted")
    assert {g.nodes_of(ls.lowersets.mask_of_bits(row, g.n)) for row in fam.sets} == set(family)


def test_contraction_follows_chains_of_views():
    """a owns a buffer, b is a view of a and c a view of b, d has its own memory: b and c join
    a's group; the quotient has a -> d."""
    g = ls.Graph(list("abcd"), [("a", "b"), ("b", "c"), ("c", "d")], dict.fromkeys("abcd", 2),
                 dict(a=8, b=0, c=0, d=8))
    group, quotient = ls.lowersets.contraction(g)
    assert [g.labels[int(r)] for r in group] == ["a", "a", "a", "d"]
    assert quotient.n == 2 and list(quotient.edges) == [(0, 3)]
    assert quotient.cost.tolist() == [6, 2] and quotient.memory.tolist() == [8, 8]
    assert [sorted(L) for L in ls.contracted_lower_sets(g)] == [
        [], ["a"], ["a", "b"], ["a", "b", "c"], ["a", "b", "c", "d"]]


def test_contraction_groups_the_isolated_nodes():
    """c, d and e have no edge (a BatchNorm step counter each, in a compiled graph): they form
    one group, whose first node is c, so the quotient has one isolated node; a -> b is kept."""
    g = ls.Graph(list("abcde"), [("a", "b")], dict.fromkeys("abcde", 1),
                 dict(a=8, b=8, c=4, d=4, e=4))
    group, quotient = ls.lowersets.contraction(g)
    assert [g.labels[int(r)] for r in group] == ["a", "b", "c", "c", "c"]
    assert quotient.n == 3 and quotient.memory.tolist() == [8, 8, 12]
    assert ls.count_lower_sets(g) == 3 * 2 ** 3 and ls.count_lower_sets(quotient) == 3 * 2


@given(dags(max_nodes=10), st.data())
def test_the_isolated_nodes_moved_to_the_last_segment_drop_the_same_nodes(g, data):
    """The fact the grouping of isolated nodes rests on: every labelling has one with the
    isolated nodes all in its last segment (a segment left empty removed) that drops the same
    nodes. (Moving one into another segment can change them: a segment of isolated nodes
    alone after the others makes theirs droppable, so the test moves them to the last one.)"""
    isolated = [v for v in range(g.n) if g.preds(v).size == 0 and g.succs(v).size == 0]
    seg = data.draw(st.lists(st.integers(0, 3), min_size=g.n, max_size=g.n), label="seg")
    seg = np.array(seg, dtype=np.int64)
    for v in range(g.n):   # ids are a topological order; monotone along every edge
        seg[v] = max([seg[v]] + [seg[u] for u in g.preds(v)])
    seg = np.unique(seg, return_inverse=True)[1].astype(np.int64)   # no empty segment
    moved = seg.copy()
    moved[isolated] = seg.max()
    moved = np.unique(moved, return_inverse=True)[1].astype(np.int64)
    note(f"isolated {isolated}, seg {seg.tolist()} -> {moved.tolist()}")
    before = ls.scheduling.dropped_of_labels(g, seg)
    assert ls.scheduling.dropped_of_labels(g, moved).tolist() == before.tolist()
    assert not before[isolated].any()


def test_ordered_family_of_parallel_branches():
    """Two branches a->b and c->d listed branch after branch: the graph's order finishes a's
    branch first ({a, b}, {a, b, c}); the generations order starts both ({a, c}, {a, b, c})."""
    g = ls.Graph(["a", "b", "c", "d"], [("a", "b"), ("c", "d")], dict.fromkeys("abcd", 1),
                 dict.fromkeys("abcd", 1))
    assert {frozenset(L) for L in ls.ordered_lower_sets(g)} - set(
        ls.pruned_lower_sets(g).values()) == {frozenset(), frozenset("ac"), frozenset("abc"),
                                              frozenset("abcd")}


@given(dags(max_nodes=14), st.data())
def test_union_intersection_boundary(g, data):
    family = ls.lower_sets(g)
    A = data.draw(st.sampled_from(family), label="A")
    B = data.draw(st.sampled_from(family), label="B")
    assert ls.is_lower_set(g, A | B) and ls.is_lower_set(g, A & B)
    assert (A | B) in family and (A & B) in family
    assert ls.boundary(g, A) == naive_boundary(g, A)
    assert ls.boundary(g, A) <= A


@given(dags(max_nodes=10), st.data())
def test_is_lower_set_on_any_subset(g, data):
    S = data.draw(st.sets(st.sampled_from(g.labels)), label="S")
    assert ls.is_lower_set(g, S) == naive_is_lower_set(g, S)
    if not naive_is_lower_set(g, S):
        with pytest.raises(ls.NotALowerSetError, match="enters it from outside"):
            ls.boundary(g, S)


# -- wide graphs: fans, long skips, several sinks (tests/strategies.py wide_dags) -----------------


@settings(max_examples=examples(1))
@given(wide_dags(), st.data())
def test_wide_graphs_lower_set_invariants(g, data):
    """Against the 2^#V subsets filtered by the definition and the antichains of networkx."""
    family = ls.lower_sets(g)
    note(f"#V = {g.n}, #L_G = {len(family)}")
    assert len(family) == len(set(family)), "a lower set appears twice"
    assert set(family) == set(subset_lower_sets(g))
    assert len(family) == ls.count_lower_sets(g) == len(list(nx.antichains(g.to_networkx())))
    assert family[0] == frozenset() and family[-1] == frozenset(g.labels)
    sizes = [len(L) for L in family]
    assert sizes == sorted(sizes)  # by size, so every subset comes before its supersets
    pruned = ls.pruned_lower_sets(g)
    assert set(pruned.values()) <= set(family)
    for _ in range(3):
        A = data.draw(st.sampled_from(family), label="A")
        B = data.draw(st.sampled_from(family), label="B")
        assert (A | B) in family and (A & B) in family
        assert ls.boundary(g, A) == naive_boundary(g, A)


@pytest.mark.parametrize("k", [1, 2, 5, 13])
def test_fan_counts(k):
    """A root with k children: the empty set, plus the root with any subset of the children."""
    g = fan(k)
    assert ls.count_lower_sets(g) == 2 ** k + 1
    family = ls.lower_sets(g)
    assert len(set(family)) == 2 ** k + 1
    assert all(L == frozenset() or 0 in L for L in family)


def fan(k):
    nodes = list(range(k + 1))
    return ls.Graph(nodes, [(0, i) for i in nodes[1:]], dict.fromkeys(nodes, 1),
                    dict.fromkeys(nodes, 1))


class TestLimits:
    """max_lower_sets is enforced before the family is stored."""

    def test_wide_fan_rejected_at_once(self):
        """Regression: a 40-way fan with max_lower_sets=10**8 used to run for 15 s and allocate
        1.7 GB before any check; an antichain of 40 children proves #L_G > 2**40 at once."""
        import time
        import tracemalloc

        g = fan(40)
        calls = (lambda: ls.count_lower_sets(g, max_lower_sets=10**8),
                 lambda: ls.lower_sets(g, max_lower_sets=10**8),
                 lambda: ls.dp.solve(g, 10**6, max_lower_sets=10**8),
                 lambda: ls.min_budget(g, max_lower_sets=10**8))
        for call in calls:   # Numba's kernels compiled or loaded outside the measurement
            with pytest.raises(ls.SearchLimitError):
                call()
        tracemalloc.start()
        start = time.perf_counter()
        try:
            for call in calls:
                with pytest.raises(ls.SearchLimitError, match=r"at least 2\*\*40") as info:
                    call()
                assert info.value.limit == "max_lower_sets"
                assert "method='approx'" in str(info.value)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert time.perf_counter() - start < 1.0
        assert peak < 10 * 2**20  # numpy reports its buffers to tracemalloc

    def test_many_sets_without_a_wide_antichain(self):
        """Two chains of 300 nodes: width 2, but 301**2 lower sets; the count stops at the
        limit without storing a set."""
        import tracemalloc

        nodes = [(c, i) for c in range(2) for i in range(300)]
        edges = [((c, i), (c, i + 1)) for c in range(2) for i in range(299)]
        g = ls.Graph(nodes, edges, dict.fromkeys(nodes, 1), dict.fromkeys(nodes, 1))
        tracemalloc.start()
        try:
            with pytest.raises(ls.SearchLimitError, match="more than max_lower_sets=50000"):
                ls.dp.solve(g, 10**9)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 2 * 2**20
        assert ls.count_lower_sets(g, max_lower_sets=301**2) == 301**2
        with pytest.raises(ls.SearchLimitError, match=r"90601 lower sets, more than"):
            ls.count_lower_sets(g, max_lower_sets=301**2 - 1)  # from the cached count

    def test_default_limit_rejects_a_17_way_fan_quickly(self):
        """At the defaults a 17-way fan (131,073 lower sets, a minute per DP pass) is refused
        with the estimate and the fix, instead of running for minutes."""
        import time

        start = time.perf_counter()
        with pytest.raises(ls.SearchLimitError) as info:
            ls.dp.solve(fan(17))
        assert time.perf_counter() - start < 1.0
        msg = str(info.value)
        assert "2**17" in msg and "max_lower_sets=50000" in msg
        assert "method='approx'" in msg and "time_limit" in msg
        assert ls.DEFAULT_MAX_LOWER_SETS == 50_000
        # the approximate DP still plans it
        least = ls.min_budget(fan(17), "approx")
        assert ls.dp.solve(fan(17), method="approx").peak_memory == least


@given(st.data())
def test_subset_test_reads_only_the_span(data):
    """``_kernels._is_subset`` with ``word_spans`` against ``not (a & ~b).any()`` on bit rows
    made of all-ones, empty and random words (lower sets of a topological numbering look
    like: ones, a word or two of mixture, zeros; the test must hold for any rows)."""
    from lowerset import _kernels
    n_words = data.draw(st.integers(1, 5), label="words")
    word = st.one_of(st.just(2**64 - 1), st.just(0), st.integers(0, 2**64 - 1))
    rows = np.array(data.draw(st.lists(st.lists(word, min_size=n_words, max_size=n_words),
                                       min_size=2, max_size=6), label="rows"), dtype=np.uint64)
    span = _kernels.word_spans(rows)
    for i, row in enumerate(rows):
        not_full = [w for w in range(n_words) if row[w] != 2**64 - 1]
        nonzero = [w for w in range(n_words) if row[w] != 0]
        assert tuple(span[i]) == (not_full[0] if not_full else n_words,
                                  nonzero[-1] if nonzero else -1)
    for a in range(rows.shape[0]):
        for b in range(rows.shape[0]):
            assert _kernels._is_subset(rows, span, a, b) == (not (rows[a] & ~rows[b]).any())


@given(st.data())
def test_unique_rows_by_size_against_numpy(data):
    """``_kernels.unique_rows_by_size`` against numpy: the distinct rows (``np.unique(rows,
    axis=0)``, word by word as unsigned integers) stably sorted by their number of set bits,
    on rows of all-ones, empty and random words with repeats."""
    from lowerset import _kernels
    n_words = data.draw(st.integers(1, 4), label="words")
    word = st.one_of(st.just(2**64 - 1), st.just(0), st.integers(0, 2**64 - 1),
                     st.integers(0, 7))
    rows = np.array(data.draw(st.lists(st.lists(word, min_size=n_words, max_size=n_words),
                                       min_size=1, max_size=40), label="rows"), dtype=np.uint64)
    rows = rows[data.draw(st.lists(st.integers(0, rows.shape[0] - 1), min_size=1,
                                   max_size=60), label="picks")]
    distinct = np.unique(rows, axis=0)
    size = np.unpackbits(distinct.view(np.uint8), axis=1).sum(axis=1)
    want = distinct[np.argsort(size, kind="stable")]
    assert np.array_equal(_kernels.unique_rows_by_size(rows), want)
