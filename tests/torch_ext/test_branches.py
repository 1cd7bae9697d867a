"""A step whose code branches on its batch's values (a padding mask) under one
RecomputeContext given a strategy per branch: each batch runs bitwise as the plain step, under
the schedule of the branch it takes, with its measured peak."""

import pytest

torch = pytest.importorskip("torch")

import torch.nn as nn  # noqa: E402

import lowerset  # noqa: E402
import torch_ext  # noqa: E402
from torch_ext.measure import MemoryMeter  # noqa: E402
from torch_nets import first_difference  # noqa: E402

SLACK = 64
VOCAB, BATCH, TOKENS, WIDTH = 32, 4, 12, 24


class MaskedLM(nn.Module):
    """Embedding, then residual tanh blocks; where the mask has a zero (the batch is padded)
    the padded positions are zeroed before the blocks, as transformers' mask code skips the
    mask of a batch without padding (the mask in the embedding's dtype, made before the branch,
    is freed at once in one branch and kept in the other)."""

    def __init__(self, layers=4):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, WIDTH)
        self.blocks = nn.ModuleList(nn.Linear(WIDTH, WIDTH) for _ in range(layers))
        self.out = nn.Linear(WIDTH, VOCAB)

    def forward(self, ids, mask, labels):
        h = self.emb(ids)
        keep = _padding(mask, h.dtype)
        if keep is not None:
            h = h * keep[..., None]
        for block in self.blocks:
            h = h + torch.tanh(block(h))
        logits = self.out(h)
        return nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())


def _padding(mask, dtype):
    """`mask` in `dtype` where it has a zero, else None (the converted mask then freed as the
    function returns)."""
    keep = mask.to(dtype)
    return keep if bool((keep == 0).any()) else None


def _batches():
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, VOCAB, (BATCH, TOKENS), generator=gen)
    labels = torch.randint(0, VOCAB, (BATCH, TOKENS), generator=gen)
    ones = torch.ones(BATCH, TOKENS, dtype=torch.long)
    pad_a, pad_b = ones.clone(), ones.clone()
    pad_a[0, -3:] = 0
    pad_b[1:, -5:] = 0
    return ids, labels, {"ones": ones, "pad_a": pad_a, "pad_b": pad_b}


@pytest.fixture(scope="module")
def setup():
    torch.manual_seed(0)
    model = MaskedLM()
    ids, labels, masks = _batches()

    def step(mask):
        return lambda: model(ids, mask, labels)
    plans = {}
    for name in ("ones", "pad_a"):   # a trace of each branch
        graph = torch_ext.trace(step(masks[name]), model=model)
        plans[name] = lowerset.min_peak(graph, time_limit=None)
        assert plans[name].schedule.recomputed, "the plan recomputes nothing: a weak test"
    assert plans["ones"].graph.n < plans["pad_a"].graph.n
    return model, step, masks, plans


def _grads(model, run):
    """The loss and the parameters' gradients of one step: `run` returns the loss after
    calling backward() on it."""
    model.zero_grad(set_to_none=True)
    out = {"loss": run().detach().clone()}
    out.update({k: p.grad.clone() for k, p in model.named_parameters()})
    model.zero_grad(set_to_none=True)
    return out


def _backward(loss):
    loss.backward()
    return loss


def test_one_plan_refuses_the_other_branch(setup):
    model, step, masks, plans = setup
    with pytest.raises(torch_ext.StrategyMismatchError):
        with torch_ext.RecomputeContext(plans["ones"]):
            step(masks["pad_a"])().backward()
    model.zero_grad(set_to_none=True)


@pytest.mark.parametrize("order", [("ones", "pad_a"), ("pad_a", "ones")])
def test_each_batch_runs_its_branchs_plan_bitwise(setup, order):
    model, step, masks, plans = setup
    ctx = torch_ext.RecomputeContext([plans[b] for b in order], model=model, check=True)
    for mask in ("ones", "pad_a", "pad_b", "ones", "pad_b"):   # steps of one context
        branch = "ones" if mask == "ones" else "pad_a"

        def planned():
            with ctx:
                return _backward(step(masks[mask])())
        plain = _grads(model, lambda: _backward(step(masks[mask])()))
        ran = _grads(model, planned)
        assert first_difference(plain, ran) is None, (mask, first_difference(plain, ran))
        assert ctx.strategy is plans[branch], mask
        assert ctx.last_step["recomputed"], mask


def test_every_step_peaks_as_its_branchs_schedule(setup):
    model, step, masks, plans = setup
    ctx = torch_ext.RecomputeContext([plans["ones"], plans["pad_a"]], record=True)
    held = 0
    for mask in ("pad_b", "ones", "pad_a"):
        plan = plans["ones" if mask == "ones" else "pad_a"]
        model.zero_grad(set_to_none=True)
        with MemoryMeter("cpu") as meter:
            with ctx:
                step(masks[mask])().backward()
        model.zero_grad(set_to_none=True)
        predicted = plan.schedule.peak - plan.graph.facts.resident
        assert abs(meter.result.peak - predicted) <= SLACK, (mask, meter.result.peak, predicted)
        assert ctx.events == ctx.expected_events   # the schedule's, some drops later
        assert sorted(map(tuple, ctx.expected_events)) == sorted(
            map(tuple, plan.schedule.events))
        held += ctx.expected_events != list(plan.schedule.events)
    assert held, "no schedule held a drop back until the branch showed: a weak test"


def test_a_step_no_branch_matches_is_refused(setup):
    model, step, masks, plans = setup
    other = torch.ones(BATCH, TOKENS + 1, dtype=torch.long)
    ids = torch.zeros_like(other)
    with pytest.raises(torch_ext.StrategyMismatchError, match="operation 0"):
        with torch_ext.RecomputeContext([plans["ones"], plans["pad_a"]]):
            model(ids, other, ids).backward()
    model.zero_grad(set_to_none=True)


def test_bad_strategy_sequences_are_type_errors(setup):
    plans = setup[3]
    with pytest.raises(TypeError, match="at least one strategy"):
        torch_ext.RecomputeContext([])
    with pytest.raises(TypeError, match="strategy 1 of the sequence"):
        torch_ext.RecomputeContext([plans["ones"], plans["pad_a"].graph])
