"""lowerset.schedule: events and bytes against hand-computed cases and a naive oracle."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import lowerset as ls
from facts_strategies import canonical_strategies, graphs_with_facts
from lowerset import Event
from lowerset.scheduling import dropped_nodes
from schedule_reference import events as reference_events
from strategies import examples


def _graph(nodes, externals=(), backward=None, returned=None, seeds=None, **kw):
    """A graph 0..n-1 from NodeFacts keyword dicts (edges from the arguments); `kw` are
    further ExecutionFacts fields."""
    nfs = tuple(ls.NodeFacts(**d) for d in nodes)
    n = len(nfs)
    edges = sorted({(s, v) for v, nf in enumerate(nfs) for s, _ in nf.args if s >= 0}
                   | {(u, v) for v, nf in enumerate(nfs) for u in nf.after})
    facts = ls.ExecutionFacts(
        nodes=nfs, forward_order=tuple(range(n)),
        backward_order=tuple(range(n - 1, -1, -1)) if backward is None else backward,
        externals=externals, returned=returned, seeds=returned if seeds is None else seeds,
        **kw)
    return ls.Graph(list(range(n)), edges, {v: 1 for v in range(n)},
                    {v: sum(nf.outputs) + nf.state for v, nf in enumerate(nfs)}, facts=facts)


def _kinds(s):
    return [(e.kind, e.node) for e in s.events]


class TestHandComputed:
    def test_chain_drop_and_recompute(self):
        g = ls.Graph.chain(3, memory=10)   # default facts: every backward reads all
        s = ls.schedule(ls.CanonicalStrategy(g, [{0, 1}, {0, 1, 2}]))
        assert _kinds(s) == [
            ("forward", 0), ("forward", 1), ("drop", 0), ("forward", 2), ("seed_grad", 2),
            ("backward", 2), ("free_grad", 2), ("recompute", 0), ("backward", 1),
            ("free_grad", 1), ("free_value", 1), ("backward", 0), ("free_grad", 0),
            ("free_value", 0)]
        # the seed gradient stays (the caller holds it); value 2 is returned
        assert s.timeline.tolist() == [10, 20, 10, 20, 30, 40, 40, 50, 60, 50, 40, 40, 30, 20]
        assert s.peak == 60 and s.recomputed == [0] and s.recompute_cost == 1

    def test_diamond_gradient_sum(self):
        g = ls.Graph(list("abcd"), [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")],
                     dict.fromkeys("abcd", 1), dict.fromkeys("abcd", 10))
        s = ls.schedule(ls.CanonicalStrategy(g, [set("abcd")]))
        assert _kinds(s) == [
            ("forward", "a"), ("forward", "b"), ("forward", "c"), ("forward", "d"),
            ("seed_grad", "d"), ("backward", "d"), ("free_grad", "d"), ("backward", "c"),
            ("free_grad", "c"), ("free_value", "c"), ("backward", "b"), ("free_grad", "b"),
            ("free_value", "b"), ("backward", "a"), ("free_grad", "a"), ("free_value", "a")]
        assert s.timeline.tolist() == [10, 20, 30, 40, 50, 70, 70, 80, 70, 60, 60, 50, 40, 40,
                                       30, 20]
        # b's backward adds a's second gradient: a third array exists while they are summed
        highs = s.fold.highs.tolist()
        assert highs[10] == 80 and highs == [10, 20, 30, 40, 50, 70, 70, 80, 70, 60, 80, 50,
                                             40, 40, 30, 20]
        assert s.peak == 80

    def test_views_externals_workspace(self):
        g = _graph([
            # 0: reads nothing in backward, needs 12 bytes of workspace above its output
            dict(outputs=(8,), args=((-1, 0),), grad_args=(False,), output_views=(-1,),
                 grad_views=(-1,), forward_peak=20, plain_free_after=(-1,)),
            # 1: a reshape: its output and its input's gradient are views
            dict(outputs=(8,), args=((0, 0),), grad_args=(True,), output_views=(0,),
                 grad_views=(0,), plain_free_after=(-1,)),
            # 2: reads its input and a parameter, measured backward peak 30
            dict(outputs=(4,), args=((1, 0), (-2, 0)), reads_args=(0, 1),
                 grad_args=(True, True), output_views=(-1,), grad_views=(-1, -1),
                 backward_peak=30, plain_free_after=(-1,))],
            externals=(("input", 4), ("param", 6)), returned=((2, 0),))
        s = ls.schedule(ls.CanonicalStrategy(g, [{0, 1, 2}]))
        assert s.events == (
            Event("forward", 0, 8, (0,)), Event("forward", 1, 8, (0,)),
            Event("free_value", 0, 8, (0,)), Event("forward", 2, 4, (0,)),
            Event("seed_grad", 2, 4, (0,)), Event("backward", 2, 4, ()),
            Event("free_grad", 2, 4, ()), Event("free_value", 1, 8, (0,)),
            Event("backward", 1, 8, ()), Event("free_grad", 1, 8, ()),
            Event("backward", 0, 8, ()), Event("free_grad", 0, 8, ()))
        # freeing 0 frees nothing while 1 (a view) lives; the gradient view keeps 1's gradient
        assert s.timeline.tolist() == [18, 18, 18, 22, 26, 40, 40, 32, 32, 32, 32, 24]
        highs = s.fold.highs.tolist()
        assert highs[0] == 10 + 20 and highs[5] == 10 + 16 + 30
        assert s.peak == 56 and s.resident == 10
        # what stays: resident, the parameter's gradient, the returned value and the seed
        assert s.timeline[-1] == 10 + 6 + 4 + 4

        # the paper's memory: no parameter (6), no parameter gradient (6 after backward 2), no
        # workspace (forward 0's 20, backward 2's 30); the input (4) stays resident
        a = ls.schedule(ls.CanonicalStrategy(g.with_facts(ls.activation_facts(g.facts)),
                                             [{0, 1, 2}]))
        assert [(e.kind, e.node) for e in a.events] == _kinds(s)
        assert a.timeline.tolist() == [12, 12, 12, 16, 20, 28, 28, 20, 20, 20, 20, 12]
        assert a.fold.highs.tolist()[0] == 12 and a.peak == 28 and a.resident == 4

    def test_gradients_that_exist_at_the_start(self):
        # a parameter W (16 bytes) read by both nodes, with its gradient G (16) allocated
        # before the step (gradient accumulation); the input x (4) reads no gradient
        nodes = [dict(outputs=(4,), args=((-1, 0), (-2, 0)), reads_args=(0, 1),
                      grad_args=(False, True), output_views=(-1,), grad_views=(-1, -1),
                      plain_free_after=(-1,)),
                 dict(outputs=(4,), args=((0, 0), (-2, 0)), reads_args=(0, 1),
                      grad_args=(True, True), output_views=(-1,), grad_views=(-1, -1),
                      plain_free_after=(-1,))]
        ext = (("input", 4), ("param", 16))
        kinds = [("forward", 0), ("forward", 1), ("seed_grad", 1), ("backward", 1),
                 ("free_grad", 1), ("free_value", 0), ("backward", 0), ("free_grad", 0)]
        def keep_all(**kw):
            return ls.schedule(ls.CanonicalStrategy(_graph(nodes, ext, returned=((1, 0),),
                                                           **kw), [{0, 1}]))

        s = keep_all(grad_sum="inplace", grads_at_start=(1,))
        assert _kinds(s) == kinds and s.resident == 4 + 16 + 16
        # PyTorch: backward 1's gradient for W (16) waits in the input buffer beside G until
        # backward 0 brings the last one (16 more), which is added into it (freed), then the
        # buffer is added into G (freed): 44 = resident + value 1 + the seed
        assert s.timeline.tolist() == [40, 44, 48, 68, 68, 64, 44, 44]
        assert s.fold.highs.tolist() == [40, 44, 48, 68, 68, 64, 80, 44] and s.peak == 80
        # without G the gradients of W are summed the same way and the last sum is W's
        # gradient: 16 bytes less at every point up to backward 0, whose peak is 64
        plain = keep_all(grad_sum="inplace")
        assert plain.timeline.tolist() == [24, 28, 32, 52, 52, 48, 44, 44] and plain.peak == 64
        # Chainer: G is W's pending gradient, so each arrival makes a new sum (16) with it,
        # and the two are released
        c = keep_all(grad_sum="new", grads_at_start=(1,))
        assert _kinds(c) == kinds and c.resident == 36
        assert c.timeline.tolist() == [40, 44, 48, 52, 52, 48, 48, 44]
        assert c.fold.highs.tolist() == [40, 44, 48, 84, 52, 48, 80, 44] and c.peak == 84
        # the paper's activation memory leaves parameter gradients out
        a = ls.activation_facts(c.graph.facts)
        assert a.grads_at_start == () and a.resident == 4

    def test_multi_output_freed_per_output(self):
        g = _graph([
            dict(outputs=(5, 7), args=(), output_views=(-1, -1), plain_free_after=(-1, -1)),
            dict(outputs=(3,), args=((0, 0),), reads_args=(0,), grad_args=(True,),
                 output_views=(-1,), grad_views=(-1,), plain_free_after=(-1,)),
            dict(outputs=(2,), args=((0, 1), (1, 0)), grad_args=(True, True),
                 output_views=(-1,), grad_views=(-1, -1), plain_free_after=(-1,))],
            returned=((2, 0),))
        s = ls.schedule(ls.CanonicalStrategy(g, [{0, 1, 2}]))
        assert s.events == (
            Event("forward", 0, 12, (0, 1)), Event("forward", 1, 3, (0,)),
            Event("forward", 2, 2, (0,)), Event("seed_grad", 2, 2, (0,)),
            Event("free_value", 0, 7, (1,)), Event("free_value", 1, 3, (0,)),
            Event("backward", 2, 2, ()), Event("free_grad", 2, 2, ()),
            Event("backward", 1, 3, ()), Event("free_grad", 1, 3, ()),
            Event("free_value", 0, 5, (0,)), Event("backward", 0, 12, ()),
            Event("free_grad", 0, 12, ()))
        assert s.timeline.tolist() == [12, 15, 17, 19, 12, 9, 19, 19, 24, 21, 16, 16, 4]

    def test_plain_step(self):
        g = _graph([dict(outputs=(10,), args=(), reads_outputs=(0,), output_views=(-1,),
                         plain_free_after=(1,)),
                    dict(outputs=(10,), args=((0, 0),), reads_args=(0,), grad_args=(True,),
                         output_views=(-1,), grad_views=(-1,), plain_free_after=(-1,)),
                    dict(outputs=(10,), args=((1, 0),), reads_args=(0,), grad_args=(True,),
                         output_views=(-1,), grad_views=(-1,), plain_free_after=(-1,))],
                   returned=((2, 0),))
        s = ls.schedule(g)
        assert _kinds(s) == [("forward", 0), ("forward", 1), ("free_value", 0), ("forward", 2),
                             ("seed_grad", 2), ("backward", 2), ("free_grad", 2),
                             ("backward", 1), ("free_grad", 1), ("backward", 0),
                             ("free_grad", 0)]
        assert s.timeline.tolist() == [10, 20, 10, 20, 30, 40, 40, 50, 40, 40, 30]
        assert s.strategy is None and s.recomputed == []

    def test_held_until_delays_the_free_of_the_forward_copy(self):
        # 0 -> 1 -> 2 -> 3, no backward reads anything; the code holds 0's output through
        # forward 2 (a Python variable), so it is freed after forward 2, not after forward 1
        def chain(held):
            return _graph([dict(outputs=(10,), args=(), output_views=(-1,),
                                plain_free_after=(-1,), held_until=held)]
                          + [dict(outputs=(10,), args=((v - 1, 0),), grad_args=(True,),
                                  output_views=(-1,), grad_views=(-1,), plain_free_after=(-1,))
                             for v in (1, 2, 3)], returned=((3, 0),))
        free_0 = ("free_value", 0)
        loose = _kinds(ls.schedule(ls.CanonicalStrategy(chain(()), [{0, 1, 2, 3}])))
        held = ls.schedule(ls.CanonicalStrategy(chain((2,)), [{0, 1, 2, 3}]))
        assert loose.index(free_0) == loose.index(("forward", 1)) + 1
        assert _kinds(held).index(free_0) == _kinds(held).index(("forward", 2)) + 1
        assert held.timeline.tolist()[:6] == [10, 20, 30, 20, 10, 20]
        # a drop waits for the code too; its recomputation is not held (a backward copy)
        s = ls.schedule(ls.CanonicalStrategy(chain((2,)), [{0, 1}, {0, 1, 2, 3}]))
        assert _kinds(s)[:5] == [("forward", 0), ("forward", 1), ("forward", 2), ("drop", 0),
                                 ("free_value", 1)]

    def test_edges_without_arrays_keep_the_boundary(self):
        # 0 -> 1 -> 2 -> 4 <- 3, and 3 runs after 1 without reading it (NodeFacts.after)
        def node(args, after=(), reads_outputs=()):
            return dict(outputs=(10,), args=args, grad_args=(True,) * len(args),
                        output_views=(-1,), grad_views=(-1,) * len(args),
                        plain_free_after=(-1,), after=after, reads_outputs=reads_outputs)
        for reads in ((), (0,)):
            g = _graph([node(()), node(((0, 0),), reads_outputs=reads), node(((1, 0),)),
                        node((), after=(1,)), node(((2, 0), (3, 0)))], returned=((4, 0),))
            assert (1, 3) in g.edges
            s = ls.CanonicalStrategy(g, [{0, 1, 2}, {0, 1, 2, 3, 4}])
            # 1 is on the graph's boundary of {0, 1, 2} (its successor 3 lies outside): eq.
            # (1) counts it as kept (its overhead: 0 and the last segment, 3 and 4), and so
            # does the schedule; only 0 is dropped
            assert 1 in s.cached[0] and s.overhead == 3
            assert dropped_nodes(s).nonzero()[0].tolist() == [0]
            sched = ls.schedule(s)
            assert sched.recompute_cost == 0
            kinds = _kinds(sched)
            i_fw2, i_bw1 = kinds.index(("forward", 2)), kinds.index(("backward", 1))
            if reads:  # its backward reads it: held until then, not recomputed
                assert kinds.index(("free_value", 1)) > i_bw1
            else:  # nothing reads it again: freed after its last read, as in the plain step
                assert kinds.index(("free_value", 1)) == i_fw2 + 1
        with pytest.raises(ls.GraphError, match="runs after"):
            _graph([node(()), node((), after=(0,))], returned=((1, 0),)).facts.check(
                ls.Graph([0, 1], [], {0: 1, 1: 1}, {0: 10, 1: 10}))

    def test_arrays_made_in_the_step_live_from_their_forward_to_their_free(self):
        # external 1 (6 bytes) is made before forward 1 and freed after it; external 0 (4
        # bytes) is resident. Backward 1 reads nothing; backward 2 reads value 1.
        g = _graph([
            dict(outputs=(10,), args=((-1, 0),), grad_args=(False,), output_views=(-1,),
                 grad_views=(-1,), plain_free_after=(-1,)),
            dict(outputs=(10,), args=((0, 0), (-2, 0)), grad_args=(True, False),
                 output_views=(-1,), grad_views=(-1, -1), plain_free_after=(-1,)),
            dict(outputs=(10,), args=((1, 0),), reads_args=(0,), grad_args=(True,),
                 output_views=(-1,), grad_views=(-1,), plain_free_after=(-1,))],
            externals=(("input", 4), ("input", 6)), returned=((2, 0),),
            external_made=(-1, 1), external_free_after=(-1, 1))
        plain = ls.schedule(g)
        assert plain.resident == 4 and g.facts.resident == 4
        # forward 1 starts at 10 + 6 (the array made before it), allocates 10 (its high, 30
        # with the resident bytes) and frees the 6 at its end
        assert plain.timeline.tolist() == [14, 24, 34, 44, 54, 54, 64, 54, 54, 44]
        assert plain.fold.highs.tolist()[1] == 30 and plain.peak == 64
        s = ls.schedule(ls.CanonicalStrategy(g, [{0, 1, 2}]))
        assert _kinds(s) == [
            ("forward", 0), ("forward", 1), ("free_value", 0), ("forward", 2), ("seed_grad", 2),
            ("backward", 2), ("free_grad", 2), ("free_value", 1), ("backward", 1),
            ("free_grad", 1), ("backward", 0), ("free_grad", 0)]
        assert s.timeline.tolist() == [14, 24, 14, 24, 34, 44, 44, 34, 44, 34, 34, 24]
        assert s.fold.highs.tolist()[1] == 30 and s.peak == 44
        # JSON keeps the lifetimes; facts that put a reader outside them raise
        assert ls.ExecutionFacts.from_dict(g.facts.to_dict()) == g.facts
        with pytest.raises(ls.GraphError, match="outside its lifetime"):
            ls.Graph(list(g.labels), g.edges, {v: 1 for v in range(3)},
                     {v: 10 for v in range(3)},
                     facts=replace(g.facts, external_made=(-1, 2), external_free_after=(-1, 2)))
        with pytest.raises(ls.GraphError, match="made in it, first"):
            ls.Graph(list(g.labels), g.edges, {v: 1 for v in range(3)},
                     {v: 10 for v in range(3)},
                     facts=replace(g.facts, external_made=(-1, -1), external_free_after=(-1, 1)))

    def test_a_broadcast_gradient_owns_fewer_bytes(self):
        # node 1's backward gives node 0 a gradient of 2 bytes (a broadcast of its 10); the
        # sum with node 2's gradient for value 0 has 10 bytes
        g = _graph([
            dict(outputs=(10,), args=(), output_views=(-1,), plain_free_after=(-1,)),
            dict(outputs=(1,), args=((0, 0),), grad_args=(True,), output_views=(-1,),
                 grad_views=(-1,), grad_sizes=(2,), plain_free_after=(-1,)),
            dict(outputs=(1,), args=((0, 0), (1, 0)), grad_args=(True, True),
                 output_views=(-1,), grad_views=(-1, -1), plain_free_after=(-1,))],
            returned=((2, 0),))
        s = ls.schedule(g)
        assert _kinds(s) == [("forward", 0), ("forward", 1), ("forward", 2), ("seed_grad", 2),
                             ("backward", 2), ("free_grad", 2), ("backward", 1),
                             ("free_grad", 1), ("backward", 0), ("free_grad", 0)]
        # backward 1 makes 2 bytes for value 0 (24 + 2), summed with backward 2's pending 10
        # into a new 10 (36 at its highest, not 44); the caller holds the seed
        assert s.timeline.tolist() == [10, 11, 12, 13, 24, 24, 24, 23, 23, 13]
        assert s.fold.highs.tolist()[6] == 36

    def test_a_write_through_a_view_ties_the_buffers_owner(self):
        """0 owns a buffer, 1 is a view of it, 2 writes into the view in place (``buf[:, :2]
        += 1``), 3 reads the buffer after the write (its facts list the write among its
        arguments, read by its backward as the buffer is), 4 reads 3. A
        plan drops 0, 1 and 2 together or none of them: dropping the write alone would replay
        it on the kept buffer, dropping the owner alone would recompute it without the write."""
        g = _graph([
            dict(outputs=(40,), args=((-1, 0),), grad_args=(False,), output_views=(-1,),
                 grad_views=(-1,), plain_free_after=(-1,)),
            dict(outputs=(16,), args=((0, 0),), grad_args=(False,), output_views=(0,),
                 grad_views=(-1,), plain_free_after=(-1,)),
            dict(outputs=(16,), args=((1, 0),), grad_args=(False,), output_views=(0,),
                 grad_views=(-1,), plain_free_after=(-1,), inplace=True),
            dict(outputs=(40,), args=((0, 0), (2, 0)), reads_args=(0, 1),
                 grad_args=(False, False), output_views=(-1,), grad_views=(-1, -1),
                 plain_free_after=(-1,)),
            dict(outputs=(8,), args=((3, 0),), reads_args=(0,), grad_args=(True,),
                 output_views=(-1,), grad_views=(-1,), plain_free_after=(-1,)),
        ], externals=(("input", 40),), returned=((4, 0),))
        assert ls.inplace_groups(g.facts).tolist() == [0, 0, 0, 3, 4]
        for cut in range(1, 5):   # prefixes: the write's group is cut at 1, 2 and 3
            s = ls.CanonicalStrategy(g, [set(range(cut)), set(range(5))])
            dropped = dropped_nodes(s)
            assert len(set(dropped[:3].tolist())) == 1, (cut, dropped)
        s = ls.CanonicalStrategy(g, [{0, 1, 2, 3}, set(range(5))])
        assert dropped_nodes(s).tolist() == [True, True, True, False, False]
        # 3's backward reads the buffer as the write left it: the owner, the view and the
        # write are recomputed before it, in forward order
        assert s.schedule.recomputed == [0, 1, 2]

    def test_stochastic_state_is_kept_and_reused(self):
        g = _graph([dict(outputs=(4,), args=(), output_views=(-1,), plain_free_after=(-1,)),
                    dict(outputs=(4,), args=((0, 0),), state=9, stochastic=True,
                         reads_outputs=(0,), grad_args=(True,), output_views=(-1,),
                         grad_views=(-1,), plain_free_after=(-1,)),
                    dict(outputs=(4,), args=((1, 0),), reads_args=(0,), grad_args=(True,),
                         output_views=(-1,), grad_views=(-1,), plain_free_after=(-1,)),
                    dict(outputs=(4,), args=((2, 0),), grad_args=(True,), output_views=(-1,),
                         grad_views=(-1,), plain_free_after=(-1,))],
                   returned=((3, 0),))
        s = ls.schedule(ls.CanonicalStrategy(g, [{0, 1, 2}, {0, 1, 2, 3}]))
        ev = s.events
        # the mask (state of 1) is not freed with the dropped output, and the recomputation
        # makes no new state: it reuses the kept one, freed after 1's backward
        assert ("drop", 1) in _kinds(s) and ("recompute", 1) in _kinds(s)
        assert next(e for e in ev if e.kind == "recompute" and e.node == 1).bytes == 4
        i_bw = _kinds(s).index(("backward", 1))
        assert ("free_state", 1) in _kinds(s)[i_bw:]
        assert ("free_state", 1) not in _kinds(s)[:i_bw]


@settings(max_examples=examples(2), deadline=None)
@given(st.data())
def test_kernels_equal_the_naive_schedule(data):
    g = data.draw(graphs_with_facts(made_externals=True), label="graph")
    _check_against_reference(g, data.draw(canonical_strategies(g), label="strategy"))


@settings(max_examples=examples(1), deadline=None,
          suppress_health_check=[HealthCheck.filter_too_much])
@given(st.data())
def test_kernels_equal_the_naive_schedule_with_gradients_at_start(data):
    g = data.draw(graphs_with_facts(made_externals=True, grads_at_start=True), label="graph")
    assume(g.facts.grads_at_start)
    _check_against_reference(g, data.draw(canonical_strategies(g), label="strategy"))


def _check_against_reference(g, s):
    """The kernels' events, timeline and highs of `s` and of the plain step equal the naive
    reference's (tests/schedule_reference.py)."""
    for plan in (s, g):
        evs, timeline, highs = reference_events(plan)
        got = ls.schedule(plan)
        assert list(got.events) == evs
        assert got.timeline.tolist() == timeline.tolist()
        assert got.fold.highs.tolist() == highs.tolist()
        assert got.resident == g.facts.resident


@settings(max_examples=examples(1), deadline=None)
@given(st.data())
def test_schedule_invariants(data):
    g = data.draw(graphs_with_facts(made_externals=True), label="graph")
    s = data.draw(canonical_strategies(g), label="strategy")
    sched = ls.schedule(s)
    kinds = _kinds(sched)
    dropped = {e.node for e in sched.events if e.kind == "drop"}
    # nothing is recomputed twice, only dropped values are, and the cost is at most eq. (1)
    assert len(sched.recomputed) == len(set(sched.recomputed))
    assert set(sched.recomputed) <= dropped
    assert sched.recompute_cost <= s.overhead
    # every backward that reads a dropped value of a node finds it recomputed first
    F = g.facts
    for j in F.backward_order:
        i = kinds.index(("backward", j))
        for p in F.nodes[j].reads_args:
            src = F.nodes[j].args[p][0]
            if src >= 0 and src in dropped:
                assert ("recompute", src) in kinds[:i]
    # no array is freed twice: per node and output, frees alternate with makes
    live = {}
    for e in sched.events:
        if e.kind in ("forward", "recompute"):
            for k in e.outputs:
                assert not live.get((e.node, k))
                live[e.node, k] = True
        elif e.kind in ("drop", "free_value"):
            for k in e.outputs:
                assert live.get((e.node, k))
                live[e.node, k] = False
    # what the step leaves: returned values are never freed
    for v, k in F.returned:
        assert live.get((v, k))
    assert sched.peak >= sched.timeline.max() >= sched.resident


def test_schedule_rejects_other_types():
    with pytest.raises(ls.ArgumentTypeError,
                       match="CanonicalStrategy, a lowerset.DropSetStrategy or a lowerset.Graph"):
        ls.schedule("x")


def test_facts_round_trip_and_equality(tmp_path):
    g = _graph([dict(outputs=(8,), args=((-1, 0),), grad_args=(False,), output_views=(-1,),
                     grad_views=(-1,), forward_peak=20, plain_free_after=(-1,)),
                dict(outputs=(8, 2), args=((0, 0),), grad_args=(True,), output_views=(0, -1),
                     grad_views=(1,), plain_free_after=(-1, 0))],
               externals=(("input", 4),), returned=((1, 0),), seeds=())
    path = tmp_path / "g.json"
    ls.save_graph(g, path)
    back = ls.load_graph(path)
    assert back == g and back.facts == g.facts
    changed = ls.Graph(list(g.labels), g.edges, dict(zip(g.labels, g.cost.tolist())),
                       dict(zip(g.labels, g.memory.tolist())),
                       facts=ls.ExecutionFacts(
                           nodes=g.facts.nodes, forward_order=(0, 1), backward_order=(1, 0),
                           externals=(("input", 5),), returned=((1, 0),)))
    assert changed != g
    s = ls.CanonicalStrategy(g, [{0}, {0, 1}])
    ls.save_strategy(s, tmp_path / "s.json")
    assert ls.load_strategy(tmp_path / "s.json", graph=g).schedule.events == s.schedule.events
    with pytest.raises(ls.StrategyError, match="different graph"):
        ls.load_strategy(tmp_path / "s.json", graph=changed)


@pytest.mark.parametrize("bad, match", [
    (dict(forward_order=(1, 0)), "before its input"),
    (dict(backward_order=(0, 1)), "before its consumer"),
    (dict(returned=((5, 0),)), "returned entry"),
    (dict(seeds=((0, 0),)), "seed must be a returned output"),
])
def test_facts_that_do_not_fit_raise(bad, match):
    nodes = (ls.NodeFacts(outputs=(4,), args=(), output_views=(-1,), plain_free_after=(-1,)),
             ls.NodeFacts(outputs=(4,), args=((0, 0),), grad_args=(True,), output_views=(-1,),
                          grad_views=(-1,), plain_free_after=(-1,)))
    kw = dict(nodes=nodes, forward_order=(0, 1), backward_order=(1, 0), returned=((1, 0),))
    kw.update(bad)
    with pytest.raises(ls.GraphError, match=match):
        ls.Graph([0, 1], [(0, 1)], {0: 1, 1: 1}, {0: 4, 1: 4}, facts=ls.ExecutionFacts(**kw))


@pytest.mark.parametrize("at, match", [
    ((4,), r"entry 4 is not the index of an external array \(0..3\)"),
    ((0,), "external of kind 'input', not a parameter"),
    ((1, 1), "entry 1: it repeats"),
    ((2,), r"made during the step \(external_made 0\)"),
    ((3,), "summed into external 1's"),
])
def test_grads_at_start_that_do_not_fit_raise(at, match):
    # an input, a parameter, one made in the step, a view of the parameter (a transpose)
    nf = ls.NodeFacts(outputs=(4,), args=((-1, 0), (-3, 0), (-4, 0)), grad_args=(False,) * 3,
                      output_views=(-1,), grad_views=(-1,) * 3, plain_free_after=(-1,))
    kw = dict(nodes=(nf,), forward_order=(0,), backward_order=(0,), returned=((0, 0),),
              externals=(("input", 4), ("param", 8), ("param", 8), ("param", 0)),
              external_bases=(-1, -1, -1, 1), external_made=(-1, -1, 0, -1),
              external_free_after=(-1,) * 4)
    ok = ls.Graph([0], [], {0: 1}, {0: 4}, facts=ls.ExecutionFacts(**kw, grads_at_start=(1,)))
    assert ok.facts.resident == 4 + 8 + 0 + 8
    back = ls.ExecutionFacts.from_dict(ok.facts.to_dict())
    assert back == ok.facts and back.grads_at_start == (1,)
    assert ok != ls.Graph([0], [], {0: 1}, {0: 4}, facts=ls.ExecutionFacts(**kw))
    with pytest.raises(ls.GraphError, match=match):
        ls.Graph([0], [], {0: 1}, {0: 4}, facts=ls.ExecutionFacts(**kw, grads_at_start=at))


def test_default_facts_are_the_papers_conservative_model():
    g = ls.Graph.chain(4, memory=3)
    f = ls.default_facts(g)
    assert all(nf.reads_args == tuple(range(len(nf.args))) and nf.reads_outputs == (0,)
               for nf in f.nodes)
    assert f.backward_order == (3, 2, 1, 0) and f.returned == f.seeds == ((3, 0),)
    assert np.all([nf.outputs == (3,) for nf in f.nodes])


def test_every_backward_is_scheduled_with_many_seeds():
    # four isolated nodes each seed the backward pass: 7 backward events and a free_grad
    # each, more events than compute events, frees and seeds together (the kernel's event
    # arrays have room for a free_grad per backward)
    g = ls.Graph(range(7), [(6, 1), (1, 4), (3, 4), (3, 2)], dict.fromkeys(range(7), 1),
                 dict.fromkeys(range(7), 5))
    s = ls.CanonicalStrategy(g, [set(range(7))])
    events = ls.schedule(s).events
    assert sum(e.kind == "backward" for e in events) == 7
    assert list(events) == list(reference_events(s)[0])
