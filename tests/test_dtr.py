"""lowerset.dtr: DTR simulated over a training step, checked by an independent replay
(tests/dtr_replay.py), against the schedule where it must agree, and on unit chains."""

import math
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, note
from hypothesis import strategies as st

import lowerset as ls
from dtr_replay import replay
from facts_strategies import graphs_with_facts
from lowerset.baselines._dtr_heuristics import HEURISTICS


def keep_all(g):
    """The schedule with nothing dropped: every array freed after its last read."""
    return ls.schedule(ls.CanonicalStrategy(g, [set(g.labels)]))


def check(s, budget):
    """The replay agrees with the schedule's fold; the budget holds; the counts add up."""
    timeline, highs = replay(s)
    assert timeline.tolist() == s.timeline.tolist()
    assert highs.tolist() == s.fold.highs.tolist()
    assert s.peak <= budget
    remats = Counter(e.node for e in s.events if e.kind == "rematerialize")
    assert remats == s.rematerializations
    assert s.recompute_cost == sum(int(s.graph.cost[s.graph.index[v]]) * c
                                   for v, c in remats.items())


def unit_chain(n, mb=1_000_000):
    """n unit-cost layers of `mb` bytes; each backward reads its input only (DTR's linear
    feedforward model; simrd's uniform_linear)."""
    g = ls.Graph.chain(n, memory=mb)
    F = g.facts
    nodes = tuple(ls.NodeFacts(**{**nf.to_dict(), "args": nf.args, "reads_outputs": ()})
                  for nf in F.nodes)
    return g.with_facts(ls.ExecutionFacts(**{**F.__dict__, "nodes": nodes}))


class TestReplay:
    @given(graphs_with_facts(), st.floats(0, 1.1), st.sampled_from(HEURISTICS))
    def test_random_facts(self, g, frac, heuristic):
        full = keep_all(g)
        budget = int(full.resident + frac * (full.peak - full.resident))
        note(f"budget {budget}, no-drop peak {full.peak}")
        try:
            s = ls.dtr(g, budget, heuristic)
        except ls.InfeasibleBudgetError as e:
            assert e.method == "dtr" and "node" in e.reason and "bytes" in e.reason
            assert budget < full.peak
            return
        check(s, budget)
        if budget >= full.peak:
            assert s.events == full.events

    @pytest.mark.parametrize("heuristic", HEURISTICS)
    def test_authors_graphs_at_tight_budgets(self, cg_graph, heuristic):
        if cg_graph.n > 200:
            pytest.skip("the three largest graphs run in examples/bench_dtr.py")
        full = keep_all(cg_graph)
        least = ls.min_peak(cg_graph, "approx").schedule.peak
        budget = least + (full.peak - least) // 4
        check(ls.dtr(cg_graph, budget, heuristic), budget)


class TestAgreesWithTheSchedule:
    def test_no_eviction_above_the_plain_peak(self, cg_graph):
        plain = ls.schedule(cg_graph)
        s = ls.dtr(cg_graph, plain.peak)
        assert s.recompute_cost == 0 and not s.rematerializations and s.evictions == 0
        # DTR frees an array after its last read; the plain step of the authors' graphs
        # (Chainer, default facts) keeps every value until the step ends
        assert s.events == keep_all(cg_graph).events
        assert s.peak <= plain.peak

    @pytest.mark.parametrize("n", [2, 16, 100])
    def test_equals_the_plain_peak_where_the_plain_step_frees_at_last_read(self, n):
        g = ls.Graph.chain(n, memory=8)
        assert ls.dtr(g, ls.schedule(g).peak).peak == ls.schedule(g).peak

    def test_hand_computed_chain(self):
        g = ls.Graph.chain(4, memory=10)
        s = ls.dtr(g, 60)
        kinds = [(e.kind, e.node) for e in s.events]
        # at 60 bytes the backward of 2 (reads 1, 2; makes a gradient) needs 0 evicted
        assert ("evict", 0) in kinds and ("rematerialize", 0) in kinds
        assert s.peak == 60 and s.rematerializations == {0: 1}
        check(s, 60)


class TestUnitChains:
    """DTR's linear feedforward result: about 2 sqrt(N) arrays, O(N) rematerializations."""

    @pytest.mark.parametrize("n", [16, 36, 64, 100, 196, 400])
    def test_linear_rematerializations(self, n):
        g = unit_chain(n)
        arrays = math.ceil(2 * math.sqrt(n)) + 1   # + the seed gradient the caller holds
        s = ls.dtr(g, arrays * 1_000_000)
        assert s.recompute_cost <= 2 * n
        check(s, arrays * 1_000_000)


class TestFoldPieces:
    """The fold's pieces a runtime uses (fold_need, fold_compact) against the plain fold."""

    def test_compact_and_need_leave_the_timeline_as_it_is(self):
        from lowerset import _schedule_kernels as k
        from lowerset.scheduling import EventFold

        g = unit_chain(64)
        s = ls.dtr(g, 9_000_000)
        kind, node, nbytes, optr, oidx = s.arrays
        fold, half = EventFold(g), len(kind) // 2
        timeline = [fold.apply(kind[:half], node, nbytes, optr, oidx)[0]]
        fold._st = k.fold_compact(fold._st, 8)
        assert fold._st[7][1] < half and fold.used == timeline[0][-1]
        i = half
        while i < len(kind):  # one event at a time: the need of the next, then the event
            need = fold.need(kind[i:i + 1], node[i:], nbytes[i:], optr[i:], oidx)
            t, h = fold.apply(kind[i:i + 1], node[i:], nbytes[i:], optr[i:], oidx)
            assert h[0] - timeline[-1][-1] == need
            timeline.append(t)
            i += 1
        assert np.concatenate(timeline).tolist() == s.timeline.tolist()


class TestErrors:
    def test_budget_below_what_one_function_needs(self):
        g = ls.Graph.chain(4, memory=10)
        with pytest.raises(ls.InfeasibleBudgetError, match=r"node \d: it needs \d+ bytes"):
            ls.dtr(g, 35)

    def test_thrashing(self):
        g = unit_chain(64)
        with pytest.raises(ls.InfeasibleBudgetError, match="thrashes"):
            ls.dtr(g, 9_000_000, max_overhead=0.5)

    def test_arguments(self):
        g = ls.Graph.chain(3)
        with pytest.raises(ls.ArgumentError, match="heuristic"):
            ls.dtr(g, 100, heuristic="random")
        with pytest.raises(ls.ArgumentError, match="budget"):
            ls.dtr(g, -1)
        with pytest.raises(ls.ArgumentTypeError):
            ls.dtr("cg_vgg19.txt", 100)
        with pytest.raises(ls.ArgumentError, match="max_overhead"):
            ls.dtr(g, 100, max_overhead=0)


def test_pinned_and_stochastic_are_respected():
    """A pinned function never runs twice and a dropout mask is never evicted, even when
    evicting them would let the step fit."""
    n = 8
    g = ls.Graph.chain(n, memory=10)
    F = g.facts
    nodes = list(F.nodes)
    nodes[2] = ls.NodeFacts(**{**nodes[2].to_dict(), "args": nodes[2].args, "pinned": True})
    nodes[4] = ls.NodeFacts(**{**nodes[4].to_dict(), "args": nodes[4].args, "state": 10,
                               "stochastic": True})
    g = g.with_facts(ls.ExecutionFacts(**{**F.__dict__, "nodes": tuple(nodes)}))
    for budget in range(keep_all(g).peak, 0, -10):
        try:
            s = ls.dtr(g, budget)
        except ls.InfeasibleBudgetError:
            break
        check(s, budget)
        assert 2 not in s.rematerializations
        assert not any(e.kind == "evict_state" for e in s.events)
    assert budget < keep_all(g).peak
