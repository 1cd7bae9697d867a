"""Chen et al.'s baselines on articulation cuts (lowerset.baselines)."""

import networkx as nx
import pytest
from hypothesis import given

import lowerset as ls
from lowerset.baselines import articulation_cuts, chen_greedy, chen_greedy_sweep, chen_sqrtn

from strategies import dags


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


@given(dags(max_nodes=9))
def test_strategies_are_costed_by_the_shared_model(g):
    for s in (chen_sqrtn(g), chen_greedy(g, 0), chen_greedy_sweep(g)):
        ref = ls.CanonicalStrategy(g, s.lower_sets)
        assert (s.overhead, s.peak_memory) == (ref.overhead, ref.peak_memory)
        assert s.peak_memory >= ls.min_budget(g)


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
    with pytest.raises(ValueError, match="n_segments"):
        chen_sqrtn(g, n_segments=0)
