"""chainer_ext.verify: a plain step and a hooked step from the same state, compared bitwise."""

import random

import pytest

chainer = pytest.importorskip("chainer")

import chainer.functions as F  # noqa: E402
import chainer.links as L  # noqa: E402
import numpy as np  # noqa: E402
from chainer.backends import cuda  # noqa: E402

import lowerset  # noqa: E402
from chainer_ext import VerificationError, trace, verify  # noqa: E402
from chainer_ext_nets import DEVICES, make, persistents  # noqa: E402


def _snapshot(model):
    out = {k: cuda.to_cpu(p.array).copy() for k, p in model.namedparams()}
    out.update({"grad " + k: cuda.to_cpu(p.grad).copy() for k, p in model.namedparams()
                if p.grad is not None})
    out.update(persistents(model))
    return out, np.random.get_state()[1].copy()


def _same_snapshot(a, b):
    assert a[0].keys() == b[0].keys()
    for k in a[0]:
        assert a[0][k].tobytes() == b[0][k].tobytes(), k
    assert a[1].tobytes() == b[1].tobytes()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("named", [True, False])
def test_passes_on_a_normal_model_and_leaves_it_as_it_was(named, device):
    # "dropout" draws from CuPy's generator on a GPU
    model, x, t, lossfn = make("dropout" if named else "resnet", device=device)
    with chainer.using_config("train", True):
        g = trace(lambda: lossfn(model, x, t))
        plan = lowerset.solve(g, model="paper", mode="memory")
        model.cleargrads()
        lossfn(model, x, t).backward()   # gradients to start from: verify accumulates onto them
        before = _snapshot(model)
        report = verify(lambda: lossfn(model, x, t), plan, model=model if named else None)
    _same_snapshot(before, _snapshot(model))
    assert report.ok and report.events_equal and report.recomputed
    assert report.first_mismatch is None and report.mismatches == ()
    assert report.max_abs_diff == 0.0
    if named:
        assert set(report.compared) == (
            {"loss"} | {"grad " + k for k, _ in model.namedparams()}
            | {f"persistent {path}/{k}" for path, link in model.namedlinks()
               for k in link._persistent})
    else:  # found from the graph: parameters by function, BN statistics updated in place
        assert "grad Convolution2DFunction#0/W" in report.compared
        stats = [k for k in report.compared if k.startswith("persistent BatchNormalization#")]
        assert stats and len(stats) == len(persistents(model))  # running mean and variance


class HiddenNoise(chainer.FunctionNode):
    """Adds a number from Python's `random` (invisible to the trace's checks); the backward is
    the identity."""

    def forward(self, inputs):
        return inputs[0] + np.float32(random.random()),

    def backward(self, indexes, gy):
        return gy[0],


class Broken(chainer.Chain):
    """l1, hidden noise, square (reads its input in backward), l2."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1, self.l2 = L.Linear(8, 16), L.Linear(16, 4)

    def forward(self, x):
        return self.l2(F.square(HiddenNoise().apply((self.l1(x),))[0]))


def test_reports_the_first_differing_gradient():
    np.random.seed(0)
    model = Broken()
    x = np.random.randn(6, 8).astype(np.float32)
    t = np.random.randint(0, 4, 6).astype(np.int32)

    def step():
        random.seed(0)  # both runs draw the same; a recomputation draws the next number
        return F.softmax_cross_entropy(model(x), t)
    g = trace(step)
    assert not any(nf.pinned or nf.stochastic for nf in g.facts.nodes)  # hidden from the trace
    # segment {l1, noise, square}: the noise is dropped and recomputed for square's backward
    plan = lowerset.CanonicalStrategy(g, [{0, 1, 2}, set(g.labels)])
    assert 1 in lowerset.schedule(plan).recomputed
    model.cleargrads()
    report = verify(step, plan, model=model)
    assert not report.ok and report.events_equal
    # l2 reads square's output, kept at the segment boundary: only l1's gradients differ
    assert report.first_mismatch == "grad /l1/W"
    assert set(report.mismatches) == {"grad /l1/W", "grad /l1/b"}
    assert 0 < report.max_abs_diff < float("inf")
    # without model=: the parameters found from the graph, named by function
    report = verify(step, plan)
    assert report.first_mismatch == "grad LinearFunction#0/W"
    with pytest.raises(VerificationError, match="grad /l1/W"):
        verify(step, plan, model=model, raise_on_mismatch=True)


def test_reports_a_differing_persistent_value(monkeypatch):
    model, x, t, lossfn = make("resnet")
    with chainer.using_config("train", True):
        g = trace(lambda: lossfn(model, x, t))
    plan = lowerset.solve(g, model="paper", mode="memory")
    import chainer_ext.hook as hook_module
    prepare = hook_module.RecomputeHook._prepare

    def without_restore(self, graph):  # recomputations update the running statistics again
        prepare(self, graph)
        self._restore_paths = [()] * self._n
    monkeypatch.setattr(hook_module.RecomputeHook, "_prepare", without_restore)
    with chainer.using_config("train", True):
        report = verify(lambda: lossfn(model, x, t), plan, model=model)
    assert not report.ok and report.events_equal
    assert report.mismatches and all(k.startswith("persistent /") for k in report.mismatches)
    assert report.first_mismatch.endswith(("/avg_mean", "/avg_var"))


def test_a_fresh_lazily_sized_model():
    """A model traced through a copy: its own lazily sized link is not made yet and no
    gradient was ever set. Both runs make the link's weights from the same random state, and
    the model is left unsized, as it was."""
    import copy
    np.random.seed(0)
    model = chainer.ChainList(L.Linear(None, 64), L.Linear(64, 10))
    x, t = np.random.standard_normal((32, 16)).astype(np.float32), np.zeros(32, np.int32)

    def loss(m):
        return F.softmax_cross_entropy(m[1](F.dropout(F.relu(m[0](x)), 0.3)), t)
    traced = copy.deepcopy(model)
    g = trace(lambda: loss(traced))
    with chainer.using_config("train", True):
        report = verify(lambda: loss(model), lowerset.min_peak(g), model=model)
    assert report.ok and report.events_equal
    assert "grad /0/W" in report.compared
    assert model[0].W.array is None
