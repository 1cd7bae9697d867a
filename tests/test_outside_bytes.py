"""Bytes a step holds outside its graph (ExecutionFacts.outside_forward, outside_backward): the
schedule adds them at the positions they name, whatever the plan, by hand on a chain."""

from dataclasses import replace

import numpy as np
import pytest

import lowerset as ls
from lowerset.execution import default_facts
from lowerset.scheduling import EventFold

PLAN = [{0, 1}, {0, 1, 2}]   # drops node 0's value, recomputed before node 1's backward


def _chain(**outside):
    g = ls.Graph.chain(3, memory=10)   # default facts: backward order 2, 1, 0
    return g.with_facts(replace(default_facts(g), **outside))


def test_each_event_holds_the_bytes_of_its_position():
    g = _chain(outside_forward=(1, 2, 3), outside_backward=(100, 200, 300))
    s = ls.schedule(ls.CanonicalStrategy(g, PLAN))
    # without outside bytes (tests/test_schedule.py): 10 20 10 20 30 40 40 50 60 50 40 40 30 20
    # F0 F1 D0 F2 SEED B2 FG2 | R0 B1 FG1 FV1 | B0 FG0 FV0: forward positions 0-2, then the
    # backward positions of nodes 2, 1, 0 from the first event that serves each
    assert s.timeline.tolist() == [11, 22, 12, 23, 130, 140, 140, 250, 260, 250, 240, 340, 330,
                                   320]
    assert s.peak == 340


def test_the_recomputation_before_a_backward_counts_that_backwards_bytes():
    g = _chain(outside_backward=(0, 1000, 0))
    s = ls.schedule(ls.CanonicalStrategy(g, PLAN))
    kinds = [e.kind for e in s.events]
    r = kinds.index("recompute")
    assert s.timeline[r] == 50 + 1000 and s.peak == 60 + 1000
    # nothing dropped: 10 20 30 40 50 50 | 60 50 40 | 40 30 20, node 1's backward at 60
    assert ls.schedule(ls.CanonicalStrategy(g, [{0, 1, 2}])).peak == 60 + 1000


def test_negative_bytes_lower_the_level():
    g = _chain(outside_forward=(0, 0, -15), outside_backward=(-20, -20, -20))
    s = ls.schedule(ls.CanonicalStrategy(g, PLAN))
    assert s.timeline.tolist()[:6] == [10, 20, 10, 5, 10, 20]


def test_the_fast_fold_and_a_runtime_fold_agree_with_the_schedule():
    rng = np.random.default_rng(1)
    g = _chain(outside_forward=tuple(int(x) for x in rng.integers(-5, 500, 3)),
               outside_backward=tuple(int(x) for x in rng.integers(-5, 500, 3)))
    plan = ls.CanonicalStrategy(g, PLAN)
    s = ls.schedule(plan)
    from lowerset.scheduling import _peak_and_cost, dropped_nodes
    assert _peak_and_cost(g, dropped_nodes(plan)) == (s.peak, s.recompute_cost)
    fold = EventFold(g)
    timeline, _ = fold.apply(*s.arrays)
    assert timeline.tolist() == s.timeline.tolist() and fold.used == s.timeline[-1]


def test_bad_lengths_are_named_and_json_keeps_them(tmp_path):
    with pytest.raises(ls.GraphError, match="outside_backward must be empty or have 3"):
        _chain(outside_backward=(1, 2))
    with pytest.raises(ls.GraphError, match="outside_forward"):
        _chain(outside_forward=(1, 2, 3.5))
    g = _chain(outside_forward=(1, 2, 3), outside_backward=(4, 5, -6))
    ls.save_graph(g, tmp_path / "g.json")
    back = ls.load_graph(tmp_path / "g.json")
    assert back.facts.outside_backward == (4, 5, -6)
    assert back.facts.outside_forward == (1, 2, 3)
    # measured figures, like the workspace peaks: a plan binds across them, but the graphs
    # differ
    assert g.matches(_chain()) and g != _chain()


def test_the_milps_refuse_them():
    pytest.importorskip("highspy")
    with pytest.raises(ls.ArgumentError, match="outside"):
        ls.optimum(_chain(outside_forward=(1, 2, 3)))
