"""Side effects happen once and random draws are replayed: functions recomputed by
RecomputeHook leave running statistics, counters and gradients bitwise equal to a plain step.

Each test runs on NumPy and, where CuPy sees a CUDA GPU (marker ``gpu``), on CuPy.
"""

import copy

import pytest

chainer = pytest.importorskip("chainer")

import chainer.functions as F  # noqa: E402
import chainer.links as L  # noqa: E402
import numpy as np  # noqa: E402
from chainer.backends import cuda  # noqa: E402

import lowerset  # noqa: E402
from chainer_ext import RecomputeHook, trace  # noqa: E402
from chainer_ext_nets import DEVICES  # noqa: E402


class Counter(chainer.FunctionNode):
    """Doubles its input; counts its forward calls in ``link.calls``."""

    def __init__(self, link):
        self.link = link

    def forward(self, inputs):
        self.link.calls += 1
        return inputs[0] * 2,

    def backward(self, indexes, gy):
        return gy[0] * 2,


class Logger(chainer.FunctionNode):
    """Doubles its input; appends to the list ``link.log`` (a change swapped() cannot undo)."""

    def __init__(self, link):
        self.link = link

    def forward(self, inputs):
        self.link.log.append(float(inputs[0].sum()))
        return inputs[0] * 2,

    def backward(self, indexes, gy):
        return gy[0] * 2,


class Noise(chainer.FunctionNode):
    """Adds standard normal noise drawn from the global generator of its input's array module
    (NumPy's or CuPy's); keeps nothing."""

    def forward(self, inputs):
        x, = inputs
        xp = chainer.backend.get_array_module(x)
        return x + xp.random.standard_normal(x.shape).astype(x.dtype),

    def backward(self, indexes, gy):
        return gy[0],


NORMS = {"bn": lambda: L.BatchNormalization(16),
         "brn": lambda: L.BatchRenormalization(16),
         "dbn": lambda: L.DecorrelatedBatchNormalization(16, groups=2)}


class Net(chainer.Chain):
    """Linear, ReLU, Linear, ReLU, <kind>, Tanh, ReLU, x1.5, Sigmoid, Linear."""

    def __init__(self, kind):
        super().__init__()
        self.kind = kind
        self.calls, self.log = 0, []
        with self.init_scope():
            self.l1, self.l2, self.l3 = L.Linear(8, 16), L.Linear(16, 16), L.Linear(16, 4)
            if kind in NORMS:
                self.norm = NORMS[kind]()

    def middle(self, h):
        k = self.kind
        if k in NORMS:
            return self.norm(h)
        if k == "counter":
            return Counter(self).apply((h,))[0]
        if k == "logger":
            return Logger(self).apply((h,))[0]
        if k == "dropout":
            return F.dropout(h, 0.5)
        if k == "gaussian":
            return F.gaussian(h, F.log(F.absolute(h) + 1))
        if k == "dropconnect":
            return F.simplified_dropconnect(h, self.l2.W, self.l2.b, 0.5)
        assert k == "noise"
        return Noise().apply((h,))[0]

    def forward(self, x):
        h = F.relu(self.l1(x))
        h = F.tanh(self.middle(F.relu(self.l2(h))))
        return self.l3(F.sigmoid(F.relu(h) * 1.5))


def _loss(m, x, t):
    return F.softmax_cross_entropy(m(x), t)


def _make(kind, device="@numpy"):
    np.random.seed(0)
    m = Net(kind)
    x = np.random.randn(6, 8).astype(np.float32)
    t = np.random.randint(0, 4, 6).astype(np.int32)
    m.to_device(device)
    return m, m.device.send(x), m.device.send(t)


def _state(m):
    """Gradients, persistent values, the counter and the log of `m`, by name (NumPy arrays)."""
    out = {"grad " + k: cuda.to_cpu(p.grad).copy() for k, p in m.namedparams()}
    for path, link in m.namedlinks():
        for k in link._persistent:
            out[f"{path}/{k}"] = np.array(cuda.to_cpu(getattr(link, k)), copy=True)
    out["calls"] = np.array(m.calls)
    out["log"] = np.array(m.log)
    return out


def _step(m, x, t, hook=None):
    m.cleargrads()
    np.random.seed(5)
    m.xp.random.seed(5)
    with chainer.using_config("train", True):
        with hook if hook is not None else _nothing():
            _loss(m, x, t).backward()
    return _state(m)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _thirds(g):
    """Three segments: the first, middle and last third of the nodes in forward order."""
    n = g.n
    return lowerset.CanonicalStrategy(g, [set(range(n // 3)), set(range(2 * n // 3)),
                                          set(range(n))])


def _run(kind, plan=_thirds, device="@numpy"):
    m, x, t = _make(kind, device)
    with chainer.using_config("train", True):
        g = trace(lambda: _loss(m, x, t))
    ref = _step(copy.deepcopy(m), x, t)
    hook = RecomputeHook(plan(g), record=True)
    got = _step(copy.deepcopy(m), x, t, hook)
    assert hook.events == list(hook.schedule.events)
    assert ref.keys() == got.keys()
    for k in ref:
        assert ref[k].tobytes() == got[k].tobytes(), f"{k} differs"
    return g, hook


def _node(g, kind):
    name = {"bn": "BatchNormalization", "brn": "FunctionAdapter",
            "dbn": "DecorrelatedBatchNormalization", "counter": "Counter", "logger": "Logger",
            "dropout": "Dropout", "gaussian": "Gaussian", "dropconnect": "SimplifiedDropconnect",
            "noise": "Noise"}[kind]
    (v,) = [v for v in g.labels if g.attrs[v]["function"] == name]
    return v


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["bn", "brn", "dbn", "counter"])
def test_side_effects_happen_once(kind, device):
    g, hook = _run(kind, device=device)
    v = _node(g, kind)
    assert v in hook.last_iteration["recomputed"]
    assert g.attrs[v]["restore"] and not g.facts.nodes[v].pinned
    assert "pinned" not in g.attrs[v]


@pytest.mark.parametrize("kind", ["bn", "counter"])
def test_side_effects_happen_once_under_chen(kind):
    _run(kind, lowerset.baselines.chen_sqrtn)


def test_counter_counts_one_call_per_step():
    m, x, t = _make("counter")
    with chainer.using_config("train", True):
        g = trace(lambda: _loss(m, x, t))
    assert m.calls == 0  # tracing leaves the model as it was
    _step(m, x, t, RecomputeHook(_thirds(g)))
    assert m.calls == 1


def test_trace_leaves_running_statistics_unchanged():
    m, x, t = _make("dbn")
    before = _state(m)
    with chainer.using_config("train", True):
        trace(lambda: _loss(m, x, t))
    after = _state(m)
    for k in before:
        if not k.startswith("grad"):
            assert before[k].tobytes() == after[k].tobytes(), k


def test_a_change_swapped_cannot_undo_pins_the_function():
    g, hook = _run("logger")
    v = _node(g, "logger")
    assert g.facts.nodes[v].pinned
    assert "Logger" in g.attrs[v]["pinned"] and "list" in g.attrs[v]["pinned"]
    assert v not in hook.schedule.recomputed
    assert v not in [e.node for e in hook.schedule.events if e.kind == "drop"]
    # its neighbours are still recomputed
    assert hook.last_iteration["recomputed"]


def _around(kind):
    """A plan whose middle segment starts at the `kind` node and holds the two functions after
    it: their values are dropped and the backward pass recomputes them, the node too (whether
    its own state is kept, as a stochastic function's is on CuPy, or not)."""
    def plan(g):
        v = _node(g, kind)
        return lowerset.CanonicalStrategy(g, [set(range(v)), set(range(min(v + 3, g.n - 1))),
                                              set(range(g.n))])
    return plan


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["dropout", "gaussian", "dropconnect", "noise"])
def test_random_draws_are_replayed(kind, device):
    g, hook = _run(kind, plan=_around(kind), device=device)
    v = _node(g, kind)
    nf = g.facts.nodes[v]
    if kind == "noise" and device != "@numpy":
        # CuPy's generator has no state to save, and Noise keeps nothing to reuse: it is pinned
        assert nf.pinned and "CuPy" in g.attrs[v]["pinned"]
        assert v not in hook.last_iteration["recomputed"]
        return
    assert v in hook.last_iteration["recomputed"]
    assert not nf.pinned
    # either it reuses what it drew (its kept state) or NumPy's random state is replayed
    assert nf.stochastic or ["numpy.random"] in g.attrs[v].get("restore", [])


def test_numpy_noise_replays_numpy_state():
    g, _ = _run("noise")
    v = _node(g, "noise")
    assert g.attrs[v]["restore"] == [["numpy.random"]]
    assert not g.facts.nodes[v].stochastic


def test_dropout_reuses_its_mask():
    g, _ = _run("dropout")
    v = _node(g, "dropout")
    assert g.facts.nodes[v].stochastic and "restore" not in g.attrs[v]
