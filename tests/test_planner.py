"""lowerset.solve / min_peak / pareto: budgets in whole-step device bytes."""

import math
import types
import unittest.mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lowerset as ls
from conftest import fan
from facts_strategies import graphs_with_facts
from lowerset import planner
from strategies import dags, examples


def _peak(s):
    return s.schedule.peak


@settings(max_examples=examples(0.5), deadline=None)
@given(st.data())
def test_budget_property(data):
    g = data.draw(st.one_of(graphs_with_facts(max_nodes=7), dags(max_nodes=7)), label="graph")
    pool_least = ls.pareto(g, "approx")[-1]
    # min_peak solves at the pool's least peak: the plan it finds (no more overhead, the same
    # peak) joins the cached front
    least = ls.min_peak(g, "approx")
    assert _peak(least) == _peak(pool_least)
    assert least.schedule.recompute_cost <= pool_least.schedule.recompute_cost
    front = ls.pareto(g, "approx")
    assert least is front[-1]
    # the front: overhead increasing, peak decreasing
    assert all(a.schedule.recompute_cost < b.schedule.recompute_cost and _peak(a) > _peak(b)
               for a, b in zip(front, front[1:]))
    lo = _peak(front[-1])
    # the least peak is at most that of [V] (no recomputation) and of Chen's sqrt(n)
    assert lo <= ls.schedule(ls.CanonicalStrategy(g, [set(g.labels)])).peak
    assert lo <= ls.baselines.chen_sqrtn(g).schedule.peak
    hi = ls.schedule(ls.CanonicalStrategy(g, [set(g.labels)])).peak
    budgets = sorted({lo, hi, *data.draw(st.lists(st.integers(lo, max(lo, hi)), max_size=4))})
    prev = None
    for b in budgets:
        s = ls.solve(g, budget=b, method="approx")
        assert _peak(s) <= b
        # a larger budget never costs more overhead
        assert prev is None or s.schedule.recompute_cost <= prev
        prev = s.schedule.recompute_cost
    # with the peak of [V] available, nothing needs recomputing
    assert ls.solve(g, budget=hi, method="approx").schedule.recompute_cost == 0
    if lo > 0:
        with pytest.raises(ls.InfeasibleBudgetError) as err:
            ls.solve(g, budget=lo - 1, method="approx")
        assert err.value.min_budget == lo


@settings(max_examples=examples(0.2), deadline=None)
@given(graphs_with_facts(max_nodes=7))
def test_exact_pool_holds_the_approximate_one(g):
    """The exact method searches more candidates: its front is nowhere above the approximate
    front (for every budget, overhead exact <= overhead approx)."""
    ex, ap = ls.pareto(g, "exact"), ls.pareto(g, "approx")
    assert _peak(ex[-1]) <= _peak(ap[-1])
    for s in ap:
        best = min(e.schedule.recompute_cost for e in ex if _peak(e) <= _peak(s))
        assert best <= s.schedule.recompute_cost


def _activation_peak(g, s):
    """The schedule peak of `s`'s lower sets over the paper's memory (activation_facts)."""
    view = g.with_facts(ls.activation_facts(g.facts))
    return ls.CanonicalStrategy(view, s.lower_sets).schedule.peak


@settings(max_examples=examples(0.3), deadline=None)
@given(graphs_with_facts(max_nodes=7))
def test_min_peak_of_activations(g):
    """measure="activations" plans on the paper's memory and returns the plan on `g`: its
    activation peak is at least the least over all lower-set sequences (exhaustive) and at most
    that of [V] and of Chen's sqrt(n)."""
    from lowerset.bruteforce import brute_schedule_points

    s = ls.min_peak(g, "exact", measure="activations")
    assert s.graph is g and s.schedule.peak == ls.schedule(s).peak
    view = g.with_facts(ls.activation_facts(g.facts))
    least = min(p for p, _, _ in brute_schedule_points(view))
    found = _activation_peak(g, s)
    assert least <= found
    assert found <= _activation_peak(g, ls.CanonicalStrategy(g, [set(g.labels)]))
    assert found <= _activation_peak(g, ls.baselines.chen_sqrtn(g))
    assert found <= _activation_peak(g, ls.min_peak(g, "approx", measure="activations"))


def test_min_peak_of_activations_leaves_out_parameters_and_workspace():
    # x -> 0 -> 1 (returned); node 0 takes a 1,000-byte parameter and needs 500 bytes of
    # workspace; backward 1 reads value 0, backward 0 reads x and the parameter only
    facts = ls.ExecutionFacts(
        nodes=(ls.NodeFacts(outputs=(10,), args=((-1, 0), (-2, 0)), reads_args=(0, 1),
                            grad_args=(False, True), output_views=(-1,), grad_views=(-1, -1),
                            forward_peak=500, plain_free_after=(-1,)),
               ls.NodeFacts(outputs=(10,), args=((0, 0),), reads_args=(0,),
                            grad_args=(True,), output_views=(-1,), grad_views=(-1,),
                            plain_free_after=(-1,))),
        forward_order=(0, 1), backward_order=(1, 0),
        externals=(("input", 4), ("param", 1000)), returned=((1, 0),), seeds=((1, 0),))
    g = ls.Graph([0, 1], [(0, 1)], {0: 1, 1: 1}, {0: 10, 1: 10}, facts=facts)
    s = ls.min_peak(g, measure="activations")
    # the input 4, values 0 and 1, the seed and 0's gradient
    assert _activation_peak(g, s) == 4 + 10 + 10 + 10 + 10
    # returned on g: the whole step peaks in backward 0 (resident 1,004, value 1, the seed,
    # 0's gradient and the parameter's gradient), above forward 0's 1,004 + 500 of workspace
    assert s.graph is g and s.schedule.peak == 1004 + 10 + 10 + 10 + 1000
    with pytest.raises(ls.ArgumentError, match="unknown measure 'bytes'"):
        ls.min_peak(g, measure="bytes")


def test_hand_checked_chain():
    # chain of 4 x 10 bytes, default facts (every backward reads its input and output):
    # [V] peaks at 4 values + seed + 2 gradients; dropping the first value saves one
    g = ls.Graph.chain(4, memory=10)
    plain = ls.schedule(g).peak
    assert plain == 70
    assert ls.solve(g, budget=70).schedule.recompute_cost == 0
    s = ls.solve(g, budget=69)
    assert s.schedule.peak <= 69 and s.schedule.recompute_cost >= 1
    assert s.schedule.recomputed


def test_float_budget_is_rounded_down():
    g = ls.Graph.chain(6, memory=10)
    lo = ls.min_peak(g).schedule.peak
    assert ls.solve(g, budget=lo + 0.99).schedule.peak == ls.solve(g, budget=lo).schedule.peak
    with pytest.raises(ls.InfeasibleBudgetError, match=r"bytes \(0\.000 GB\)"):
        ls.solve(g, budget=lo - 0.5)


def test_paper_model_is_the_eq2_dp():
    g = ls.Graph.chain(8, memory=10)
    for mode in ("time", "memory"):
        a = ls.solve(g, budget=90, mode=mode, model="paper")
        b = ls.dp.solve(g, 90, mode=mode)
        assert a.lower_sets == b.lower_sets and a.overhead == b.overhead
    assert ls.solve(g, model="paper").peak_memory == ls.min_budget(g)


class TestErrors:
    g = ls.Graph.chain(3, memory=10)

    @pytest.mark.parametrize("budget", ["1GB", b"1", [1], True])
    def test_budget_type(self, budget):
        with pytest.raises(ls.ArgumentTypeError, match="budget must be a number of bytes"):
            ls.solve(self.g, budget=budget)

    @pytest.mark.parametrize("budget", [math.nan, math.inf, -1, -0.5])
    def test_budget_value(self, budget):
        with pytest.raises(ls.ArgumentError, match="budget must be"):
            ls.solve(self.g, budget=budget)

    def test_other_arguments(self):
        with pytest.raises(ls.ArgumentTypeError, match="must be a lowerset.Graph"):
            ls.solve("x")
        with pytest.raises(ls.ArgumentError, match="unknown model"):
            ls.solve(self.g, model="eq2")
        with pytest.raises(ls.ArgumentError, match="memory-centric DP: use model='paper'"):
            ls.solve(self.g, mode="memory")
        with pytest.raises(ls.ArgumentError, match="unknown method"):
            ls.pareto(self.g, "greedy")
        with pytest.raises(ValueError):   # ArgumentError is a ValueError for callers
            ls.solve(self.g, budget=-1)

    def test_search_limits(self):
        fan = ls.Graph(list(range(20)), [(0, v) for v in range(1, 20)],
                       dict.fromkeys(range(20), 1), dict.fromkeys(range(20), 1))
        with pytest.raises(ls.SearchLimitError):
            ls.pareto(fan, "exact", max_lower_sets=100)
        with pytest.warns(ls.TimeLimitWarning, match="pareto reached its time limit"):
            front = ls.pareto(ls.Graph.chain(30), "exact", time_limit=1e-9)
        assert front[0].schedule.recompute_cost == 0    # [V] at least


def test_auto_method_is_contracted_up_to_max_lower_sets_then_approx():
    small, wide = fan(5), fan(17)      # 34 and 131,074 lower sets, no memoryless node
    assert ls.resolve_method(small, "auto") == "contracted"
    assert ls.resolve_method(small, "auto", max_lower_sets=34) == "contracted"
    assert ls.resolve_method(small, "auto", max_lower_sets=33) == "approx"
    assert ls.resolve_method(wide, "auto") == "approx"
    assert ls.resolve_method(wide, "exact") == ls.resolve_method(small, "exact") == "exact"
    # no node without memory: the contracted family is all lower sets, the plans exact's
    assert len(ls.contracted_lower_sets(small)) == ls.count_lower_sets(small)
    assert _front_figures(ls.pareto(small)) == _front_figures(ls.pareto(small, "exact"))
    assert all(a is b for a, b in zip(ls.pareto(small, max_lower_sets=33),
                                      ls.pareto(small, "approx", max_lower_sets=33)))
    # ... and as "approx" does where the contracted family is too large
    with pytest.raises(ls.SearchLimitError, match="max_lower_sets=50000"):
        ls.min_peak(wide, "exact")
    with pytest.raises(ls.SearchLimitError, match="memoryless nodes contracted"):
        ls.min_peak(wide, "contracted")
    least = ls.min_peak(wide)
    assert least.schedule.peak == ls.min_peak(wide, "approx").schedule.peak
    budget = (least.schedule.peak + ls.schedule(wide).peak) // 2
    s = ls.solve(wide, budget)
    assert s.schedule.peak <= budget
    assert s.lower_sets == ls.solve(wide, budget, method="approx").lower_sets
    assert ls.solve(wide, model="paper").peak_memory == ls.min_budget(wide, "approx")
    with pytest.raises(ls.ArgumentError, match="unknown method 'greedy'.*'auto'"):
        ls.resolve_method(small, "greedy")


def test_the_contracted_family_plans_as_exact_where_views_do_not_matter():
    """Blocks of a base and two branches, each a node, a view of it (no memory) and a node,
    joined: the contracted family keeps each view with the node it reads, and the planner's
    least peak and its plans at three budgets equal the exact family's."""
    edges, memory, prev = [], {}, None
    for b in range(4):
        base, x1, v1, y1, x2, v2, y2, join = (8 * b + i for i in range(8))
        edges += [(base, x1), (x1, v1), (v1, y1), (base, x2), (x2, v2), (v2, y2), (y1, join),
                  (y2, join)] + ([] if prev is None else [(prev, base)])
        memory.update({base: 40, x1: 24 + b, v1: 0, y1: 16, x2: 32, v2: 0, y2: 8, join: 40})
        prev = join
    g = ls.Graph(sorted(memory), edges, {v: 1 + v % 3 for v in memory}, memory)
    assert len(ls.contracted_lower_sets(g)) < ls.count_lower_sets(g)
    exact, contracted = ls.min_peak(g, "exact"), ls.min_peak(g, "contracted")
    assert contracted.schedule.peak == exact.schedule.peak
    plain = ls.schedule(g).peak
    for f in (0.9, 0.75, 0.6):
        b = int(exact.schedule.peak + f * (plain - exact.schedule.peak))
        assert (ls.solve(g, b, method="contracted").schedule.recompute_cost
                == ls.solve(g, b, method="exact").schedule.recompute_cost)


def test_planner_on_the_authors_graphs(cg_graph):
    """On each authors' graph (default facts): the plan fits its budget, and the least peak is
    below Chen's and [V]."""
    g = cg_graph
    front = ls.pareto(g, "approx")
    plain = ls.schedule(g).peak
    for f in (0.9, 0.75, 0.6):
        try:
            s = ls.solve(g, budget=f * plain, method="approx")
        except ls.InfeasibleBudgetError as e:
            assert e.min_budget == front[-1].schedule.peak > f * plain
            continue
        assert s.schedule.peak <= f * plain
    assert front[-1].schedule.peak < ls.baselines.chen_sqrtn(g).schedule.peak
    assert np.isfinite(front[-1].schedule.peak)


def _dp_plans(g, n_budgets):
    """The paper's DP plans, both modes and families, at `n_budgets` eq. (2) budgets spaced
    evenly from the least minimal budget to the eq. (2) peak of [V] (bytes)."""
    lo = min(ls.min_budget(g, "exact"), ls.min_budget(g, "approx"))
    hi = max(lo, ls.CanonicalStrategy(g, [set(g.labels)]).peak_memory)
    plans = []
    for b in sorted(set(np.linspace(lo, hi, n_budgets).astype(int).tolist())):
        for method in ("exact", "approx"):
            for mode in ("time", "memory"):
                try:
                    plans.append(ls.dp.solve(g, b, mode=mode, method=method))
                except ls.InfeasibleBudgetError:
                    pass   # b is below this family's minimal budget
    return plans


@settings(max_examples=examples(0.2), deadline=None)
@given(st.one_of(graphs_with_facts(max_nodes=7), dags(max_nodes=7, max_cost=50,
                                                        max_memory=100)))
def test_solve_is_never_worse_than_a_dp_plan_that_fits(g):
    """At the schedule peak B of any plan of the paper's DP (time- or memory-centric, either
    family, at any of 40 eq. (2) budgets), solve(B) recomputes no more than that plan."""
    for s in _dp_plans(g, 40):
        b = s.schedule.peak
        assert ls.solve(g, b).schedule.recompute_cost <= s.schedule.recompute_cost


def _front_figures(front):
    return [(s.segment_of_nodes().tolist(), s.schedule.recompute_cost, s.schedule.peak)
            for s in front]


@settings(max_examples=examples(0.3), deadline=None)
@given(st.one_of(graphs_with_facts(max_nodes=9), dags(max_nodes=9)))
def test_pool_threads_do_not_change_the_front(g):
    """The pool's DP passes run on a thread per core, each starting its deepening from what
    the others cached: the front (strategies, overheads, peaks) is that of one thread."""
    from lowerset import _limits

    fronts = []
    for cores in (1, 2, 3):
        orig, _limits.cores = _limits.cores, lambda c=cores: c
        try:
            fronts.append(_front_figures(ls.pareto(g.with_facts(g.facts), "exact")))
        finally:
            _limits.cores = orig
    assert fronts[0] == fronts[1] == fronts[2]


def test_passes_are_handed_out_in_order():
    """A chain's first pass runs alone; then a pass whose predecessor is done comes first,
    time-centric before memory-centric, and one whose predecessor still runs comes last."""
    from lowerset.planner import _Passes

    time_chain = [("approx", "time", b) for b in (1, 2, 3)]
    passes = _Passes([time_chain, [("approx", "memory", 1)], [("approx", "memory", 2)]])
    assert passes.take() == (0, 0)
    assert passes.take() == (1, 0)   # the time chain waits for its first pass
    passes.finish(0, 0)
    assert passes.take() == (0, 1)
    assert passes.take() == (2, 0)   # before the time pass whose predecessor runs
    assert passes.take() == (0, 2)
    assert passes.take() is None


def test_a_thread_waits_for_a_chains_first_pass():
    import threading

    from lowerset.planner import _Passes

    passes = _Passes([[("approx", "time", 1), ("approx", "time", 2)]])
    assert passes.take() == (0, 0)
    got = []
    t = threading.Thread(target=lambda: got.append(passes.take()))
    t.start()
    t.join(0.2)
    assert t.is_alive() and not got
    passes.finish(0, 0)
    t.join(5)
    assert got == [(0, 1)]
    passes.stop()
    assert passes.take() is None


def test_an_error_in_a_pass_stops_the_others(monkeypatch):
    """The first pass of a chain fails: the thread waiting for it starts nothing, and the
    error is raised."""
    from lowerset import _limits, planner

    calls = []

    def failing(G, fam, mode, b, max_lower_sets, deadline):
        calls.append(b)
        raise ls.SearchLimitError("out of memory", limit="memory")

    monkeypatch.setattr(planner, "_paper", failing)
    monkeypatch.setattr(_limits, "cores", lambda: 2)
    chain = [("approx", "time", b) for b in (10, 20, 30)]
    with pytest.raises(ls.SearchLimitError, match="out of memory"):
        planner._run_chains(ls.Graph.chain(4, memory=10), [chain], 10, planner._Deadline(None))
    assert calls == [10]


def test_sharing_memory_divides_the_cap():
    from lowerset import _limits

    whole = _limits.memory_cap()
    if whole is None:
        pytest.skip("the available memory cannot be told here")
    with _limits.sharing_memory(4):
        share = _limits.memory_cap()
    assert abs(share - whole / 4) < 0.05 * whole   # the available memory moves a little
    assert abs(_limits.memory_cap() - whole) < 0.05 * whole


def test_threads_variable(monkeypatch):
    """$LOWERSET_THREADS sets the planner's threads; a bad value is a clear error."""
    from lowerset import _limits

    g = ls.Graph.chain(12, memory=10)
    monkeypatch.setenv("LOWERSET_THREADS", "1")
    assert _limits.cores() == 1
    one = _front_figures(ls.pareto(g.with_facts(g.facts), "exact"))
    monkeypatch.setenv("LOWERSET_THREADS", "3")
    assert _limits.cores() == 3
    assert _front_figures(ls.pareto(g.with_facts(g.facts), "exact")) == one
    for bad in ("0", "-2", "two", "1.5"):
        monkeypatch.setenv("LOWERSET_THREADS", bad)
        with pytest.raises(ls.ArgumentError, match="LOWERSET_THREADS"):
            ls.pareto(g.with_facts(g.facts), "exact")


def _inception_like():
    from pathlib import Path

    return ls.load_graph(Path(__file__).resolve().parent / "data" / "inception_like.json")


def test_solve_runs_the_fronts_local_search_beside_its_search(monkeypatch):
    """With two threads, solve's search at the budget runs while pareto's local search runs
    on another thread (planner._front_and_search); the plans are those of one thread, which
    runs the two in turn."""
    import threading

    from lowerset import _limits, planner

    least = ls.min_peak(_inception_like(), "exact").schedule.peak
    plain = ls.schedule(_inception_like()).peak
    real, threads = planner._pareto, []

    def pareto_recorded(*args):
        threads.append(threading.current_thread() is threading.main_thread())
        return real(*args)

    monkeypatch.setattr(planner, "_pareto", pareto_recorded)
    plans = {}
    for cores in (1, 2):
        monkeypatch.setattr(_limits, "cores", lambda: cores)
        for f in (0.1, 0.5):
            s = ls.solve(_inception_like(), least + f * (plain - least), method="exact")
            plans[cores, f] = (np.asarray(s.segment_of_nodes()).tolist(), s.schedule.peak,
                               s.schedule.recompute_cost)
    assert threads == [True, True, False, False]   # one thread: in turn; two: beside it
    assert all(plans[1, f] == plans[2, f] for f in (0.1, 0.5))
    assert plans[2, 0.1] != plans[2, 0.5]


def test_an_error_in_solves_search_stops_the_local_search_beside_it(monkeypatch):
    import threading
    import time

    from lowerset import _limits, planner

    monkeypatch.setattr(_limits, "cores", lambda: 2)
    started, steps = threading.Event(), []

    def endless_refine(G, s, budget=None, deadline=None):
        started.set()
        for _ in range(1000):   # 10 s unless `deadline` raises
            deadline()
            steps.append(1)
            time.sleep(0.01)
        return s

    def failing_search(*args):
        started.wait(5)
        raise RuntimeError("the search failed")

    monkeypatch.setattr(planner, "refine", endless_refine)
    monkeypatch.setattr(planner, "_bisect", failing_search)
    g = _inception_like()
    least = ls.pareto(_inception_like(), "approx")[-1].schedule.peak
    start = time.perf_counter()
    with pytest.raises(RuntimeError, match="the search failed"):
        ls.solve(g, least + (ls.schedule(g).peak - least) // 2, method="exact")
    assert time.perf_counter() - start < 5 and len(steps) < 300
    assert ("exact", ls.DEFAULT_MAX_LOWER_SETS) not in g.__dict__.get("_pareto_cache", {})


@pytest.mark.parametrize("share", [ls.dp._JUMP_SHARE, 1.0])
def test_an_exact_call_that_starts_close_below_its_bound_runs_one_pass_at_it(share):
    """An exact DP call of solve's search whose deepening would start at twice its floor, at
    least dp._JUMP_SHARE of its bound but below the optimum, runs one pass at the bound instead
    of a failing pass and a second one (share 1.0: no jump); its front is the same either way:
    that of the deepening with the same floor and bound."""
    g = ls.Graph.chain(24, cost=10, memory=10)
    never, mls = planner._Deadline(None), ls.DEFAULT_MAX_LOWER_SETS
    b = ls.min_budget(g)
    optimum = ls.dp.solve(g, b).overhead
    floor = int(0.45 * optimum)
    # on a chain the pruned family is the whole one: the bound is the optimum
    assert planner._paper(g, "approx", "time", b, mls, never).overhead == optimum >= 20
    # a plan at a larger budget sets the floor: twice it lies 10% below the optimum
    g.__dict__["_paper_cache"][("front", "exact", 2 * b, mls)] = [
        types.SimpleNamespace(overhead=floor)]
    real, caps = ls.dp._run_front_dp, []

    def counted(G, fam, budget, maximize, deadline, tcap, bound=None):
        caps.append(tcap)
        return real(G, fam, budget, maximize, deadline, tcap, bound)

    with unittest.mock.patch.object(ls.dp, "_JUMP_SHARE", share), \
            unittest.mock.patch.object(ls.dp, "_run_front_dp", counted):
        front = planner._paper_time(g, "exact", b, mls, never)
    assert caps == ([optimum] if share < 1 else [2 * floor, optimum])
    with unittest.mock.patch.object(ls.dp, "_JUMP_SHARE", 1.0):   # the deepening alone
        deepened = ls.dp.time_front(g.with_facts(g.facts), b, overhead_bound=optimum,
                                    overhead_floor=floor)
    assert [(s.overhead, s.lower_sets) for s in front] == \
        [(s.overhead, s.lower_sets) for s in deepened]


@pytest.mark.parametrize("seconds, reserve, probes, skipped", [
    ((3, 3, 3, 3, 3), True, 2, True),       # a third call would leave 1 s: not made
    ((3, 3, 3, 3, 3), False, 3, False),     # runs into the limit in the fourth
    ((5, 1, 1, 1, 1), True, 5, False),      # after the first call, 2.5 s a call are left
    ((7, 1, 1, 1, 1), True, 1, True),       # after the first call, 3.5 s are not
])
def test_the_exhaustive_search_leaves_the_local_search_time(seconds, reserve, probes, skipped,
                                                            monkeypatch):
    """Under a time limit, solve's search over the exhaustive family does not start a DP call
    that, at the last one's pace (half the first one's), would leave the local search after it
    less than that pace (planner._leaves_local_search); without `reserve` it runs into the
    limit. A fake clock: each call takes the given seconds, the limit is 10 s, no plan
    fits."""
    from lowerset import _limits

    now = [0.0]
    monkeypatch.setattr(_limits, "clock", lambda: now[0])
    deadline = planner._Deadline(10.0)
    calls = []

    def paper_time(G, family, b, mls, deadline):
        took = seconds[len(calls)]
        if now[0] + took > deadline.limit:
            now[0] = deadline.limit + 0.1
            raise ls.SearchLimitError("time limit passed", limit="time_limit")
        now[0] += took
        calls.append(b)
        plan = types.SimpleNamespace(overhead=10, peak_memory=b)
        plan.__dict__["_point"] = (10, 1000)
        return [plan]

    monkeypatch.setattr(planner, "_paper_time", paper_time)
    found, ok, _ = planner._bisect_family(None, 88, "contracted", 10, 10_000, 4, 1, deadline,
                                          start=1000, reserve=reserve)
    assert len(calls) == probes and not found and ok is None
    assert any("leaving the local search time" in c for c in deadline.cut) == skipped
    if skipped or not reserve:   # the call says it was cut, and how
        how = "skipped search steps that would have run past" if skipped else "reached"
        with pytest.warns(ls.TimeLimitWarning, match=f"solve {how} its time limit of 10 s"):
            planner._warn_if_cut(deadline, "solve", ls.Graph.chain(3), None)
    else:
        assert not deadline.cut
