"""lowerset.batching without a framework: affine extrapolation of hand-made traced graphs, the
search against a stand-in planner and stand-in real steps, all with hand-computed values."""

import dataclasses
import types
import warnings

import pytest

import lowerset as ls
from lowerset import batching
from lowerset.batching import Affine, FrontEnd, extrapolate, search


def traced(b, *, op="relu", extra_node=False):
    """A chain 0 -> 1 -> 2 'traced' at batch b: outputs of 100*b bytes, forward workspace
    7*b + 3, a parameter of 40 bytes and an input of 12*b (its gradient size too), costs 5*b,
    an attribute `op` on node 1."""
    g = ls.Graph.chain(4 if extra_node else 3, memory=100 * b)
    f = ls.default_facts(g)
    nodes = tuple(dataclasses.replace(nf, forward_peak=7 * b + 3) for nf in f.nodes)
    facts = dataclasses.replace(f, nodes=nodes, externals=(("param", 40), ("input", 12 * b)),
                                external_sizes=(40, 12 * b))
    attrs = {v: {"op": op if v == 1 else "mm"} for v in g.labels}
    return ls.Graph(g.labels, g.edges, {v: 5 * b for v in g.labels},
                    {v: 100 * b for v in g.labels}, attrs=attrs, facts=facts)


class TestAffine:
    def test_values_through_two_points(self):
        at = Affine((2, 4), 10)
        assert at.exact(200, 400, "x") == 1000            # 200 + (400 - 200) * 8 / 2
        assert at.exact(40, 40, "x") == 40                # constant
        assert Affine((2, 4), 3).rounded(10, 15, "x") == 12    # 12.5 rounds to even
        assert Affine((2, 4), 5).rounded(10, 15, "x") == 18    # 17.5 rounds to even
        assert Affine((2, 4), 1).rounded(10, 40, "x") == 0     # -5: a measured size, 0
        assert at.shape([2, 3, 16], [4, 3, 16], "x") == [10, 3, 16]

    def test_errors(self):
        with pytest.raises(ls.BatchScalingError, match="no integer at batch 3"):
            Affine((2, 4), 3).exact(10, 15, "node 0 output")
        with pytest.raises(ls.BatchScalingError, match="extrapolates to -5"):
            Affine((2, 4), 1).exact(10, 40, "bytes")
        with pytest.raises(ls.BatchScalingError, match="differ in rank"):
            Affine((2, 4), 8).shape([2, 3], [4, 3, 1], "input")

    def test_the_error_class_is_the_front_end_s(self):
        class Mine(ls.BatchScalingError):
            pass
        with pytest.raises(Mine):
            Affine((2, 4), 3, Mine).exact(10, 15, "x")


class TestExtrapolate:
    def test_every_size_by_hand(self):
        e = extrapolate({2: traced(2), 4: traced(4)}, 10)
        assert e.memory.tolist() == [1000, 1000, 1000]
        assert e.cost.tolist() == [50, 50, 50]
        assert [nf.outputs for nf in e.facts.nodes] == [(1000,)] * 3
        assert [nf.forward_peak for nf in e.facts.nodes] == [73] * 3
        assert e.facts.externals == (("param", 40), ("input", 120))
        assert e.facts.external_sizes == (40, 120)
        assert e.facts.resident == 160
        assert e.attrs[1] == {"op": "relu"} and e.edges == traced(2).edges
        assert e.facts.forward_order == (0, 1, 2)

    def test_equals_a_graph_traced_there(self):
        e = extrapolate({2: traced(2), 4: traced(4)}, 7)
        assert e.facts == traced(7).facts and e.memory.tolist() == traced(7).memory.tolist()
        assert ls.schedule(e).peak == ls.schedule(traced(7)).peak

    def test_a_traced_size_is_returned_as_it_is(self):
        g = {2: traced(2), 4: traced(4), 7: traced(7)}
        assert extrapolate(g, 4) is g[4]
        assert extrapolate(g, 7) is not g[7]   # from the two smallest

    def test_structure_and_attributes_must_not_change(self):
        with pytest.raises(ls.BatchScalingError, match="two batch sizes"):
            extrapolate({2: traced(2)}, 8)
        with pytest.raises(ls.BatchScalingError, match="differ in structure"):
            extrapolate({2: traced(2), 4: traced(4, extra_node=True)}, 8)
        with pytest.raises(ls.BatchScalingError, match="node 1: its attributes"):
            extrapolate({2: traced(2), 4: traced(4, op="tanh")}, 8)

    def test_a_front_end_scales_its_attributes_and_builds_its_graph(self):
        calls = []

        class Shapes(FrontEnd):
            def scale_attrs(self, v, a1, a2, at):
                return {"shape": at.shape(a1["shape"], a2["shape"], f"node {v}")}

            def build(self, like, **parts):
                calls.append(like)
                return super().build(like, **parts)

        def shaped(b):
            g = traced(b)
            return ls.Graph(g.labels, g.edges, dict(zip(g.labels, g.cost.tolist())),
                            dict(zip(g.labels, g.memory.tolist())),
                            attrs={v: {"shape": [b, 8]} for v in g.labels}, facts=g.facts)
        g2 = shaped(2)
        e = extrapolate({2: g2, 4: shaped(4)}, 6, Shapes())
        assert [e.attrs[v]["shape"] for v in e.labels] == [[6, 8]] * 3
        assert calls == [g2]

    def test_check_extrapolation(self):
        batching.check_extrapolation({2: traced(2), 4: traced(4), 7: traced(7)})
        bad = traced(7)
        bad = ls.Graph(bad.labels, bad.edges, dict(zip(bad.labels, bad.cost.tolist())),
                       {v: 701 for v in bad.labels}, attrs=bad.attrs, facts=bad.facts)
        with pytest.raises(ls.BatchScalingError, match="not affine"):
            batching.check_extrapolation({2: traced(2), 4: traced(4), 7: bad})


# -- the search -----------------------------------------------------------------------------------

# a stand-in planner: its plan at batch b (read off M_v = 100*b) has the peak 500 + 30*b bytes
BASE, SLOPE = 500, 30


def batch_of(graph):
    return int(graph.memory[0]) // 100


def stand_in(calls=None):
    def affine_plan(graph, limit):
        b = batch_of(graph)
        if calls is not None:
            calls.append(b)
        return types.SimpleNamespace(schedule=types.SimpleNamespace(peak=BASE + SLOPE * b),
                                     batch=b)
    return affine_plan


def real_steps(offset=0, runs=None):
    """Stand-in real steps: a step at b measures its plan's peak plus `offset` samples."""
    def run(b, strategy, graph):
        assert strategy.batch == b == batch_of(graph)   # planned on the graph at b
        if runs is not None:
            runs.append(b)
        measured = BASE + SLOPE * (b + offset)
        return measured <= LIMIT, measured, None
    return run


LIMIT = 2000   # 500 + 30*b <= 2000 up to b = 50


class TestSearch:
    graphs = {2: traced(2), 4: traced(4)}

    def test_the_prediction_confirmed(self):
        calls, runs = [], []
        r = search(self.graphs, LIMIT, real_steps(runs=runs), stand_in(calls))
        assert r.batch_size == 50 and r.predicted_batch_size == 50 and r.confirmed
        assert r.measured_peak == r.predicted_peak == 2000
        assert runs == [50, 51] and r.next_trial.batch_size == 51 and not r.next_trial.fits
        assert [t.plan for t in r.trials] == ["affine_plan"] * 2
        assert r.planner == "affine_plan" and r.memory_limit == LIMIT and r.device == "cpu"
        assert r.predictions[50] == 2000 and r.predictions[51] == 2030
        # the slope between batches 2 and 4 guesses 50 at once: planned at 2, 4, 50, 51 only
        assert sorted(set(calls)) == [2, 4, 50, 51] and len(calls) == len(set(calls))
        assert batch_of(r.graph) == 50 and r.traced is self.graphs

    def test_real_steps_move_the_answer_down_and_up(self):
        # real steps fit up to 48: steps of 1 and 2 below 50 find a fit; 49 is known not to fit
        down = search(self.graphs, LIMIT, real_steps(offset=2), stand_in())
        assert down.batch_size == 48 and down.predicted_batch_size == 50 and down.confirmed
        assert [t.batch_size for t in down.trials] == [50, 49, 48]
        assert down.next_trial.batch_size == 49 and not down.next_trial.fits
        # up to 53: 51 and 52 fit, 54 does not, and the bisection tries 53
        up = search(self.graphs, LIMIT, real_steps(offset=-3), stand_in())
        assert up.batch_size == 53 and up.confirmed and up.next_trial.batch_size == 54
        assert [t.batch_size for t in up.trials] == [50, 51, 52, 54, 53]

    @pytest.mark.parametrize("offset", [-700, -300, -37, -1, 0, 1, 9, 30, 47, 49])
    def test_far_from_the_prediction_the_runs_grow_as_a_logarithm(self, offset):
        """Real steps that fit up to 50 - offset (the prediction is 50): the answer is that
        batch, b + 1 is shown not to fit, and the runs are about 2 log2 of the distance."""
        runs = []
        r = search(self.graphs, LIMIT, real_steps(offset=offset, runs=runs), stand_in(),
                   max_batch=1 << 12, max_steps=12)
        want = 50 - offset
        assert r.batch_size == want and r.confirmed
        assert r.next_trial.batch_size == want + 1 and not r.next_trial.fits
        assert r.trials[-1].batch_size in (want, want + 1)
        fit = {t.batch_size for t in r.trials if t.fits}
        assert max(fit) == want and all(t.fits == (t.batch_size <= want) for t in r.trials)
        assert len(runs) == len(set(runs)) <= 2 + 2 * max(1, abs(offset)).bit_length()

    def test_by_default_the_search_goes_down_to_a_third_of_the_prediction(self):
        # an allocator that holds more than the bytes in use (out of memory from 20,001 on):
        # the default max_steps still reaches the answer from a prediction of 60,000
        limit = BASE + SLOPE * 60_000

        def run(b, strategy, graph):
            fits = b <= 20_000
            return fits, BASE + SLOPE * b if fits else None, None if fits else "out of memory"
        r = search(self.graphs, limit, run, stand_in())
        assert r.predicted_batch_size == 60_000 and r.batch_size == 20_000 and r.confirmed

    def test_held_bytes_recorded_where_the_run_reads_them(self):
        # a device's run reports what its allocator held (here 7 bytes per sample above the
        # measured peak); a run without it leaves the trial's held_peak None
        def run(b, strategy, graph):
            measured = BASE + SLOPE * b
            return measured <= LIMIT, measured, None, measured + 7 * b
        r = search(self.graphs, LIMIT, run, stand_in())
        assert [(t.batch_size, t.held_peak) for t in r.trials] == [(50, 2350), (51, 2387)]
        r = search(self.graphs, LIMIT, real_steps(), stand_in())
        assert all(t.held_peak is None for t in r.trials)

    def test_max_steps_up_warns_and_leaves_it_unconfirmed(self):
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            r = search(self.graphs, LIMIT, real_steps(offset=-10), stand_in(), max_steps=2)
        assert r.batch_size == 52 and not r.confirmed and r.next_trial is None
        assert any("max_steps=2" in str(x.message) for x in w)

    def test_max_batch_bounds_the_answer(self):
        r = search(self.graphs, LIMIT, real_steps(), stand_in(), max_batch=20)
        assert r.batch_size == 20 and r.confirmed and r.next_trial is None

    def test_doubling_and_bisection_when_the_guess_is_off(self):
        # peaks 500 + 30*b from batch 5 on, but 0 at batches 2 and 4: the slope guesses
        # 3, then doubling (4, 6, 10, 18, 34, then 66 does not fit) and bisection find 50
        def flat_then_affine(graph, limit):
            b = batch_of(graph)
            peak = 0 if b in (2, 4) else BASE + SLOPE * b
            return types.SimpleNamespace(schedule=types.SimpleNamespace(peak=peak), batch=b)
        r = search(self.graphs, LIMIT, real_steps(), flat_then_affine)
        assert r.predicted_batch_size == 50 and r.batch_size == 50

    def test_nothing_fits(self):
        class Mine(ls.NoBatchFitsError):
            pass
        front = type("Front", (FrontEnd,), {"no_fit_error": Mine})()
        with pytest.raises(Mine, match="batch size 1 does not fit 100 bytes") as e:
            search(self.graphs, 100, real_steps(), stand_in(), front=front)
        assert e.value.min_budget == BASE + SLOPE and e.value.batch_size == 1
        assert isinstance(e.value, ls.InfeasibleBudgetError) and e.value.budget == 100
        # steps of 1, 2 and 4 below 50 (49, 48, 46) do not fit either
        with pytest.raises(ls.NoBatchFitsError, match="from 50 down to 46 fits") as e:
            search(self.graphs, LIMIT, real_steps(offset=100), stand_in(), max_steps=3)
        assert e.value.batch_size == 46 and e.value.min_budget == BASE + SLOPE * 146
        # down to batch 1, which does not fit
        with pytest.raises(ls.NoBatchFitsError, match="down to 1 fits"):
            search(self.graphs, LIMIT, real_steps(offset=100), stand_in(), max_steps=12)
        # a device that enforces the limit: the error names what the last run said

        def out_of_memory(b, strategy, graph):
            return False, None, f"OutOfMemoryError: allocating {b} bytes"
        with pytest.raises(ls.NoBatchFitsError,
                           match="measured nothing: OutOfMemoryError: allocating 46 bytes"):
            search(self.graphs, LIMIT, out_of_memory, stand_in(), max_steps=3)

    def test_a_planner_without_a_plan_has_no_prediction(self):
        def never(graph, limit):
            raise ls.InfeasibleBudgetError(limit)
        with pytest.raises(ls.NoBatchFitsError, match="finds no plan"):
            search(self.graphs, LIMIT, real_steps(), never)


class TestPlanners:
    def test_plain_and_lowerset_on_a_chain(self):
        g = traced(4)
        plain = ls.schedule(g).peak
        plans, least = batching.predict(g, 10**9, None)
        assert plans == [("plain", None, plain)] and least == plain
        assert batching.least_peak(g, 10**9, None) == plain
        low = ls.pareto(g)[-1].schedule.peak
        assert batching.least_peak(g, 10**9, "lowerset") == low <= plain
        plans, least = batching.predict(g, low, "lowerset")
        assert least == low and all(p <= low for _, _, p in plans)
        plans, least = batching.predict(g, low - 1, "lowerset")   # below: the least peak only
        assert [name for name, _, _ in plans] == ["lowerset (least peak)"]

    def test_names(self):
        assert batching.planner_name(None) == "plain"
        assert batching.planner_name("chen") == "chen"
        assert batching.planner_name(stand_in()) == "affine_plan"

    def test_check_arguments(self):
        assert batching.check_arguments("6MB", "chen", [4, 2, 4]) == (6_000_000, [2, 4])
        with pytest.raises(ls.ArgumentError, match="unknown planner"):
            batching.check_arguments(10**9, "checkmate", (2, 4))
        with pytest.raises(ls.ArgumentError, match="two distinct"):
            batching.check_arguments(10**9, None, (2, 2))
        with pytest.raises(ls.ArgumentError, match="two distinct"):
            batching.check_arguments(10**9, None, (0, 2))
        with pytest.raises(ls.ArgumentError, match="cannot read the size"):
            batching.check_arguments("lots", None, (2, 4))
        with pytest.raises(ls.ArgumentTypeError, match="memory_limit"):
            batching.check_arguments([1], None, (2, 4))

    def test_traced_graphs_traces_what_is_missing_and_checks(self):
        seen = []

        def trace_at(b):
            seen.append(b)
            return traced(b)
        out = batching.traced_graphs(trace_at, [2, 4, 7], {4: traced(4)})
        assert seen == [2, 7] and sorted(out) == [2, 4, 7]
