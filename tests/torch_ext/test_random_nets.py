"""Hypothesis-built random module graphs: any canonical strategy runs bitwise, event by event,
at the schedule's measured peak."""

import pytest

torch = pytest.importorskip("torch")

import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import lowerset  # noqa: E402
import torch_ext  # noqa: E402
from strategies import default_plan  # noqa: E402
from torch_nets import cut_plan, first_difference, save, step  # noqa: E402

C = 4
# the schedule leaves out a few 8-byte scalars that live in a larger buffer (README, "PyTorch");
# the smallest activation here is 2 * 4 * 6 * 6 float32 = 1152 bytes, far above this slack
SCALARS = 64
LAYERS = ("conv_bn_relu_", "add", "cat_conv", "split_swap", "transpose", "dropout", "tanh",
          "mul", "softmax")


class RandomNet(nn.Module):
    """Applies `specs` in order; each spec reads earlier tensors (0 is the input's stem) by
    index and appends one tensor; the loss is the sum of one or two heads."""

    def __init__(self, specs, heads):
        super().__init__()
        self.specs, self.heads = specs, heads
        self.stem = nn.Conv2d(3, C, 3, padding=1)
        self.mods = nn.ModuleList()
        for kind, _ in specs:
            if kind == "conv_bn_relu_":
                self.mods.append(nn.Sequential(nn.Conv2d(C, C, 3, padding=1, bias=False),
                                               nn.BatchNorm2d(C)))
            elif kind == "cat_conv":
                self.mods.append(nn.Conv2d(2 * C, C, 1))
            else:
                self.mods.append(nn.Identity())
        self.fc = nn.Linear(C, 3)

    def forward(self, x, t):
        hs = [self.stem(x)]
        for (kind, (i, j)), mod in zip(self.specs, self.mods):
            a, b = hs[i % len(hs)], hs[j % len(hs)]
            hs.append(_apply(kind, mod, a, b, self.training))
        logits = self.fc(hs[self.heads[0] % len(hs)].mean(dim=(2, 3)))
        loss = F.cross_entropy(logits, t)
        if len(self.heads) > 1:
            loss = loss + hs[self.heads[1] % len(hs)].square().mean()
        return loss


def _apply(kind, mod, a, b, training):
    if kind == "conv_bn_relu_":
        return F.relu_(mod(a))
    if kind == "add":
        return a + b
    if kind == "cat_conv":
        return mod(torch.cat([a, b], dim=1))
    if kind == "split_swap":
        lo, hi = a.split(C // 2, dim=1)
        return torch.cat([hi, lo], dim=1)
    if kind == "transpose":
        return a.transpose(2, 3).contiguous() * 0.5
    if kind == "dropout":
        return F.dropout(a, 0.3, training=training)
    if kind == "tanh":
        return torch.tanh(a)
    if kind == "mul":
        return a * b
    return torch.softmax(a, dim=1)


@st.composite
def random_nets(draw):
    n = draw(st.integers(2, 7), label="layers")
    specs = tuple((draw(st.sampled_from(LAYERS)),
                   (draw(st.integers(0, 20)), draw(st.integers(0, 20)))) for _ in range(n))
    heads = tuple(draw(st.lists(st.integers(0, 20), min_size=1, max_size=2), label="heads"))
    return specs, heads


def traced(net):
    """(model, step function, graph, saved state, the plain step's values and peak) of one
    random network on a fixed batch."""
    specs, heads = net
    torch.manual_seed(0)
    model = RandomNet(specs, heads).train()
    gen = torch.Generator().manual_seed(0)
    x, t = torch.randn(2, 3, 6, 6, generator=gen), torch.randint(0, 3, (2,), generator=gen)
    fn = lambda: model(x, t)  # noqa: E731
    graph = torch_ext.trace(fn, model=model)
    state = save(model)
    plain, plain_peak, _ = step(model, fn, state)
    return model, fn, graph, state, plain, plain_peak


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_nets(), st.data())
def test_random_nets_run_any_strategy_bitwise(net, data):
    model, fn, graph, state, plain, plain_peak = traced(net)
    assert abs(plain_peak - (lowerset.schedule(graph).peak - graph.facts.resident)) <= SCALARS
    cuts = data.draw(st.lists(st.integers(1, max(1, graph.n - 1)), max_size=4), label="cuts")
    for plan in (cut_plan(graph, cuts), default_plan(lowerset.min_peak, graph)):
        planned, peak, ctx = step(model, fn, state, plan)
        assert first_difference(plain, planned) is None
        assert ctx.events == list(plan.schedule.events)
        assert abs(peak - (plan.schedule.peak - graph.facts.resident)) <= SCALARS


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_nets(), st.data())
def test_random_nets_run_any_drop_set_bitwise(net, data):
    """A drop set no lower-set sequence gives (each unit drawn on its own) runs bitwise, event
    by event, at its schedule's peak: the executor needs no canonical structure."""
    model, fn, graph, state, plain, _ = traced(net)
    units = lowerset.drop_units(graph)
    picks = data.draw(st.lists(st.booleans(), min_size=len(units), max_size=len(units)),
                      label="dropped units")
    dropped = {graph.labels[v] for u, p in zip(units, picks) if p for v in u.tolist()}
    plan = lowerset.DropSetStrategy(graph, dropped)
    planned, peak, ctx = step(model, fn, state, plan)
    assert first_difference(plain, planned) is None
    assert ctx.events == list(plan.schedule.events)
    assert abs(peak - (plan.schedule.peak - graph.facts.resident)) <= SCALARS
