"""The windowed DP of large graphs (``dp.WINDOWED_NODES``): transitions restricted to a window of
nodes or between landmark lower sets (``lowersets.windowed``), time-centric fronts cut to their
lower convex hull. Checked against the exhaustive search over the same transitions, by
definition, and by the work a pass does on a block graph of 2,500 nodes."""

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lowerset as ls
from conftest import contracted_family_by_definition
from lowerset import dp
from lowerset.bruteforce import all_sequences
from strategies import dags, examples
from test_dp import approx_family, check_strategy

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import block_graphs  # noqa: E402


def _windowed(monkeypatch, window, landmarks):
    monkeypatch.setattr(dp, "WINDOWED_NODES", 1)
    monkeypatch.setattr(dp, "WINDOW_NODES", window)
    monkeypatch.setattr(dp, "LANDMARKS", landmarks)


def _landmark_sets(g):
    fam = dp._get_family(g, "approx", ls.DEFAULT_MAX_LOWER_SETS, ls._limits.NO_DEADLINE)
    return {frozenset(g.nodes_of(ls.lowersets.mask_of_bits(fam.sets[i], g.n)))
            for i in fam.marks}


def _allowed(seq, marks, window):
    """Whether every step of the sequence (from ∅) adds at most `window` nodes or joins two
    landmark sets: the definition of the windowed DP's transitions."""
    prev = frozenset()
    for L in seq:
        if len(L) - len(prev) > window and not (prev in marks and L in marks):
            return False
        prev = L
    return True


@settings(max_examples=examples(1.5), deadline=None)
@given(dags(max_nodes=7, max_memory=2), st.integers(1, 3), st.integers(1, 3),
       st.sampled_from(["approx", "contracted"]), st.data())
def test_windowed_dp_equals_the_exhaustive_search_over_its_transitions(g, window, landmarks,
                                                                       method, data):
    with pytest.MonkeyPatch.context() as mp:
        _windowed(mp, window, landmarks)
        marks = _landmark_sets(g)
        assert {frozenset(), frozenset(g.labels)} <= marks
        assert len(marks) <= landmarks + 2
        assert marks <= set(approx_family(g))
        family = (approx_family(g) if method == "approx"
                  else list(contracted_family_by_definition(g)))
        seqs = [s for s in all_sequences(g, family=family) if _allowed(s[2], marks, window)]
        least = min(p for _, p, _ in seqs)
        mb, strat = ls.min_budget(g, method, return_strategy=True)
        assert mb == least
        assert _allowed(strat.lower_sets, marks, window)
        if method == "contracted":   # the approximate family's transitions are a subset
            assert mb <= ls.min_budget(g, "approx")
        B = data.draw(st.integers(least, 2 * g.total_memory() + 1), label="budget")
        fits = [t for t, p, _ in seqs if p <= B]
        m = ls.dp.solve(g, B, mode="memory", method=method)
        check_strategy(g, m, B, "memory", method)
        assert m.overhead == max(fits) and _allowed(m.lower_sets, marks, window)
        # the hull keeps the least cache, so the time-centric DP finds a plan at every
        # feasible budget; off the hull a state is lost, so its overhead may be above the least
        t = ls.dp.solve(g, B, mode="time", method=method)
        check_strategy(g, t, B, "time", method)
        assert t.overhead >= min(fits) and _allowed(t.lower_sets, marks, window)


@settings(max_examples=examples(1), deadline=None)
@given(dags(min_nodes=4, max_nodes=7, max_cost=9, max_memory=6), st.data())
def test_time_front_of_a_windowed_family_is_convex(g, data):
    """The time-centric front of V keeps only states on its lower convex hull in (overhead,
    cached bytes): each is strictly below the segment joining its neighbours."""
    with pytest.MonkeyPatch.context() as mp:
        _windowed(mp, 2, 2)
        B = data.draw(st.integers(ls.min_budget(g, "approx"), 2 * g.total_memory() + 1))
        front = dp.time_front(g, B, "approx")
        pts = [(s.overhead, sum(int(g.memory[g.index[v]]) for v in set().union(*s.cached)))
               for s in front]
        assert all(t1 < t2 and m1 > m2 for (t1, m1), (t2, m2) in zip(pts, pts[1:]))
        for (t1, m1), (t2, m2), (t3, m3) in zip(pts, pts[1:], pts[2:]):
            assert (t2 - t1) * (m3 - m1) - (m2 - m1) * (t3 - t1) > 0


def test_large_graphs_are_windowed_and_small_ones_are_not():
    _, small = block_graphs.sized("resnet", 1000)
    _, large = block_graphs.sized("resnet", 2500)
    assert small.n < dp.WINDOWED_NODES <= large.n
    deadline = ls._limits.NO_DEADLINE
    for method in ("approx", "contracted", "ordered"):
        assert not ls.lowersets.windowed_family(dp._get_family(small, method, 50_000, deadline))
        assert ls.lowersets.windowed_family(dp._get_family(large, method, 50_000, deadline))
    assert not ls.lowersets.windowed_family(dp._get_family(large, "exact", 50_000, deadline))


def test_windowing_cuts_the_work_of_a_pass():
    """A time-centric pass at the least budget with no overhead cap, and a memory-centric one,
    on the resnet family at 2,511 nodes: the windowed pass reads at most a quarter of the front
    entries and pairs of the full family's (a planted fault that leaves every transition in,
    or the whole front, fails here)."""
    _, g = block_graphs.sized("resnet", 2500)
    deadline = ls._limits.NO_DEADLINE
    win = dp._get_family(g, "contracted", 50_000, deadline)
    full = ls.lowersets.family(g, "contracted")
    budget = ls.min_budget(g, "contracted")
    T = g.total_cost()
    for maximize in (False, True):
        works = [dp._run_front_dp(g, fam, budget, maximize, deadline, T)[-1]
                 for fam in (win, full)]
        assert works[0] * 4 <= works[1], (maximize, works)
    # the windowed plan's eq. (2) peak is the least one of its family, at most 1% above the
    # full family's
    assert budget <= 1.01 * ls.min_budget(g, "exact")
    assert np.all(win.a_lo <= np.arange(win.sets.shape[0]))
