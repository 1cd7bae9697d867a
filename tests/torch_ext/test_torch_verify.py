"""torch_ext.verify: a plain step and a planned step from the same state, compared bitwise."""

import importlib

import pytest

torch = pytest.importorskip("torch")

import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import lowerset  # noqa: E402
import torch_ext  # noqa: E402
from torch_ext import (  # noqa: E402
    VerificationError,
    _replay,  # noqa: E402
    verify,
)

verify_mod = importlib.import_module("torch_ext.verify")  # torch_ext.verify is the function


def same_bits(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and \
        a.reshape(-1).contiguous().view(torch.uint8).tolist() == \
        b.reshape(-1).contiguous().view(torch.uint8).tolist()


class DropoutNet(nn.Module):
    """Two dropouts between linear layers: random draws a recomputation must repeat."""

    def __init__(self):
        super().__init__()
        self.l1, self.l2, self.l3 = nn.Linear(16, 32), nn.Linear(32, 32), nn.Linear(32, 4)

    def forward(self, x):
        h = F.dropout(F.relu(self.l1(x)), 0.5, self.training)
        h = F.dropout(torch.tanh(self.l2(h)), 0.5, self.training)
        return self.l3(h)


class BNNet(nn.Module):
    """Convolutions with BatchNorm (running statistics, num_batches_tracked)."""

    def __init__(self, c=4):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(3, c, 3, padding=1), nn.BatchNorm2d(c)
        self.c2, self.b2 = nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c)
        self.fc = nn.Linear(c * 8 * 8, 4)

    def forward(self, x):
        h = torch.relu(self.b1(self.c1(x)))
        h = torch.tanh(self.b2(self.c2(h)))
        return self.fc(h.flatten(1))


def make(name):
    """(model in training mode, step, traced graph)."""
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    if name == "dropout":
        model = DropoutNet()
        x = torch.randn(8, 16, generator=gen)
    else:
        model = BNNet()
        x = torch.randn(4, 3, 8, 8, generator=gen)
    t = torch.randint(0, 4, (x.shape[0],), generator=gen)
    model.train()

    def step():
        return F.cross_entropy(model(x), t)
    return model, step, torch_ext.trace(step, model=model)


def recomputing(graph, kind):
    """The least-peak plan, checked to recompute a node of `kind` ("random": dropout's
    draw; "mutates": BatchNorm, which writes its running statistics)."""
    plan = lowerset.min_peak(graph)
    nodes = [v for v in graph.labels if graph.attrs[v].get(kind)]
    assert set(nodes) & set(plan.schedule.recomputed), (nodes, plan.schedule.recomputed)
    return plan


def snapshot(model):
    """Bytes of every parameter, gradient and buffer, the gradient tensors' ids, the CPU
    generator's state."""
    out = {"param " + k: p.detach().clone() for k, p in model.named_parameters()}
    out.update({"grad " + k: p.grad.clone() for k, p in model.named_parameters()
                if p.grad is not None})
    out.update({"buffer " + k: b.clone() for k, b in model.named_buffers()})
    ids = {k: id(p.grad) for k, p in model.named_parameters()}
    return out, ids, torch.get_rng_state()


def assert_same(a, b):
    assert a[0].keys() == b[0].keys()
    for k in a[0]:
        assert same_bits(a[0][k], b[0][k]), k
    assert a[1] == b[1]  # each parameter keeps its gradient tensor
    assert torch.equal(a[2], b[2])


@pytest.mark.parametrize("name", ["dropout", "bn"])
@pytest.mark.parametrize("named", [True, False])
def test_passes_and_leaves_the_model_as_it_was(name, named):
    model, step, graph = make(name)
    plan = recomputing(graph, "random" if name == "dropout" else "mutates")
    step().backward()   # gradients to start from: both runs accumulate onto them
    torch.rand(3)       # a generator state that the trace did not leave
    before = snapshot(model)
    report = verify(step, plan, model=model if named else None)
    assert_same(before, snapshot(model))
    assert report.ok and report.events_equal and report.first_mismatch is None
    assert report.max_abs_diff == 0.0 and report.mismatches == ()
    assert list(report.recomputed) == list(plan.schedule.recomputed)
    n_params = len(list(model.parameters()))
    if named:
        assert report.compared == (("loss",)
                                   + tuple("grad " + k for k, _ in model.named_parameters())
                                   + tuple("buffer " + k for k, _ in model.named_buffers()))
    else:  # found in the plain step: the leaves requiring a gradient, the tensors it writes
        grads = [k for k in report.compared if k.startswith("grad aten.")]
        buffers = [k for k in report.compared if k.startswith("buffer aten.")]
        assert len(grads) == n_params
        assert len(buffers) == len(list(model.buffers()))  # running stats and the counters


def test_names_the_first_mismatch_when_random_state_is_not_replayed(monkeypatch):
    model, step, graph = make("dropout")
    plan = recomputing(graph, "random")
    # the recomputed dropout draws a new mask from wherever the generator is
    monkeypatch.setattr(_replay._ReplayedRandom, "__enter__", lambda self: None)
    monkeypatch.setattr(_replay._ReplayedRandom, "__exit__", lambda self, *exc: False)
    before = snapshot(model)
    # the check (on by default) names the recomputation that differs, before the gradients
    with pytest.raises(torch_ext.RecomputationError, match="bernoulli") as info:
        verify(step, plan, model=model)
    assert graph.attrs[info.value.node].get("random")
    assert_same(before, snapshot(model))
    report = verify(step, plan, model=model, check=False)
    assert not report.ok and report.events_equal
    assert report.first_mismatch.startswith("grad ")
    assert report.first_mismatch == report.mismatches[0]
    assert "loss" not in report.mismatches      # the forward pass is not recomputed
    assert 0 < report.max_abs_diff < float("inf")
    assert_same(before, snapshot(model))
    with pytest.raises(VerificationError, match=report.first_mismatch):
        verify(step, plan, model=model, raise_on_mismatch=True, check=False)
    unnamed = verify(step, plan, check=False)
    assert unnamed.first_mismatch.startswith("grad aten.")


def test_names_a_buffer_updated_twice(monkeypatch):
    model, step, graph = make("bn")
    plan = recomputing(graph, "mutates")
    capture = _replay.Call.capture

    def without_copies(self, func, args, kwargs):  # a recomputed BatchNorm writes the stats
        capture(self, func, args, kwargs)
        self.externals = {i: (t, False) for i, (t, _) in self.externals.items()}
        return self
    monkeypatch.setattr(_replay.Call, "capture", without_copies)
    report = verify(step, plan, model=model)
    assert not report.ok and report.events_equal
    assert report.mismatches and all(k.startswith("buffer ") for k in report.mismatches)
    assert report.first_mismatch.endswith(("running_mean", "running_var",
                                           "num_batches_tracked"))


def test_diff_is_bitwise_and_nan_safe():
    diff = verify_mod._diff
    nan = torch.tensor([float("nan"), 1.0])
    assert diff(nan, nan.clone()) == (False, 0.0)
    assert diff(torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.5])) == (True, 0.5)
    assert diff(torch.tensor([0.0]), torch.tensor([-0.0])) == (True, 0.0)  # other bits
    assert diff(torch.tensor([float("nan")]), torch.tensor([1.0])) == (True, float("inf"))
    assert diff(torch.zeros(2), torch.zeros(3)) == (True, float("inf"))
    assert diff(torch.zeros(2), torch.zeros(2, dtype=torch.float64)) == (True, float("inf"))


def test_errors():
    model, step, graph = make("dropout")
    with pytest.raises(TypeError, match="CanonicalStrategy"):
        verify(step, "plan")
    plan = lowerset.min_peak(graph)
    with pytest.raises(TypeError, match="one tensor"):
        verify(step, plan, params=model.l1.weight)
