"""Functions with an output nobody uses (a split part, aux logits the loss ignores, NStepLSTM's
final states) trace and run under RecomputeHook: events equal the schedule, bitwise gradients."""

import copy

import pytest

chainer = pytest.importorskip("chainer")

import chainer.functions as F  # noqa: E402
import chainer.links as L  # noqa: E402
import numpy as np  # noqa: E402

import lowerset  # noqa: E402
from chainer_ext import RecomputeHook, trace  # noqa: E402


class UnusedSplitPart(chainer.Chain):
    """The second half of F.split_axis is never used."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1, self.l2 = L.Linear(8, 16), L.Linear(8, 4)

    def forward(self, x):
        a, _ = F.split_axis(F.relu(self.l1(x)), 2, axis=1)
        return self.l2(F.tanh(a) * 2)


class AuxLogits(chainer.Chain):
    """Returns (logits, aux logits), as GoogLeNet does; the loss reads only the logits."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.l1, self.l2 = L.Linear(8, 16), L.Linear(16, 16)
            self.aux, self.l3 = L.Linear(16, 4), L.Linear(16, 4)

    def forward(self, x):
        h = F.relu(self.l1(x))
        aux = self.aux(F.relu(h))
        return self.l3(F.sigmoid(F.relu(self.l2(h)))), aux


class LSTMIgnoringStates(chainer.Chain):
    """L.NStepLSTM whose final states hy, cy are ignored."""

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.rnn, self.l = L.NStepLSTM(1, 8, 8, 0.0), L.Linear(8, 4)

    def forward(self, x):
        _, _, ys = self.rnn(None, None, [F.relu(x[:3]), F.relu(x[3:])])
        return self.l(F.tanh(F.concat(ys, axis=0)))


def _loss(m, x, t):
    y = m(x)
    return F.softmax_cross_entropy(y[0] if isinstance(y, tuple) else y, t)


def _step(m, x, t, hook=None):
    m.cleargrads()
    with chainer.using_config("train", True):
        if hook is None:
            loss = _loss(m, x, t)
            loss.backward()
        else:
            with hook:
                loss = _loss(m, x, t)
                loss.backward()
    grads = {k: p.grad for k, p in m.namedparams()}
    return loss.array.copy(), {k: None if g is None else g.copy() for k, g in grads.items()}


def _same(a, b):
    assert a[0].tobytes() == b[0].tobytes()
    assert a[1].keys() == b[1].keys()
    for k in a[1]:
        assert (a[1][k] is None) == (b[1][k] is None), k
        assert a[1][k] is None or a[1][k].tobytes() == b[1][k].tobytes(), k


# (network, the function with an unused output, a function the plans must recompute, the
# prefixes of forward order that end the first segment (all when None))
CASES = [(UnusedSplitPart, "SplitAxis", "SplitAxis", None),
         (AuxLogits, "LinearFunction", "LinearFunction", None),
         (LSTMIgnoringStates, "Permutate", "LSTM", (17, 29, 46))]  # hy, cy: permuted stacks


@pytest.mark.parametrize("cls, function, must_recompute, prefixes", CASES)
def test_unused_outputs(cls, function, must_recompute, prefixes):
    np.random.seed(0)
    m = cls()
    x = np.random.randn(6, 8).astype(np.float32)
    t = np.random.randint(0, 4, 6).astype(np.int32)
    with chainer.using_config("train", True):
        g = trace(lambda: _loss(m, x, t))
    ref = _step(copy.deepcopy(m), x, t)
    prefixes = prefixes or range(1, g.n)
    plans = [lowerset.CanonicalStrategy(g, [set(range(i)), set(g.labels)]) for i in prefixes]
    plans += [lowerset.CanonicalStrategy(g, [set(g.labels)]), lowerset.min_peak(g, "approx")]
    recomputed = set()
    for plan in plans:
        hook = RecomputeHook(plan, record=True)
        _same(ref, _step(copy.deepcopy(m), x, t, hook))
        assert hook.events == list(hook.schedule.events)
        recomputed |= {g.attrs[v]["function"] for v in hook.last_iteration["recomputed"]}
    # `function` has an output nobody reads
    unused = [(v, k) for v in g.labels for k in range(len(g.attrs[v]["outputs"]))
              if not any(a[:1] == ["node"] and a[1:] == [v, k]
                         for u in g.labels for a in g.attrs[u]["inputs"])
              and (v, k) not in g.facts.returned]
    assert function in {g.attrs[v]["function"] for v, _ in unused}
    assert must_recompute in recomputed
