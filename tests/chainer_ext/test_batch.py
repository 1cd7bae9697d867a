"""max_batch_size and extrapolate: against graphs traced directly, real measured steps, and a
stand-in for CuPy's memory pool (the cap logic, tested without CuPy)."""

import types

import pytest

pytest.importorskip("chainer_ext")
chainer = pytest.importorskip("chainer")

import chainer.functions as F  # noqa: E402
import numpy as np  # noqa: E402

import lowerset  # noqa: E402
from chainer_ext import (  # noqa: E402
    BatchScalingError,
    NoBatchFitsError,
    RecomputeHook,
    extrapolate,
    max_batch_size,
    peak_memory,
    trace,
)
from chainer_ext import batch as batch_mod  # noqa: E402
from chainer_ext_nets import ResNetLike, _image_batch  # noqa: E402

MAX = 64


@pytest.fixture(scope="module")
def resnet():
    """A small residual network and a loss_fn slicing a preallocated batch."""
    np.random.seed(0)
    model = ResNetLike(ch=16, n_blocks=3)
    x, t = _image_batch(MAX, size=16)

    def loss_fn(b):
        with chainer.using_config("train", True):
            return F.softmax_cross_entropy(model(x[:b]), t[:b])

    traced = {b: trace(lambda b=b: loss_fn(b)) for b in (2, 4, 7)}
    return model, loss_fn, traced


LIMIT = 6_000_000
# Two measurements of one step differ by the Python objects tracemalloc sees (a few KB); one
# sample of the batch adds hundreds of KB (0.58 MB to the plain step), so this slack cannot
# hide an answer off by one.
NOISE = 64 * 1024


@pytest.fixture(scope="module")
def searches(resnet):
    """max_batch_size at LIMIT for each named planner (searched once for the module)."""
    _, loss_fn, traced = resnet
    return {p: max_batch_size(loss_fn, LIMIT, p, method="approx", traced=traced)
            for p in (None, "chen", "lowerset")}


def measured_whole_step(model, loss_fn, b, strategy, resident):
    """Independent measurement of one training step at batch b (whole-step bytes)."""
    def step():
        model.cleargrads()
        hook = RecomputeHook(strategy) if strategy is not None else None
        if hook is None:
            loss_fn(b).backward()
        else:
            with hook:
                loss_fn(b).backward()
    r = peak_memory(step, params=model)
    model.cleargrads()
    return r.peak + resident


class TestExtrapolate:
    def test_matches_a_graph_traced_at_that_batch(self, resnet):
        _, _, traced = resnet
        e = extrapolate({2: traced[2], 4: traced[4]}, 7)
        t = traced[7]
        assert e.n == t.n and e.edges == t.edges
        assert [e.attrs[v]["outputs"] for v in e.labels] == [t.attrs[v]["outputs"]
                                                             for v in t.labels]
        assert [e.attrs[v]["inputs"] for v in e.labels] == [t.attrs[v]["inputs"]
                                                            for v in t.labels]
        assert [nf.outputs for nf in e.facts.nodes] == [nf.outputs for nf in t.facts.nodes]
        assert [nf.state for nf in e.facts.nodes] == [nf.state for nf in t.facts.nodes]
        assert e.facts.externals == t.facts.externals
        assert e.memory.tolist() == t.memory.tolist()
        pe, pt = lowerset.schedule(e).peak, lowerset.schedule(t).peak
        assert abs(pe - pt) <= 0.02 * pt
        # the input's first dimension is the batch size
        x_in = [a for a in e.attrs[0]["inputs"] if a[0] == "input"][0]
        assert x_in[1] == [7, 3, 16, 16]

    def test_a_strategy_planned_on_it_runs_at_that_batch(self, resnet):
        model, loss_fn, traced = resnet
        g = extrapolate({2: traced[2], 4: traced[4]}, 9)
        s = lowerset.min_peak(g, "approx")
        hook = RecomputeHook(s)
        model.cleargrads()
        with hook:
            loss_fn(9).backward()  # the hook checks every shape against the graph
        model.cleargrads()
        assert hook.last_iteration["recomputed"] == list(s.schedule.recomputed)

    def test_structure_must_not_change(self):
        def graph(b):
            x = chainer.Variable(np.ones((b, 4), np.float32))
            w = chainer.Parameter(np.ones((4, 4), np.float32))

            def f():
                h = F.relu(F.matmul(x, w))
                if b > 2:
                    h = F.tanh(h)
                return F.sum(h)
            return trace(f)
        with pytest.raises(BatchScalingError, match="differ in structure"):
            extrapolate({2: graph(2), 4: graph(4)}, 8)
        with pytest.raises(BatchScalingError, match="two batch sizes"):
            extrapolate({2: graph(2)}, 8)


class TestMaxBatchSizeCPU:
    """The answer is checked against steps measured here: b fits the limit, b + 1 does not."""

    @pytest.mark.parametrize("planner", [None, "chen", "lowerset"])
    def test_answer_fits_and_next_does_not(self, resnet, searches, planner):
        model, loss_fn, traced = resnet
        limit = LIMIT
        r = searches[planner]
        resident = r.graph.facts.resident
        assert r.device == "cpu" and r.confirmed and r.memory_limit == limit
        assert (r.strategy is None) == (planner is None)
        ours = measured_whole_step(model, loss_fn, r.batch_size, r.strategy, resident)
        assert r.measured_peak <= limit and ours <= limit + NOISE
        assert abs(ours - r.measured_peak) <= 0.02 * limit
        # the next batch with the planner's least-peak plan (the plain step for None) does not
        g = extrapolate(traced, r.batch_size + 1)
        nxt = None if planner is None else (lowerset.baselines.chen_sqrtn(g) if planner == "chen"
                                            else lowerset.min_peak(g, "approx"))
        assert measured_whole_step(model, loss_fn, r.batch_size + 1, nxt,
                                   g.facts.resident) > limit - NOISE
        # the prediction is close to the measurement
        assert abs(r.predicted_peak - r.measured_peak) <= 0.05 * r.measured_peak
        assert r.next_trial.batch_size == r.batch_size + 1 and not r.next_trial.fits

    def test_recomputation_fits_a_larger_batch(self, searches):
        assert searches["lowerset"].batch_size > searches[None].batch_size
        assert searches["lowerset"].batch_size >= searches["chen"].batch_size

    def test_callable_planner(self, resnet):
        _, loss_fn, traced = resnet
        calls = []

        def paper_time_centric(graph, limit):
            calls.append(graph.facts.resident)  # the inputs' bytes: one value per batch size
            eq2 = limit - graph.facts.resident - graph.param_bytes
            return lowerset.solve(graph, eq2, model="paper", mode="time", method="approx")

        r = max_batch_size(loss_fn, LIMIT, paper_time_centric, traced=traced)
        assert calls and r.planner == "paper_time_centric"
        # the search plans each batch size once: the prediction and the real runs share plans
        assert len(calls) == len(set(calls))
        assert r.strategy is not None and r.strategy.mode == "time"
        assert r.measured_peak <= LIMIT

    def test_errors(self, resnet):
        _, loss_fn, traced = resnet
        with pytest.raises(NoBatchFitsError, match="does not fit 1000 bytes") as e:
            max_batch_size(loss_fn, 1000, None, traced=traced)
        assert e.value.min_budget > 1000 and e.value.batch_size == 1
        assert isinstance(e.value, lowerset.InfeasibleBudgetError)
        with pytest.raises(lowerset.ArgumentError, match="unknown planner"):
            max_batch_size(loss_fn, 10**9, "checkmate", traced=traced)
        with pytest.raises(lowerset.ArgumentError, match="two distinct"):
            max_batch_size(loss_fn, 10**9, None, trace_batches=(2, 2), traced=traced)
        with pytest.raises(lowerset.ArgumentError, match="cannot read the size"):
            max_batch_size(loss_fn, "lots", None, traced=traced)

    def test_size_strings(self, resnet, searches):
        _, loss_fn, traced = resnet
        r = max_batch_size(loss_fn, "6MB", None, traced=traced)
        assert r.memory_limit == LIMIT and r.batch_size == searches[None].batch_size


# -- the GPU cap, without CuPy --------------------------------------------------------------------


class FakeOOM(Exception):
    """Stands in for cupy.cuda.memory.OutOfMemoryError."""


class FakePool:
    """The part of cupy's MemoryPool that _GpuCap uses; records every set_limit. `held` stands
    for the bytes the pool holds, cached free blocks included, until free_all_blocks."""

    def __init__(self, used=0):
        self.limit, self.used, self.limits, self.freed = 0, used, [], 0
        self.held = used

    def total_bytes(self):
        return self.held

    def get_limit(self):
        return self.limit

    def set_limit(self, size):
        self.limit = size
        self.limits.append(size)

    def used_bytes(self):
        return self.used

    def free_all_blocks(self):
        self.freed += 1
        self.held = self.used


def fake_cupy(pool):
    return types.SimpleNamespace(
        get_default_memory_pool=lambda: pool,
        cuda=types.SimpleNamespace(memory=types.SimpleNamespace(OutOfMemoryError=FakeOOM)))


def enforcing_measure(pool, resident):
    """Run the step for real on the CPU and raise the stand-in OOM when the whole step exceeds
    the pool's limit (what CuPy does when an allocation passes it)."""
    def measure(step):
        peak = peak_memory(step).peak
        if pool.limit and pool.used + peak + resident > pool.limit:
            raise FakeOOM(f"out of memory to allocate (limit set to {pool.limit} bytes)")
        return peak + resident
    return measure


class RecordingCap:
    """A cap that records, at each real run, whether every parameter's gradient is None, then
    runs the step on the CPU's rule."""

    device = "cpu"

    def __init__(self, params):
        self.params, self.grads_cleared = params, []

    def run(self, step, limit, resident):
        self.grads_cleared.append(all(p.grad is None for p in self.params))
        return batch_mod._CpuCap().run(step, limit, resident)


def test_gradients_are_set_aside_during_the_search_and_put_back(resnet):
    # the user's gradients must not sit on the device under the real steps' limit, and must
    # come back unchanged
    model, loss_fn, traced = resnet
    params = list(model.params())
    model.cleargrads()
    loss_fn(3).backward()
    before = {id(p): p.grad for p in params}
    cap = RecordingCap(params)
    batch_mod._search(loss_fn, LIMIT, None, "approx", params, dict(traced), MAX, 8, cap)
    assert cap.grads_cleared and all(cap.grads_cleared)
    assert all(p.grad is before[id(p)] for p in params)
    model.cleargrads()


class TestGpuCapWithoutCupy:
    def test_device_comes_from_a_forward_pass_when_every_batch_is_traced(
            self, resnet, monkeypatch):
        # a loss on the GPU, with no trace run by the call: the search must still get the GPU's
        # cap (CuPy's pool limit), not the CPU's tracemalloc meter
        _, loss_fn, traced = resnet
        pool, seen = FakePool(), []
        monkeypatch.setattr(batch_mod._backend, "device_of", lambda arrays: "gpu")
        monkeypatch.setattr(batch_mod._backend, "require_cupy", lambda what: None)
        monkeypatch.setattr(batch_mod._backend, "cupy", fake_cupy(pool), raising=False)
        monkeypatch.setattr(batch_mod, "_search", lambda *args: seen.append(args))
        max_batch_size(loss_fn, LIMIT, None, traced=traced)
        (args,) = seen
        cap, params = args[-1], args[4]
        assert isinstance(cap, batch_mod._GpuCap) and cap.device == "gpu"
        assert {id(p) for p in params} == {id(p) for p in resnet[0].params()}

    def test_sets_and_restores_the_pool_limit(self):
        pool = FakePool(used=1000)
        pool.limit = 123
        cap = batch_mod._GpuCap(fake_cupy(pool), measure=lambda step: step() or 500)
        ran = []

        def step():
            ran.append(pool.limit)
            pool.held = 1900   # the pool grew and keeps its cached blocks to the step's end
        fits, measured, err, held = cap.run(step, 2000, resident=0)
        assert ran == [2000]                 # the step ran under the limit
        assert pool.limit == 123 and pool.limits == [2000, 123]
        assert (fits, measured, err) == (True, 1500, None)
        assert held == 1900                  # read before the blocks are given back
        assert pool.freed == 2

    def test_out_of_memory_is_no_fit_and_the_limit_is_restored(self):
        pool = FakePool()

        def oom(step):
            pool.held = 1800
            raise FakeOOM("Out of memory allocating 4,096 bytes (limit set to 2000 bytes)")
        cap = batch_mod._GpuCap(fake_cupy(pool), measure=oom)
        fits, measured, err, held = cap.run(lambda: None, 2000, resident=0)
        assert (fits, measured) == (False, None) and "FakeOOM" in err and "4,096" in err
        assert held == 1800 and pool.limit == 0

    def test_other_errors_propagate(self):
        pool = FakePool()

        def boom(step):
            raise ValueError("a bug in the step")
        cap = batch_mod._GpuCap(fake_cupy(pool), measure=boom)
        with pytest.raises(ValueError, match="a bug"):
            cap.run(lambda: None, 2000, resident=0)
        assert pool.limit == 0

    def test_plain_step_at_our_batch_runs_out_of_memory_and_the_hooked_step_runs(
            self, resnet, searches):
        model, loss_fn, traced = resnet
        limit = LIMIT
        pool = FakePool()
        resident = traced[2].facts.resident
        cap = batch_mod._GpuCap(fake_cupy(pool), measure=enforcing_measure(pool, resident))
        params = list(model.params())
        ours = batch_mod._search(loss_fn, limit, "lowerset", "approx", params, dict(traced),
                                 MAX, 8, cap)
        assert ours.device == "gpu" and ours.batch_size > searches[None].batch_size
        # the plain step at our batch: out of memory under the limit; the hooked step: runs
        b = ours.batch_size
        plain_step = batch_mod._make_step(loss_fn, b, None, params)
        assert cap.run(plain_step, limit, 0)[0] is False
        hooked = batch_mod._make_step(loss_fn, b, ours.strategy, params)
        fits, measured, err, _ = cap.run(hooked, limit, 0)
        assert fits and err is None and measured <= limit
        assert pool.limit == 0
        assert ours.next_trial.error is not None and "FakeOOM" in ours.next_trial.error


def _gpu_available():
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


@pytest.mark.gpu
@pytest.mark.skipif(not _gpu_available(), reason="needs CuPy and a CUDA GPU")
def test_enforced_cap_gpu():  # pragma: no cover - GPU
    import cupy

    np.random.seed(0)
    model = ResNetLike(ch=32, n_blocks=4)
    model.to_device("@cupy:0")
    x, t = _image_batch(256, size=32)

    def loss_fn(b):
        with chainer.using_config("train", True):
            return F.softmax_cross_entropy(model(cupy.asarray(x[:b])), cupy.asarray(t[:b]))

    limit = 200 * 2**20
    ours = max_batch_size(loss_fn, limit, "lowerset", method="approx", max_batch=256)
    plain = max_batch_size(loss_fn, limit, None, traced=ours.traced, max_batch=256)
    assert ours.device == "gpu" and ours.batch_size > plain.batch_size
    assert ours.measured_peak <= limit
    pool = cupy.get_default_memory_pool()
    old = pool.get_limit()
    pool.set_limit(size=limit)
    try:
        with pytest.raises(cupy.cuda.memory.OutOfMemoryError):
            model.cleargrads()
            loss_fn(ours.batch_size).backward()
        model.cleargrads()
        with RecomputeHook(ours.strategy):
            loss_fn(ours.batch_size).backward()
    finally:
        pool.set_limit(size=old)
