"""Chen et al.'s baselines on articulation cuts (lowerset.baselines)."""

import networkx as nx
import pytest
from hypothesis import given

import lowerset as ls
from lowerset.baselines import (
    articulation_cuts,
    chen_greedy,
    chen_greedy_sweep,
    chen_sqrtn,
    selective_cuts,
    selective_family,
)
from lowerset.bruteforce import brute_min_budget, sequence_cost
from strategies import dags, wide_dags


def skip_connection():
    # Fig. 2 of the paper: a -> b -> c -> d with a skip a -> d; only {a} has a one-node boundary
    return ls.Graph("abcd", [("a", "b"), ("b", "c"), ("c", "d"), ("a", "d")],
                    dict.fromkeys("abcd", 1), {"a": 1, "b": 2, "c": 3, "d": 4})


def test_skip_connection_has_one_cut():
    g = skip_connection()
    assert [g.labels[v] for v, _ in articulation_cuts(g)] == ["a"]
    assert chen_sqrtn(g).lower_sets == [frozenset("a"), frozenset("abcd")]


def test_chain_cuts_every_node_but_the_last():
    g = ls.Graph.chain(10)
    assert [v for v, _ in articulation_cuts(g)] == list(range(9))


@given(dags(max_nodes=9))
def test_cuts_are_nested_lower_sets_with_their_node_as_boundary(g):
    G = g.to_networkx()
    prev = frozenset()
    for v, mask in articulation_cuts(g):
        L = g.nodes_of(mask)
        label = g.labels[v]
        assert L == frozenset(nx.ancestors(G, label)) | {label}
        assert ls.boundary(g, L) == {label}
        assert prev < L < frozenset(g.labels)
        prev = L


def naive_cuts(g):
    """The articulation cuts by definition (networkx): L_v = ancestors(v) ∪ {v} ≠ V whose only
    node with a successor outside is v, as {frozenset(L_v): v}."""
    G = g.to_networkx()
    out = {}
    for v in g.labels:
        L = frozenset(nx.ancestors(G, v)) | {v}
        if L != frozenset(g.labels) and {u for u in L if set(G.successors(u)) - L} == {v}:
            out[L] = v
    return out


def nested_chain(sets):
    """Walk the sets by size, keeping each one that strictly contains the last one kept."""
    chain = []
    for L in sorted(sets, key=len):
        if not chain or chain[-1] < L:
            chain.append(L)
    return chain


@given(wide_dags(max_nodes=10))
def test_baselines_cut_at_articulation_points_and_report_eq_1_2(g):
    """Each baseline is a chain of articulation cuts (by definition, with networkx) followed by
    V, and reports the overhead and peak that the set-based evaluation of eq. (1) and (2)
    (bruteforce.sequence_cost) gives."""
    cuts = naive_cuts(g)
    V = frozenset(g.labels)
    chain = nested_chain(cuts)
    for s in (chen_sqrtn(g), chen_greedy(g, 0), chen_greedy_sweep(g),
              chen_greedy(g, g.total_memory())):
        seq = s.lower_sets
        assert seq[-1] == V and all(L in cuts for L in seq[:-1])
        assert all(a < b for a, b in zip(seq, seq[1:]))
        assert (s.overhead, s.peak_memory) == sequence_cost(g, seq)
    # Chen's greedy rule on the chain: a cut is taken once more than b bytes of activations
    # have accumulated since the last cut taken; b = M(V) takes none
    M = {v: int(g.memory[g.index[v]]) for v in g.labels}
    for b in (0, 1, 3, g.total_memory()):
        taken, last = [], 0
        for L in chain:
            if sum(M[v] for v in L) - last > b:
                taken.append(L)
                last = sum(M[v] for v in L)
        assert chen_greedy(g, b).lower_sets == taken + [V]
    assert chen_greedy(g, g.total_memory()).lower_sets == [V]
    # sqrt(n): about sqrt(#chain) cuts, never more
    assert len(chen_sqrtn(g)) - 1 <= round(len(chain) ** 0.5)
    if g.n <= 8:  # no strategy beats the optimum (exhaustive search)
        assert chen_greedy_sweep(g).peak_memory >= brute_min_budget(g)


def test_fixed_graph_by_hand():
    """a -> b -> c -> e, b -> d -> e, e -> f: cuts {a}, {a,b}, {a,b,c,d,e} (c and d are not
    cuts); memory 1, 2, 4, 8, 16, 32."""
    g = ls.Graph("abcdef", [("a", "b"), ("b", "c"), ("c", "e"), ("b", "d"), ("d", "e"),
                            ("e", "f")], dict.fromkeys("abcdef", 1),
                 {"a": 1, "b": 2, "c": 4, "d": 8, "e": 16, "f": 32})
    assert [g.labels[v] for v, _ in articulation_cuts(g)] == ["a", "b", "e"]
    s = chen_greedy(g, 0)
    assert s.lower_sets == [frozenset("a"), frozenset("ab"), frozenset("abcde"),
                            frozenset("abcdef")]
    # overhead: T(V_i ∖ ∂(L_i)) = 0 + 0 + |{c, d}| + |{f}| = 3
    # M(1) = 2*1 + M(b) = 4; M(2) = 1 + 2*2 + M(c, d) = 17;
    # M(3) = 1 + 2 + 2*(4 + 8 + 16) + M(f) = 91; M(4) = 1 + 2 + 16 + 2*32 = 83
    assert (s.overhead, s.memory_profile) == (3, [4, 17, 91, 83])
    # k = round(sqrt(3)) = 2 targets, 1/3 and 2/3 of M(V) = 63 bytes (21 and 42); the cuts
    # hold 1, 3 and 31 bytes, and 31 is the closest to both: one cut
    assert chen_sqrtn(g).lower_sets == [frozenset("abcde"), frozenset("abcdef")]
    # three targets 15.75, 31.5, 47.25: 3 bytes is the closest to the first
    assert chen_sqrtn(g, n_segments=4).lower_sets == [frozenset("ab"), frozenset("abcde"),
                                                      frozenset("abcdef")]
    assert chen_sqrtn(g, n_segments=2).lower_sets == chen_sqrtn(g).lower_sets  # target 31.5


@pytest.mark.parametrize("knob, error", [(-1, ls.ArgumentError), (float("nan"), ls.ArgumentError),
                                         (float("inf"), ls.ArgumentError),
                                         ("10", ls.ArgumentTypeError),
                                         (None, ls.ArgumentTypeError)])
def test_greedy_bad_knob(knob, error):
    # regression: NaN passed the `< 0` check and silently took no cut
    with pytest.raises(error, match="segment_bytes"):
        chen_greedy(ls.Graph.chain(6), knob)


def test_greedy_float_knob_rounds_down():
    g = ls.Graph.chain(6, memory=10)
    assert chen_greedy(g, 25.9).lower_sets == chen_greedy(g, 25).lower_sets


@pytest.mark.parametrize("call", [chen_sqrtn, chen_greedy_sweep, articulation_cuts,
                                  lambda g: chen_greedy(g, 0)])
def test_baselines_need_a_graph(call):
    with pytest.raises(ls.ArgumentTypeError, match="lowerset.Graph"):
        call("cg_resnet50.txt")


def test_sweep_bad_knob_count():
    with pytest.raises(ls.ArgumentError, match="n_knobs"):
        chen_greedy_sweep(ls.Graph.chain(4), n_knobs=0)


def test_greedy_knob():
    g = ls.Graph.chain(6, memory=10)
    assert len(chen_greedy(g, 0)) == 6          # every cut taken
    assert len(chen_greedy(g, 10**9)) == 1      # none: the one-segment strategy [V]
    assert len(chen_greedy(g, 25)) == 2         # a cut once more than 25 bytes accumulated
    with pytest.raises(ValueError, match="segment_bytes"):
        chen_greedy(g, -1)
    assert chen_greedy_sweep(g).peak_memory == min(
        chen_greedy(g, b).peak_memory for b in range(0, 70, 5))


def test_sqrtn_segments_argument():
    g = ls.Graph.chain(16)
    assert len(chen_sqrtn(g, n_segments=3)) == 3
    with pytest.raises(ls.ArgumentError, match="n_segments"):
        chen_sqrtn(g, n_segments=0)
    with pytest.raises(ls.ArgumentTypeError, match="n_segments"):
        chen_sqrtn(g, n_segments=2.0)


class TestSelective:
    """Selective checkpointing as canonical strategies (``baselines.selective_cuts``)."""

    @staticmethod
    def block_chain():
        # matmul (cost 10, 8 bytes) then two cheap ops (cost 1, 8 bytes each), three times
        costs = [10, 1, 1] * 3
        n = len(costs)
        return ls.Graph(range(n), [(v, v + 1) for v in range(n - 1)], dict(enumerate(costs)),
                        dict.fromkeys(range(n), 8))

    def test_cuts_end_at_the_expensive_nodes(self):
        g = self.block_chain()
        s = selective_cuts(g, 10)
        assert [sorted(L) for L in s.lower_sets] == [[0], [0, 1, 2, 3], [0, 1, 2, 3, 4, 5, 6],
                                                     list(range(9))]
        # the matmuls 3 and 6 end their segments and stay; the cheap ones between are dropped
        # and recomputed, each from the matmul before it (2 cost units a segment)
        assert s.schedule.recomputed == [4, 5, 1, 2] and s.schedule.recompute_cost == 4
        assert [sorted(L) for L in selective_cuts(g, 10, every=2).lower_sets] == [
            [0, 1, 2, 3], list(range(9))]
        assert len(selective_cuts(g, 11)) == 1          # nothing that expensive: [V]
        with pytest.raises(ls.ArgumentError, match="min_cost"):
            selective_cuts(g, 0)

    @given(dags(max_nodes=9))
    def test_solve_is_never_worse_than_the_family(self, g):
        plain = ls.schedule(g).peak
        least = ls.min_peak(g, "approx").schedule.peak
        for s in selective_family(g):
            assert s.schedule.peak >= least
            if s.schedule.peak <= plain:
                got = ls.solve(g, budget=s.schedule.peak, method="approx")
                assert got.schedule.recompute_cost <= s.schedule.recompute_cost
