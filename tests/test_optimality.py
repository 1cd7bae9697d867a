"""lowerset.optimum: the canonical MILP against the exhaustive search over every lower-set
sequence (lowerset.bruteforce, which schedules each distinct drop set), the general MILP never
above it. Needs highspy (the optimum extra); skipped without it."""

from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, note, settings
from hypothesis import strategies as st

import lowerset as ls
from facts_strategies import graphs_with_facts
from lowerset.bruteforce import brute_schedule_points
from strategies import dags, examples

pytest.importorskip("highspy", reason="lowerset.optimum needs highspy (pip install "
                    "'lowerset[optimum]')")


def exhaustive(g):
    """(least peak, least cost at it, [(peak, cost)]) over every lower-set sequence."""
    points = [(p, c) for p, c, _ in brute_schedule_points(g)]
    least = min(p for p, _ in points)
    return least, min(c for p, c in points if p == least), points


def check_against_exhaustive(g, fraction):
    least, tie, points = exhaustive(g)
    best = ls.optimum(g)
    note(f"exhaustive {least}/{tie}, canonical {best}")
    assert best.status == "optimal"
    assert (best.peak, best.recompute_cost, best.lower_bound) == (least, tie, least)
    sched = best.strategy.schedule
    assert (sched.peak, sched.recompute_cost) == (least, tie)
    general = ls.optimum(g, model="general")
    assert general.status == "optimal"
    assert general.peak <= least
    assert general.peak < least or general.recompute_cost <= tie
    top = max(p for p, _ in points)
    budget = int(least + fraction * (top - least))
    want = min(c for p, c in points if p <= budget)
    at = ls.optimum(g, budget)
    assert at.status == "optimal" and at.recompute_cost == want == at.lower_bound
    assert at.strategy.schedule.peak == at.peak <= budget
    assert at.strategy.schedule.recompute_cost == want
    gen = ls.optimum(g, budget, model="general")
    assert gen.recompute_cost <= want and gen.peak <= budget


@settings(max_examples=examples(0.3), deadline=None)
@given(dags(max_nodes=7, max_cost=50, max_memory=100), st.floats(0, 1))
def test_canonical_is_the_exhaustive_optimum_on_random_dags(g, fraction):
    check_against_exhaustive(g, fraction)


@settings(max_examples=examples(0.4), deadline=None)
@given(graphs_with_facts(max_nodes=7), st.floats(0, 1))
def test_canonical_is_the_exhaustive_optimum_with_random_facts(g, fraction):
    """Views, in-place writes, state (stochastic or not), pinned nodes, workspace, held
    outputs, several outputs and seeds, both ways of summing gradients."""
    check_against_exhaustive(g, fraction)


@settings(max_examples=examples(0.3), deadline=None)
@given(graphs_with_facts(max_nodes=7, grads_at_start=True), st.floats(0, 1))
def test_canonical_is_the_exhaustive_optimum_with_gradients_at_start(g, fraction):
    """Gradient accumulation (``grads_at_start``): the models take the gradients' bytes from
    the schedule's own fold, so the resident gradients and their sums count as it counts them."""
    assume(g.facts.grads_at_start)
    check_against_exhaustive(g, fraction)


def test_chain_by_hand():
    # chain 0 -> 1 -> 2 -> 3 of 10 bytes, default facts: [V] peaks at 70 (four values, the
    # seed and two gradients); dropping value 0 and recomputing it (1 cost unit) gives 60;
    # nothing gives less (backward 1 reads values 0 and 1 beside 3, the seed, two gradients)
    g = ls.Graph.chain(4, memory=10)
    best = ls.optimum(g)
    assert (best.peak, best.recompute_cost, best.status) == (60, 1, "optimal")
    assert best.strategy.schedule.recomputed == [0]
    assert ls.optimum(g, 70).recompute_cost == 0
    with pytest.raises(ls.InfeasibleBudgetError) as err:
        ls.optimum(g, 59)
    assert err.value.min_budget == 60
    with pytest.raises(ls.InfeasibleBudgetError, match="60 bytes"):
        ls.optimum(g, 59, model="general")


def test_general_recomputes_where_no_canonical_strategy_can():
    # a -> c and b -> d, run in the order a, b, c, d; c and d are returned. To drop a value a
    # canonical strategy puts it in one segment with its consumers, not the last one: a with c
    # and b with d make two segments, one of them last, so it drops a or b, never both (and
    # here neither pays). A general schedule frees both after their consumers' forward and
    # recomputes each for its backward
    g = ls.Graph(["a", "b", "c", "d"], [("a", "c"), ("b", "d")],
                 dict.fromkeys("abcd", 1), {"a": 50, "b": 10, "c": 50, "d": 10})
    canon, gen = ls.optimum(g), ls.optimum(g, model="general")
    assert (canon.peak, canon.recompute_cost) == (240, 0) == exhaustive(g)[:2]
    assert (gen.peak, gen.recompute_cost) == (230, 2)
    assert gen.recomputed[g.index["a"]] == gen.recomputed[g.index["b"]] == 1


def test_time_limit_and_size():
    g = ls.Graph.chain(12, memory=10)
    best = ls.optimum(g, time_limit=60)
    assert best.status == "optimal" and best.size[0] > 0 and best.seconds > 0
    assert best.peak == best.strategy.schedule.peak


@pytest.mark.parametrize("kw, err, match", [
    ({"model": "checkmate"}, ls.ArgumentError, "unknown model 'checkmate'"),
    ({"budget": -1}, ls.ArgumentError, "budget"),
    ({"budget": "1GB"}, ls.ArgumentTypeError, "budget"),
    ({"time_limit": 0}, ls.ArgumentError, "time_limit"),
])
def test_errors(kw, err, match):
    with pytest.raises(err, match=match):
        ls.optimum(ls.Graph.chain(3), **kw)
    with pytest.raises(ls.ArgumentTypeError, match="lowerset.Graph"):
        ls.optimum("graph")


def test_recomputed_counts_runs_per_node():
    g = ls.Graph.chain(5, memory=10)
    gen = ls.optimum(g, model="general")
    assert gen.recomputed.shape == (5,) and gen.recomputed.dtype == np.int64
    assert int((gen.recomputed * g.cost).sum()) == gen.recompute_cost


@settings(max_examples=examples(0.2), deadline=None)
@given(st.one_of(graphs_with_facts(max_nodes=6), dags(max_nodes=6, max_cost=50, max_memory=100)),
       st.floats(0, 1))
def test_coarse_relaxation(g, fraction):
    """The coarse canonical model reaches the exhaustive optimum through its cuts; the coarse
    general model bounds the fine one from below."""
    least, tie, points = exhaustive(g)
    best = ls.optimum(g, coarse=True)
    assert best.coarse and best.status == "optimal"
    assert (best.peak, best.recompute_cost) == (least, tie)
    budget = int(least + fraction * (max(p for p, _ in points) - least))
    at = ls.optimum(g, budget, coarse=True)
    assert at.recompute_cost == min(c for p, c in points if p <= budget)
    bound = ls.optimum(g, model="general", coarse=True)
    assert bound.status == "bound" and bound.peak is None
    assert bound.lower_bound <= ls.optimum(g, model="general").peak


@pytest.mark.slow
def test_inception_like_optimum():
    # the traced InceptionLike step of tests/data (33 functions): the planner's least peak is
    # the optimum over every lower-set sequence (about 30 s of HiGHS)
    g = ls.load_graph(Path(__file__).resolve().parent / "data" / "inception_like.json")
    best = ls.optimum(g)
    assert best.status == "optimal" and (best.peak, best.recompute_cost) == (3159944, 56)
    assert ls.min_peak(g).schedule.peak == best.peak
