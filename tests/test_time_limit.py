"""The planner's time limit: a call that reaches it returns the best plan found so far and
says so (TimeLimitWarning naming the steps it cut); nothing it cut is cached as final."""

import sys
import time
import warnings
from pathlib import Path

import pytest

import lowerset as ls
from lowerset import planner

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _graph(depth=40):
    if str(EXAMPLES) not in sys.path:
        sys.path.insert(0, str(EXAMPLES))
    import block_graphs

    return block_graphs.build("inception", depth)


def test_default_time_limit_grows_with_the_graph():
    small, big = ls.Graph.chain(100), ls.Graph.chain(10_000)
    assert ls.default_time_limit(small) == planner.DEFAULT_SECONDS == 8.0
    assert ls.default_time_limit(big) == pytest.approx(8.0 + 0.0067 * 7500)   # 58 s
    assert planner._limit(big, "default", "exact") is None     # exact searches to the end
    assert planner._limit(big, "default", "contracted") == ls.default_time_limit(big)
    assert planner._limit(big, None, "approx") is None
    with pytest.raises(ls.ArgumentError, match="time_limit"):
        planner._limit(big, -1.0, "approx")


def _timed(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        start = time.perf_counter()
        out = fn()
        seconds = time.perf_counter() - start
    cut = [w for w in caught if issubclass(w.category, ls.TimeLimitWarning)]
    return out, seconds, cut


@pytest.mark.parametrize("call", ["min_peak", "solve", "pareto"])
def test_a_call_at_its_limit_returns_the_best_plan_found(call):
    g = _graph()
    plain = ls.schedule(g).peak
    budget = int(0.8 * plain)
    run = {"min_peak": lambda: ls.min_peak(g, "exact", time_limit=0.2),
           "solve": lambda: ls.solve(g, budget, method="exact", time_limit=0.2),
           "pareto": lambda: ls.pareto(g, "exact", time_limit=0.2)[-1]}[call]
    plan, seconds, cut = _timed(run)
    assert seconds < 0.2 + 1.0      # the step in progress ends within about a DP chunk
    assert len(cut) == 1
    message = str(cut[0].message)
    assert f"{call} reached its time limit of 0.2 s" in message
    assert "steps cut:" in message and "time_limit=None" in message
    assert isinstance(plan, ls.CanonicalStrategy) and plan.schedule.peak <= plain
    if call == "solve":
        assert plan.schedule.peak <= budget
    # nothing cut is cached: the search without a limit runs again, to the end, no warning
    whole, _, again = _timed({"min_peak": lambda: ls.min_peak(g, "exact"),
                              "solve": lambda: ls.solve(g, budget, method="exact"),
                              "pareto": lambda: ls.pareto(g, "exact")[-1]}[call])
    assert again == []
    if call == "solve":
        assert whole.schedule.recompute_cost <= plan.schedule.recompute_cost
    else:
        assert whole.schedule.peak <= plan.schedule.peak


def test_no_plan_within_the_budget_before_the_limit_is_an_error_not_infeasible():
    g = _graph()
    least = ls.min_peak(_graph(), "exact").schedule.peak
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ls.TimeLimitWarning)
        with pytest.raises(ls.SearchLimitError, match="before a plan within the budget") as e:
            ls.solve(g, least, method="exact", time_limit=1e-6)
    assert e.value.limit == "time_limit" and not isinstance(e.value, ls.InfeasibleBudgetError)


def test_a_time_limit_in_the_pools_passes_keeps_the_passes_done(monkeypatch):
    """The pool's passes run on threads: the limit stops the others after their pass, and the
    passes done are kept (the ones cut are None)."""
    from lowerset import _limits

    g = ls.Graph.chain(6, memory=10)
    deadline = planner._Deadline(1e9)
    calls = []

    def paper(G, fam, mode, b, max_lower_sets, dl):
        calls.append(b)
        if b == 30:
            dl.limit = 0.0      # the limit passes during this pass
            raise ls.SearchLimitError("time limit", limit="time_limit")
        return b

    monkeypatch.setattr(planner, "_paper", paper)
    monkeypatch.setattr(_limits, "cores", lambda: 1)
    chain = [("approx", "time", b) for b in (10, 20, 30, 40)]
    out = planner._run_chains(g, [chain], 10, deadline)
    assert out == [[10, 20, None, None]] and calls == [10, 20, 30]
    assert deadline.cut == ["ladder"]


def test_another_error_in_a_pass_is_raised(monkeypatch):
    from lowerset import _limits

    def failing(G, fam, mode, b, max_lower_sets, dl):
        raise RuntimeError("a bug")

    monkeypatch.setattr(planner, "_paper", failing)
    monkeypatch.setattr(_limits, "cores", lambda: 2)
    chain = [("approx", "time", b) for b in (10, 20)]
    with pytest.raises(RuntimeError, match="a bug"):
        planner._run_chains(ls.Graph.chain(4, memory=10), [chain], 10, planner._Deadline(None))


def test_the_default_limit_applies_without_an_argument(monkeypatch):
    monkeypatch.setattr(planner, "DEFAULT_SECONDS", 1e-6)
    g = _graph(10)
    with pytest.warns(ls.TimeLimitWarning, match="time limit of 1e-06 s"):
        ls.min_peak(g)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ls.TimeLimitWarning)
        ls.min_peak(_graph(10), "exact")     # no default limit for the exact search
        ls.min_peak(_graph(10), time_limit=None)


def test_numba_compilation_is_not_search_time():
    """A process whose Numba cache is empty compiles the DP kernels inside its first planner
    call (10-20 s here): the limit counts the search, so the planner's clock stops while Numba
    compiles (CI's fresh clone cut a 26-node min_peak at 8 s before this)."""
    from numba import njit

    from lowerset import _limits

    @njit  # a new function, compiled at its first call
    def add(a, b):
        return a + b

    wall0, clock0 = time.perf_counter(), _limits.clock()
    add(1.5, 2)
    wall, searched = time.perf_counter() - wall0, _limits.clock() - clock0
    assert wall > 0.01, wall  # it did compile
    assert searched < 0.1 * wall, (searched, wall)
    clock0 = _limits.clock()
    wall0 = time.perf_counter()
    add(1.5, 2)  # compiled: the clock runs with the wall
    wall = time.perf_counter() - wall0
    assert _limits.clock() - clock0 >= wall
