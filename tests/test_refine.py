"""lowerset.refine: the local search ends at a local optimum of its moves, checked by a naive
enumeration of the neighbouring lower-set sequences with node sets and the naive schedule."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lowerset as ls
from lowerset.refine import refine

from facts_strategies import canonical_strategies, graphs_with_facts
from schedule_reference import events as reference_events
from strategies import dags


def _measure(strategy):
    """(peak bytes, recomputed cost units) of `strategy` by the naive schedule."""
    g = strategy.graph
    evs, _, highs = reference_events(strategy)
    peak = max([g.facts.resident] + [int(h) for h in highs])
    cost = sum(int(g.cost[g.index[e.node]]) for e in evs if e.kind == "recompute")
    return peak, cost


def _key(budget, peak, cost):
    if budget is None:
        return (peak, cost)
    return (0, cost, peak) if peak <= budget else (1, peak, cost)


def _neighbours(strategy):
    """Every sequence one move away, written with sets: a node to the segment before or after
    its own or to a new segment of its own beside it; those that are not lower-set sequences
    are left out."""
    segs = [set(s) for s in strategy.segments]
    out = []
    for i, seg in enumerate(segs):
        for v in seg:
            rest = [set(s) for s in segs]
            rest[i].discard(v)
            cands = []
            if i > 0:
                cands.append(rest[:i - 1] + [rest[i - 1] | {v}] + rest[i:])
            if i + 1 < len(segs):
                cands.append(rest[:i + 1] + [rest[i + 1] | {v}] + rest[i + 2:])
            if len(seg) > 1:
                cands.append(rest[:i] + [{v}] + rest[i:])
                cands.append(rest[:i + 1] + [{v}] + rest[i + 1:])
            out += cands
    valid = []
    for cand in out:
        cand = [s for s in cand if s]
        lower = [set().union(*cand[:j + 1]) for j in range(len(cand))]
        try:
            valid.append(ls.CanonicalStrategy(strategy.graph, lower))
        except (ls.NotALowerSetError, ls.StrategyError):
            pass
    return valid


def _check_local_optimum(g, start, budget):
    r = refine(g, start, budget)
    again = ls.CanonicalStrategy(g, r.lower_sets)   # a valid lower-set sequence
    got = _measure(again)
    assert got == (r.schedule.peak, r.schedule.recompute_cost)
    assert _key(budget, *got) <= _key(budget, *_measure(start))
    best = min((_key(budget, *_measure(s)) for s in _neighbours(again)), default=None)
    assert best is None or best >= _key(budget, *got)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_refine_ends_at_a_local_optimum_with_traced_facts(data):
    g = data.draw(graphs_with_facts(min_nodes=2, max_nodes=7))
    start = data.draw(canonical_strategies(g))
    budget = data.draw(st.none() | st.integers(0, ls.schedule(g).peak))
    _check_local_optimum(g, start, budget)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_refine_ends_at_a_local_optimum_with_default_facts(data):
    g = data.draw(dags(min_nodes=2, max_nodes=8, max_cost=20, max_memory=50))
    start = data.draw(canonical_strategies(g))
    budget = data.draw(st.none() | st.integers(0, 2 * int(g.memory.sum())))
    _check_local_optimum(g, start, budget)


def test_refine_by_hand():
    # chain 0 -> 1 -> 2 -> 3 of 10 bytes each: the schedules of its eight lower-set sequences
    # peak at 70 bytes except the two that drop node 0 alone (60 bytes)
    g = ls.Graph.chain(4, memory=10)
    V = set(range(4))
    for seq in ([V], [{0}, V], [{0, 1, 2}, V], [{0}, {0, 1}, V], [{0}, {0, 1, 2}, V],
                [{0}, {0, 1}, {0, 1, 2}, V]):
        assert ls.CanonicalStrategy(g, seq).schedule.peak == 70
    for seq in ([{0, 1}, V], [{0, 1}, {0, 1, 2}, V]):
        assert ls.CanonicalStrategy(g, seq).schedule.peak == 60
    # from [{0, 1, 2}, V] (70 bytes, recomputes 0 and 1) moves lead to one of them
    r = refine(g, ls.CanonicalStrategy(g, [{0, 1, 2}, V]))
    assert r.lower_sets[0] == {0, 1} and len(r.lower_sets) <= 3
    assert (r.schedule.peak, r.schedule.recomputed) == (60, [0])
    # from [V] every single move keeps 70 bytes: a local optimum, the search's limit
    assert refine(g, ls.CanonicalStrategy(g, [V])).lower_sets == [V]


def test_refine_returns_the_start_when_nothing_improves():
    g = ls.Graph.chain(3, memory=10)
    s = ls.min_peak(g)
    assert refine(g, s) is s


def test_refine_stops_when_the_deadline_raises():
    g = ls.Graph.chain(30, memory=10)

    def deadline():
        raise ls.SearchLimitError("stop", limit="time_limit")

    with pytest.raises(ls.SearchLimitError):
        refine(g, ls.CanonicalStrategy(g, [set(range(30))]), deadline=deadline)


@pytest.mark.parametrize("bad, err", [(-1, ls.ArgumentError), (float("nan"), ls.ArgumentError)])
def test_refine_rejects_bad_budgets(bad, err):
    g = ls.Graph.chain(3)
    with pytest.raises(err):
        refine(g, ls.CanonicalStrategy(g, [set(range(3))]), bad)


def test_refine_respects_max_evaluations():
    g = ls.Graph.chain(40, memory=10)
    start = ls.CanonicalStrategy(g, [set(range(39)), set(range(40))])   # recomputes 38 nodes

    def key(s):
        return s.schedule.peak, s.schedule.recompute_cost

    few = refine(g, start, max_evaluations=3)
    assert key(refine(g, start)) < key(few) < key(start)
    with pytest.raises(ls.ArgumentError):
        refine(g, start, max_evaluations=0)


def test_exact_planner_is_at_least_its_pool_at_min_peak():
    # the exact planner refines; on a ladder graph its least peak and its overhead there are
    # at most those of the approximate planner, which does not
    n = 24
    g = ls.Graph(range(n), [(i, i + 1) for i in range(n - 1)], {i: 1 + i % 3 for i in range(n)},
                 {i: 1 + (7 * i) % 11 for i in range(n)})
    a, e = ls.min_peak(g, "approx"), ls.min_peak(g, "exact")
    assert (e.schedule.peak, e.schedule.recompute_cost) <= (a.schedule.peak,
                                                           a.schedule.recompute_cost)
