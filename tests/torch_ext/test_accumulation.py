"""Gradient accumulation: steps that start with the parameters' gradients allocated
(``trace(..., accumulate_grads=True)``, ``ExecutionFacts.grads_at_start``), measured against
the schedule's prediction, bitwise against plain steps, and in max_batch_size and verify."""

import dataclasses

import pytest

torch = pytest.importorskip("torch")

import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import lowerset  # noqa: E402
import torch_ext  # noqa: E402
from torch_ext.measure import MemoryMeter  # noqa: E402
from torch_nets import first_difference  # noqa: E402

# PyTorch's CPU allocator events repeat to the byte between two runs of one step; a few
# operations whose outputs are a scalar in a larger buffer differ by 8 bytes
SLACK = 64


def _blocks(d, layers):
    """Pre-norm residual MLP blocks: LayerNorm, Linear, GELU, Linear."""
    return nn.ModuleList(
        nn.Sequential(nn.LayerNorm(d), nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
        for _ in range(layers))


class Stack(nn.Module):
    """Residual MLP blocks between an input and an output layer."""

    def __init__(self, d=64, layers=3):
        super().__init__()
        self.inp, self.out, self.blocks = nn.Linear(32, d), nn.Linear(d, 10), _blocks(d, layers)

    def forward(self, x):
        h = self.inp(x)
        for block in self.blocks:
            h = h + block(h)
        return self.out(h)


class TiedLM(nn.Module):
    """An embedding whose weight is also the output projection: its gradient comes from the
    projection first and from the embedding last."""

    def __init__(self, vocab, d=32, layers=3):
        super().__init__()
        self.emb, self.blocks = nn.Embedding(vocab, d), _blocks(d, layers)

    def forward(self, ids):
        h = self.emb(ids)
        for block in self.blocks:
            h = h + block(h)
        return F.linear(h, self.emb.weight)


#: name -> (vocabulary, layers, batch shape) of the tied models: "tied" has activations
#: enough for plans to recompute, "tied_wide" a large embedding and a short batch
TIED = {"tied": (64, 3, (4, 17)), "tied_wide": (400, 1, (2, 5))}


def _micro_batches(name):
    """(model, [loss function of each of two micro-batches])."""
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    if name == "stack":
        model = Stack()
        xs = [torch.randn(16, 32, generator=gen) for _ in range(2)]
        ts = [torch.randint(0, 10, (16,), generator=gen) for _ in range(2)]
        return model, [lambda x=x, t=t: F.cross_entropy(model(x), t) for x, t in zip(xs, ts)]
    vocab, layers, shape = TIED[name]
    model = TiedLM(vocab, layers=layers)
    ids = [torch.randint(0, vocab, shape, generator=gen) for _ in range(2)]
    return model, [lambda i=i: F.cross_entropy(model(i[:, :-1]).reshape(-1, vocab),
                                               i[:, 1:].reshape(-1)) for i in ids]


_CACHE = {}


def _net(name):
    """(model, micro-batches, graph traced with accumulate_grads, plans, saved parameters)."""
    if name not in _CACHE:
        model, fns = _micro_batches(name)
        model.train()
        graph = torch_ext.trace(fns[0], model=model, accumulate_grads=True)
        least = lowerset.min_peak(graph)
        half = (least.schedule.peak + lowerset.schedule(graph).peak) // 2
        plans = {"V": lowerset.CanonicalStrategy(graph, [set(graph.labels)], method="none"),
                 "min_peak": least, "half": lowerset.solve(graph, budget=half)}
        saved = {k: v.detach().clone() for k, v in model.state_dict().items()}
        _CACHE[name] = model, fns, graph, plans, saved
    return _CACHE[name]


def _accumulate(model, fns, saved, plan=None):
    """Both micro-batches from `saved` with zero gradients at the start (as after
    ``zero_grad(set_to_none=False)``), under `plan` or plainly; return (the gradients after
    both, the measured peak of each step above its start). A planned step runs the
    schedule's events."""
    model.load_state_dict(saved)
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    peaks = []
    for fn in fns:
        ctx = None if plan is None else torch_ext.RecomputeContext(plan, model=model,
                                                                    record=True)
        with MemoryMeter("cpu") as meter:
            if ctx is None:
                loss = fn()
                loss.backward()
            else:
                with ctx:
                    loss = fn()
                    loss.backward()
            del loss
        peaks.append(meter.result.peak)
        assert ctx is None or ctx.events == list(plan.schedule.events)
    grads = {f"grad {n}": p.grad.clone() for n, p in model.named_parameters()}
    for p in model.parameters():
        p.grad = None
    return grads, peaks


def test_the_trace_records_every_parameter_with_a_gradient():
    model, _, graph, _, _ = _net("stack")
    F_ = graph.facts
    params = [e for e, (kind, _) in enumerate(F_.externals)
              if kind == "param" and F_.external_target(e) == e]
    assert F_.grads_at_start == tuple(params)
    grads = sum(F_.external_size(e) for e in params)
    assert grads == sum(p.numel() * p.element_size() for p in model.parameters())
    # the gradients count as resident; the activation memory leaves them out
    without = dataclasses.replace(F_, grads_at_start=())
    assert F_.resident == without.resident + grads
    assert lowerset.activation_facts(F_).grads_at_start == ()
    # and JSON keeps them
    back = lowerset.ExecutionFacts.from_dict(F_.to_dict())
    assert back.grads_at_start == F_.grads_at_start


@pytest.mark.parametrize("plan_name", ["V", "min_peak", "half"])
@pytest.mark.parametrize("name", ["stack", "tied"])
def test_micro_batches_are_predicted_and_bitwise(name, plan_name):
    model, fns, graph, plans, saved = _net(name)
    plan = plans[plan_name]
    plain, _ = _accumulate(model, fns, saved)
    grads, peaks = _accumulate(model, fns, saved, plan)
    assert first_difference(plain, grads) is None
    predicted = plan.schedule.peak - graph.facts.resident
    for peak in peaks:
        assert abs(peak - predicted) <= max(SLACK, 0.01 * predicted), (peaks, predicted)
    # the same plan without the fact predicts a whole step measurably below the measured one
    without = graph.with_facts(dataclasses.replace(graph.facts, grads_at_start=()))
    low = lowerset.CanonicalStrategy(without, plan.lower_sets).schedule.peak
    whole = peaks[1] + graph.facts.resident
    assert low < 0.95 * whole, (low, whole)


def test_a_tied_weights_first_gradient_waits_beside_the_existing_one():
    # PyTorch gathers a parameter's gradients in AccumulateGrad's input buffer and adds that
    # into .grad after the last one. The step peaks at the embedding's backward (the last
    # use of the tied weight) with or without gradients at the start: by then every other
    # parameter's gradient exists in both, and the output projection's gradient of the
    # embedding (400 x 32 float32) waits in the buffer in both, so the existing gradients
    # add exactly the embedding's. Adding the projection's gradient into the existing one
    # at once would put the prediction 51,200 bytes below the measured peak.
    model, fns, graph, plans, saved = _net("tied_wide")
    _, peaks = _accumulate(model, fns, saved)
    emb = 400 * 32 * 4
    assert peaks[0] == peaks[1] == lowerset.schedule(graph).peak - graph.facts.resident
    without = graph.with_facts(dataclasses.replace(graph.facts, grads_at_start=()))
    assert peaks[1] + graph.facts.resident == lowerset.schedule(without).peak + emb


def test_verify_runs_both_steps_with_gradients_at_the_start():
    model, fns, graph, plans, saved = _net("stack")
    model.load_state_dict(saved)
    seen = []

    def step():
        seen.append(all(p.grad is not None for p in model.parameters()))
        return fns[0]()
    for p in model.parameters():
        p.grad = None
    report = torch_ext.verify(step, plans["min_peak"], model=model)
    assert report.ok and report.events_equal and report.recomputed
    assert seen == [True, True]                                   # both runs had gradients
    assert all(p.grad is None for p in model.parameters())       # put back to None
    existing = {n: torch.full_like(p, 0.5) for n, p in model.named_parameters()}
    for n, p in model.named_parameters():
        p.grad = existing[n]
    assert torch_ext.verify(step, plans["half"], model=model).ok
    assert all(p.grad is existing[n] and bool((p.grad == 0.5).all())
               for n, p in model.named_parameters())


def test_max_batch_size_measures_steps_with_gradients():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    model = Stack().train()
    x, t = torch.randn(512, 32, generator=gen), torch.randint(0, 10, (512,), generator=gen)

    def loss_fn(b):
        return F.cross_entropy(model(x[:b]), t[:b])
    limit = 1_000_000
    plain = torch_ext.max_batch_size(loss_fn, limit, None, model=model)
    r = torch_ext.max_batch_size(loss_fn, limit, None, model=model, accumulate_grads=True)
    assert r.graph.facts.grads_at_start and r.confirmed
    assert r.batch_size < plain.batch_size   # the gradients take room from the start
    assert r.measured_peak <= limit and abs(r.measured_peak - r.predicted_peak) <= SLACK
    assert all(p.grad is None for p in model.parameters())

    def whole_step(b):   # measured here: with zero gradients, as accumulation starts
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
        with MemoryMeter("cpu") as m:
            loss_fn(b).backward()
        for p in model.parameters():
            p.grad = None
        return m.result.peak + torch_ext.extrapolate(r.traced, b).facts.resident
    assert whole_step(r.batch_size) <= limit < whole_step(r.batch_size + 1)
