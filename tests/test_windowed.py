"""The windowed DP of large graphs (``dp.WINDOWED_NODES``): transitions restricted to a window
of nodes or between landmark lower sets (``lowersets.windowed``), time-centric fronts thinned
to the lower convex hull of each run of overhead (``_kernels.thin_front``). Checked against
the exhaustive search over the same transitions, by definition, and by the work a pass does
on a block graph of 2,500 nodes."""

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lowerset as ls
from conftest import contracted_family_by_definition
from lowerset import _kernels, dp
from lowerset.bruteforce import all_sequences
from strategies import dags, examples
from test_dp import approx_family, check_strategy

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import block_graphs  # noqa: E402


def _windowed(monkeypatch, window, landmarks):
    monkeypatch.setattr(dp, "WINDOWED_NODES", 1)
    monkeypatch.setattr(dp, "WINDOWED_CONTRACTED_NODES", 1)
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


def _thinned_by_definition(pts, runs):
    """The entries :func:`_kernels.thin_front` keeps, by definition: the first entry of each of
    `runs` equal runs of the overhead span and, between two such entries (and from the last to
    the end), the vertices of the lower convex hull (each strictly below every segment joining
    an entry before it with one after it in the same piece)."""
    span = pts[-1][0] - pts[0][0]
    if len(pts) < 3 or span < runs:
        return list(range(len(pts)))
    run = span // runs
    firsts = [i for i, (t, _) in enumerate(pts)
              if i == 0 or (t - pts[0][0]) // run != (pts[i - 1][0] - pts[0][0]) // run]
    keep = set(firsts) | {len(pts) - 1}
    for lo, hi in zip(firsts, firsts[1:] + [len(pts) - 1]):
        for j in range(lo + 1, hi):
            (tj, mj) = pts[j]
            if all((pts[k][0] - pts[i][0]) * (mj - pts[i][1])
                   < (pts[k][1] - pts[i][1]) * (tj - pts[i][0])
                   for i in range(lo, j) for k in range(j + 1, hi + 1)):
                keep.add(j)
    return sorted(keep)


@settings(max_examples=examples(3), deadline=None)
@given(st.lists(st.tuples(st.integers(1, 40), st.integers(1, 60)), min_size=1, max_size=30),
       st.integers(1, 8), st.integers(0, 3))
def test_thin_front_keeps_the_hull_of_each_run(steps, runs, offset):
    """A random front (overhead increasing, cached bytes decreasing) thinned in place, after
    `offset` entries of another front, against the definition."""
    t, m, pts = 0, sum(dm for _, dm in steps) + 1, []
    for dt, dm in steps:
        t, m = t + dt, m - dm
        pts.append((t, m))
    pad = [(-1, -1)] * offset
    ft = np.array([p[0] for p in pad + pts], dtype=np.int64)
    fm = np.array([p[1] for p in pad + pts], dtype=np.int64)
    fpa = np.arange(len(ft), dtype=np.int64)
    fpe = fpa + 1000
    end = _kernels.thin_front(ft, fm, fpa, fpe, offset, len(ft), runs)
    kept = _thinned_by_definition(pts, runs)
    assert end - offset == len(kept)
    assert list(fpa[offset:end]) == [offset + i for i in kept]
    assert list(fpe[offset:end]) == [offset + i + 1000 for i in kept]
    assert [(int(a), int(b)) for a, b in zip(ft[offset:end], fm[offset:end])] == [
        pts[i] for i in kept]
    assert list(ft[:offset]) == [-1] * offset


def test_large_graphs_are_windowed_and_small_ones_are_not():
    deadline = ls._limits.NO_DEADLINE
    for method, nodes in (("approx", dp.WINDOWED_NODES), ("ordered", dp.WINDOWED_NODES),
                          ("contracted", dp.WINDOWED_CONTRACTED_NODES)):
        _, small = block_graphs.sized("resnet", nodes // 2)
        _, large = block_graphs.sized("resnet", nodes * 5 // 4)
        assert small.n < nodes <= large.n
        assert not ls.lowersets.windowed_family(dp._get_family(small, method, 50_000, deadline))
        assert ls.lowersets.windowed_family(dp._get_family(large, method, 50_000, deadline))
        assert not ls.lowersets.windowed_family(dp._get_family(large, "exact", 50_000,
                                                               deadline))


def test_windowing_cuts_the_work_of_a_pass():
    """A time-centric pass at the least budget with no overhead cap, and a memory-centric one,
    on the resnet family at 2,511 nodes: the windowed pass does at most a third (time-centric)
    or a quarter (memory-centric) of the work of the full family's, in pairs of sets and
    front entries read (3.0 M against 10.1 M and 0.77 M against 3.6 M; with every transition
    left in it is 5.9 M, with the whole fronts 7.3 M: a planted fault fails here)."""
    _, g = block_graphs.sized("resnet", 2500)
    deadline = ls._limits.NO_DEADLINE
    win = dp._get_family(g, "contracted", 50_000, deadline)
    full = ls.lowersets.family(g, "contracted")
    budget = ls.min_budget(g, "contracted")
    T = g.total_cost()
    for maximize, factor in ((False, 3), (True, 4)):
        works = [dp._run_front_dp(g, fam, budget, maximize, deadline, T)[-1]
                 for fam in (win, full)]
        assert works[0] * factor <= works[1], (maximize, works)
    # the windowed plan's eq. (2) peak is the least one of its family, at most 1% above the
    # full family's
    assert budget <= 1.01 * ls.min_budget(g, "exact")
    assert np.all(win.a_lo <= np.arange(win.sets.shape[0]))
