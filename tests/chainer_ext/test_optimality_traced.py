"""lowerset.optimum and the planner on traced facts: steps of at most 11 Chainer functions
(tiny_steps.py), traced by chainer_ext.trace, against the exhaustive search over every
lower-set sequence (lowerset.bruteforce)."""

import pytest

chainer = pytest.importorskip("chainer")
pytest.importorskip("highspy", reason="lowerset.optimum needs highspy (pip install "
                    "'lowerset[optimum]')")

import lowerset as ls  # noqa: E402
from chainer_ext import trace  # noqa: E402
from lowerset.bruteforce import all_sequences, brute_schedule_points  # noqa: E402
from tiny_steps import STEPS  # noqa: E402

FRACTIONS = (0.9, 0.75, 0.6)


@pytest.fixture(scope="module", params=[(name, scale) for name in STEPS for scale in (1, 4)],
                ids=lambda p: f"{p[0]}x{p[1]}")
def traced(request):
    """(graph, [(peak, cost)] of every distinct plan) of one traced tiny step."""
    name, scale = request.param
    with chainer.using_config("train", True):
        g = trace(STEPS[name](scale))
    seqs = all_sequences(g, max_nodes=11)
    return g, [(p, c) for p, c, _ in brute_schedule_points(g, seqs)]


def _budgets(g, points):
    """The budgets checked: 0.9, 0.75 and 0.6 x the plain step's peak, and midway between
    the least peak and the plain step's, where some plan fits."""
    plain = ls.schedule(g).peak
    least = min(p for p, _ in points)
    out = [int(f * plain) for f in FRACTIONS] + [(least + plain) // 2]
    return [b for b in out if b >= least]


def test_canonical_optimum_is_the_exhaustive_one(traced):
    g, points = traced
    least = min(p for p, _ in points)
    tie = min(c for p, c in points if p == least)
    best = ls.optimum(g)
    assert best.status == "optimal" and (best.peak, best.recompute_cost) == (least, tie)
    general = ls.optimum(g, model="general")
    assert general.peak <= least
    for b in _budgets(g, points):
        want = min(c for p, c in points if p <= b)
        at = ls.optimum(g, b)
        assert at.status == "optimal" and at.recompute_cost == want
        assert at.strategy.schedule.peak <= b
        assert ls.optimum(g, b, model="general").recompute_cost <= want


def test_planner_reaches_the_exhaustive_optimum(traced):
    """min_peak is the least peak over all lower-set sequences (and the least recomputation
    there); solve(B) recomputes the least any plan within B does."""
    g, points = traced
    least = min(p for p, _ in points)
    s = ls.min_peak(g)
    assert s.schedule.peak == least
    assert s.schedule.recompute_cost == min(c for p, c in points if p == least)
    for b in _budgets(g, points):
        assert ls.solve(g, b).schedule.recompute_cost == min(c for p, c in points if p <= b)
