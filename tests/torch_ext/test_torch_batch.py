"""torch_ext.max_batch_size and extrapolate: against graphs traced directly, steps measured
here, and a stand-in for torch.cuda (the cap logic, tested without a GPU)."""

import types

import pytest

torch = pytest.importorskip("torch")

import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import lowerset  # noqa: E402
import torch_ext  # noqa: E402
from torch_ext import (  # noqa: E402
    BatchScalingError,
    NoBatchFitsError,
    RecomputeContext,
    extrapolate,
    max_batch_size,
    trace,
)
from torch_ext import batch as batch_mod  # noqa: E402
from torch_ext.measure import MemoryMeter  # noqa: E402
from torch_ext.trace import TARGET_TOTAL_COST  # noqa: E402

MAX = 64
LIMIT = 1_500_000
# PyTorch's CPU allocator events do not vary between two runs of one step; one sample of the
# batch adds about 50 KB (least peak) to 74 KB (plain step), so this slack cannot hide an
# answer off by one.
NOISE = 4096


class CNN(nn.Module):
    """Convolutions with BatchNorm and a residual add at 16x16, a linear head."""

    def __init__(self, c=8):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(3, c, 3, padding=1), nn.BatchNorm2d(c)
        self.c2, self.b2 = nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c)
        self.c3 = nn.Conv2d(c, c, 3, padding=1)
        self.fc = nn.Linear(c * 16 * 16, 10)

    def forward(self, x):
        h = F.relu(self.b1(self.c1(x)))
        h = F.relu(self.b2(self.c2(h))) + h
        h = torch.tanh(self.c3(h))
        return self.fc(h.flatten(1))


@pytest.fixture(scope="module")
def cnn():
    """The model, a loss_fn slicing a preallocated batch, graphs traced at 2, 4 and 7."""
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    model = CNN().train()
    x = torch.randn(MAX, 3, 16, 16, generator=gen)
    t = torch.randint(0, 10, (MAX,), generator=gen)

    def loss_fn(b):
        return F.cross_entropy(model(x[:b]), t[:b])

    traced = {b: trace(lambda b=b: loss_fn(b), model=model) for b in (2, 4, 7)}
    return model, loss_fn, traced


@pytest.fixture(scope="module")
def searches(cnn):
    """max_batch_size at LIMIT for the plain step and the planner (searched once)."""
    model, loss_fn, traced = cnn
    return {p: max_batch_size(loss_fn, LIMIT, p, method="approx", traced=traced, model=model)
            for p in (None, "lowerset")}


def measured_whole_step(model, loss_fn, b, strategy, resident):
    """Independent measurement of one training step at batch b (whole-step bytes)."""
    model.zero_grad(set_to_none=True)
    with MemoryMeter("cpu") as m:
        if strategy is None:
            loss_fn(b).backward()
        else:
            with RecomputeContext(strategy):
                loss_fn(b).backward()
    model.zero_grad(set_to_none=True)
    return m.result.peak + resident


class TestExtrapolate:
    def test_matches_a_graph_traced_at_that_batch(self, cnn):
        _, _, traced = cnn
        e, t = extrapolate({2: traced[2], 4: traced[4]}, 7), traced[7]
        assert isinstance(e, torch_ext.TracedGraph) and e.device == t.device
        assert e.n == t.n and e.edges == t.edges
        for key in ("op", "inputs", "outputs", "flops"):
            assert [e.attrs[v][key] for v in e.labels] == [t.attrs[v][key] for v in t.labels]
        assert [nf.outputs for nf in e.facts.nodes] == [nf.outputs for nf in t.facts.nodes]
        assert e.facts.externals == t.facts.externals
        assert e.facts.external_sizes == t.facts.external_sizes
        assert e.memory.tolist() == t.memory.tolist()
        assert e.flop_unit == t.flop_unit and e.cost.tolist() == t.cost.tolist()
        pe, pt = lowerset.schedule(e).peak, lowerset.schedule(t).peak
        assert abs(pe - pt) <= 0.02 * pt
        x_in = [a for a in e.attrs[0]["inputs"] if a[0] == "input"][0]
        assert x_in[1] == [7, 3, 16, 16]   # the batch's first dimension

    def test_costs_take_the_flop_unit_of_the_new_total(self, cnn):
        _, _, traced = cnn
        e = extrapolate(traced, 64)
        assert e.flop_unit == 10 * traced[4].flop_unit   # 16x the FLOPs of batch 4
        assert e.total_cost() <= TARGET_TOTAL_COST

    def test_a_strategy_planned_on_it_runs_at_that_batch(self, cnn):
        model, loss_fn, traced = cnn
        g = extrapolate({2: traced[2], 4: traced[4]}, 9)
        s = lowerset.min_peak(g, "approx")
        ctx = RecomputeContext(s, record=True)
        model.zero_grad(set_to_none=True)
        with ctx:   # the context checks every shape against the graph
            loss_fn(9).backward()
        model.zero_grad(set_to_none=True)
        assert ctx.last_step["recomputed"] == list(s.schedule.recomputed)
        assert ctx.events == list(s.schedule.events)

    def test_structure_must_not_change(self):
        w = torch.ones(4, 4, requires_grad=True)

        def graph(b):
            x = torch.ones(b, 4)

            def f():
                h = torch.relu(x @ w)
                if b > 2:
                    h = torch.tanh(h)
                return h.sum()
            return trace(f)
        with pytest.raises(BatchScalingError, match="differ in structure"):
            extrapolate({2: graph(2), 4: graph(4)}, 8)
        with pytest.raises(BatchScalingError, match="two batch sizes"):
            extrapolate({2: graph(2)}, 8)


class TestMaxBatchSizeCPU:
    """The answer is checked against steps measured here: b fits the limit, b + 1 does not."""

    @pytest.mark.parametrize("planner", [None, "lowerset"])
    def test_answer_fits_and_next_does_not(self, cnn, searches, planner):
        model, loss_fn, traced = cnn
        r = searches[planner]
        resident = r.graph.facts.resident
        assert r.device == "cpu" and r.confirmed and r.memory_limit == LIMIT
        assert (r.strategy is None) == (planner is None)
        ours = measured_whole_step(model, loss_fn, r.batch_size, r.strategy, resident)
        assert r.measured_peak <= LIMIT and ours <= LIMIT + NOISE
        g = extrapolate(traced, r.batch_size + 1)
        nxt = None if planner is None else lowerset.min_peak(g, "approx")
        assert measured_whole_step(model, loss_fn, r.batch_size + 1, nxt,
                                   g.facts.resident) > LIMIT - NOISE
        assert abs(r.predicted_peak - r.measured_peak) <= 0.03 * r.measured_peak
        assert r.next_trial.batch_size == r.batch_size + 1 and not r.next_trial.fits

    def test_recomputation_fits_a_larger_batch(self, searches):
        assert searches["lowerset"].batch_size > searches[None].batch_size

    def test_leaves_gradients_buffers_and_random_state_as_they_were(self, cnn, searches):
        model, loss_fn, traced = cnn
        loss_fn(2).backward()
        grads = {k: p.grad for k, p in model.named_parameters()}
        buffers = {k: b.clone() for k, b in model.named_buffers()}
        rng = torch.get_rng_state()
        r = max_batch_size(loss_fn, LIMIT, None, traced=traced, model=model)
        assert r.batch_size == searches[None].batch_size
        assert all(p.grad is grads[k] for k, p in model.named_parameters())
        assert all(torch.equal(b, buffers[k]) for k, b in model.named_buffers())
        assert torch.equal(torch.get_rng_state(), rng)
        model.zero_grad(set_to_none=True)

    def test_parameters_found_from_the_loss(self, cnn):
        model, loss_fn, _ = cnn
        found = batch_mod._parameters_of(loss_fn(2))
        assert {id(p) for p in found} == {id(p) for p in model.parameters()}

    def test_errors(self, cnn):
        model, loss_fn, traced = cnn
        with pytest.raises(NoBatchFitsError, match="does not fit 1000 bytes") as e:
            max_batch_size(loss_fn, 1000, None, traced=traced, model=model)
        assert e.value.min_budget > 1000 and e.value.batch_size == 1
        assert isinstance(e.value, lowerset.InfeasibleBudgetError)
        assert isinstance(e.value, torch_ext.TorchExtError)
        with pytest.raises(lowerset.ArgumentError, match="unknown planner"):
            max_batch_size(loss_fn, 10**9, "checkmate", traced=traced)
        with pytest.raises(lowerset.ArgumentError, match="cannot read the size"):
            max_batch_size(loss_fn, "lots", None, traced=traced)


# -- the CUDA cap, without a GPU ------------------------------------------------------------------


class FakeOOM(Exception):
    """Stands in for torch.cuda.OutOfMemoryError."""


class FakeCuda:
    """The part of torch.cuda that _CudaCap uses; records every memory fraction set."""

    OutOfMemoryError = FakeOOM

    def __init__(self, total=10_000, allocated=1000):
        self.total, self.allocated = total, allocated
        self.fraction, self.fractions, self.emptied = 1.0, [], 0

    def get_per_process_memory_fraction(self, device=None):
        return self.fraction

    def set_per_process_memory_fraction(self, fraction, device=None):
        self.fraction = fraction
        self.fractions.append(fraction)

    def get_device_properties(self, device=None):
        return types.SimpleNamespace(total_memory=self.total)

    def memory_allocated(self, device=None):
        return self.allocated

    def empty_cache(self):
        self.emptied += 1

    def reset_peak_memory_stats(self, device=None):
        self.reserved_peak, self.resets = 0, getattr(self, "resets", 0) + 1

    def max_memory_reserved(self, device=None):
        return self.reserved_peak


def test_cuda_cap_sets_and_restores_the_memory_fraction():
    cuda = FakeCuda()
    cuda.fraction = 0.9
    cap = batch_mod._CudaCap("cuda:0", cuda=cuda, measure=lambda step: step() or 500)
    ran = []

    def step():
        ran.append((cuda.fraction, cuda.resets))
        cuda.reserved_peak = 1900   # the allocator's reserve, counted from the reset
    fits, measured, err, held = cap.run(step, 2000, resident=0)
    assert ran == [(0.2, 1)]                  # under 2000 of 10,000 bytes, peaks reset first
    assert cuda.fraction == 0.9 and cuda.fractions == [0.2, 0.9]
    assert (fits, measured, err) == (True, 1500, None)   # allocated at the start + the peak
    assert held == 1900
    assert cuda.emptied == 2
    assert cap.run(lambda: None, 1400, resident=0)[:2] == (False, 1500)


def test_cuda_cap_out_of_memory_is_no_fit_and_the_fraction_is_restored():
    cuda = FakeCuda()

    def oom(step):
        cuda.reserved_peak = 2000
        raise FakeOOM("CUDA out of memory. Tried to allocate 4.00 MiB")
    cap = batch_mod._CudaCap("cuda:0", cuda=cuda, measure=oom)
    fits, measured, err, held = cap.run(lambda: None, 2000, resident=0)
    assert (fits, measured) == (False, None) and "FakeOOM" in err and "4.00 MiB" in err
    assert held == 2000
    assert cuda.fraction == 1.0


def test_cuda_cap_other_errors_propagate():
    cuda = FakeCuda()

    def boom(step):
        raise ValueError("a bug in the step")
    cap = batch_mod._CudaCap("cuda:0", cuda=cuda, measure=boom)
    with pytest.raises(ValueError, match="a bug"):
        cap.run(lambda: None, 2000, resident=0)
    assert cuda.fraction == 1.0


def test_gradients_are_none_in_every_real_step_and_come_back(cnn):
    # the user's gradients must not sit on the device under the real steps' cap
    model, loss_fn, traced = cnn
    params = list(model.parameters())
    loss_fn(2).backward()
    grads = {id(p): p.grad for p in params}
    seen = []

    class Recording(batch_mod._CpuCap):
        def run(self, step, limit, resident):
            seen.append(all(p.grad is None for p in params))
            return super().run(step, limit, resident)

    batch_mod._search(loss_fn, LIMIT, None, "approx", params, dict(traced), MAX, 8, Recording())
    assert seen and all(seen)
    assert all(p.grad is grads[id(p)] for p in params)
    model.zero_grad(set_to_none=True)


def test_search_under_an_enforcing_cap(cnn, searches):
    """The search with the CUDA cap: a stand-in allocator that raises out of memory when a
    step measured on the CPU passes the fraction; the plain step at our batch runs out of
    memory, the planned one runs."""
    model, loss_fn, traced = cnn
    cuda = FakeCuda(total=10 * LIMIT, allocated=0)
    resident = traced[2].facts.resident

    def enforcing(step):
        with MemoryMeter("cpu") as m:
            step()
        if m.result.peak + resident > cuda.fraction * cuda.total:
            raise FakeOOM(f"out of memory (fraction {cuda.fraction})")
        return m.result.peak + resident

    cap = batch_mod._CudaCap("cuda:0", cuda=cuda, measure=enforcing)
    params = list(model.parameters())
    ours = batch_mod._search(loss_fn, LIMIT, "lowerset", "approx", params, dict(traced), MAX,
                             8, cap)
    assert ours.device == "cuda:0" and ours.batch_size == searches["lowerset"].batch_size
    assert ours.next_trial.error is not None and "FakeOOM" in ours.next_trial.error
    b = ours.batch_size
    assert cap.run(batch_mod._make_step(loss_fn, b, None, params), LIMIT, 0)[0] is False
    fits, measured, err, _ = cap.run(batch_mod._make_step(loss_fn, b, ours.strategy, params),
                                     LIMIT, 0)
    assert fits and err is None and measured <= LIMIT
    assert cuda.fraction == 1.0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_enforced_cap_gpu():  # pragma: no cover - GPU
    torch.manual_seed(0)
    model = CNN(c=32).cuda().train()
    x = torch.randn(1024, 3, 16, 16, device="cuda")
    t = torch.randint(0, 10, (1024,), device="cuda")

    def loss_fn(b):
        return F.cross_entropy(model(x[:b]), t[:b])

    limit = 256 * 2**20
    # cuDNN picks its algorithms, and their workspace, by batch size, and the limit counts the
    # allocator's cached blocks: the prediction from the traces at 2 and 4 can miss the largest
    # batch by a few percent either way, which the real runs away from it find
    ours = max_batch_size(loss_fn, limit, "lowerset", method="approx", model=model,
                          max_batch=1024)
    plain = max_batch_size(loss_fn, limit, None, traced=ours.traced, model=model,
                           max_batch=1024)
    assert ours.device.startswith("cuda") and ours.batch_size > plain.batch_size
    assert ours.measured_peak <= limit
    assert torch.cuda.get_per_process_memory_fraction() == 1.0
