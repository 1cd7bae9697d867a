"""Small networks built for the executor tests, and helpers that run a plain or hooked step.

Each entry of NETS is ``name -> (build, make_batch, loss)``: ``build()`` returns a Chain,
``make_batch(batch)`` returns ``(x, t)`` and ``loss(model, x, t)`` returns a scalar Variable.
The helpers work on NumPy and CuPy; :data:`DEVICES` parametrizes a test over both.
"""

import copy

import chainer
import chainer.functions as F
import chainer.links as L
import numpy as np
import pytest
from chainer.backends import cuda

from chainer_ext import _backend

#: NumPy, and CuPy's first GPU where CuPy sees one (marker ``gpu``).
DEVICES = ["@numpy", pytest.param("@cupy:0", marks=[
    pytest.mark.gpu,
    pytest.mark.skipif(not _backend.cupy_available(), reason="needs CuPy and a CUDA GPU")])]


class MLP(chainer.Chain):
    def __init__(self, width=256, depth=6, n_out=10):
        super().__init__()
        with self.init_scope():
            self.ls = chainer.ChainList(*[L.Linear(None, width) for _ in range(depth)])
            self.out = L.Linear(width, n_out)

    def forward(self, x):
        h = x
        for layer in self.ls:
            h = F.relu(layer(h))
        return self.out(h)


class ResNetLike(chainer.Chain):
    """Stem conv, three residual blocks (conv-BN-ReLU-conv-BN + skip), global pooling."""

    def __init__(self, ch=16, n_blocks=3, n_out=10):
        super().__init__()
        with self.init_scope():
            self.stem = L.Convolution2D(3, ch, 3, pad=1)
            self.c1 = chainer.ChainList(*[L.Convolution2D(ch, ch, 3, pad=1, nobias=True)
                                          for _ in range(n_blocks)])
            self.b1 = chainer.ChainList(*[L.BatchNormalization(ch) for _ in range(n_blocks)])
            self.c2 = chainer.ChainList(*[L.Convolution2D(ch, ch, 3, pad=1, nobias=True)
                                          for _ in range(n_blocks)])
            self.b2 = chainer.ChainList(*[L.BatchNormalization(ch) for _ in range(n_blocks)])
            self.fc = L.Linear(ch, n_out)

    def forward(self, x):
        h = F.relu(self.stem(x))
        for c1, b1, c2, b2 in zip(self.c1, self.b1, self.c2, self.b2):
            y = F.relu(b1(c1(h)))
            y = b2(c2(y))
            h = F.relu(h + y)
        return self.fc(F.average(h, axis=(2, 3)))


class UNetLike(chainer.Chain):
    """Two-level encoder/decoder with max pooling, deconvolution and skip concatenations."""

    def __init__(self, ch=8, n_class=3):
        super().__init__()
        with self.init_scope():
            self.e1 = L.Convolution2D(3, ch, 3, pad=1)
            self.e2 = L.Convolution2D(ch, 2 * ch, 3, pad=1)
            self.m = L.Convolution2D(2 * ch, 4 * ch, 3, pad=1)
            self.u2 = L.Deconvolution2D(4 * ch, 2 * ch, 2, stride=2)
            self.d2 = L.Convolution2D(4 * ch, 2 * ch, 3, pad=1)
            self.u1 = L.Deconvolution2D(2 * ch, ch, 2, stride=2)
            self.d1 = L.Convolution2D(2 * ch, ch, 3, pad=1)
            self.out = L.Convolution2D(ch, n_class, 1)

    def forward(self, x):
        h1 = F.relu(self.e1(x))
        h2 = F.relu(self.e2(F.max_pooling_2d(h1, 2)))
        h = F.relu(self.m(F.max_pooling_2d(h2, 2)))
        h = F.relu(self.d2(F.concat([self.u2(h), h2])))
        h = F.relu(self.d1(F.concat([self.u1(h), h1])))
        return self.out(h)


class InceptionLike(chainer.Chain):
    """Stem, two inception blocks with four branches (1x1, 3x3, 5x5, pool+1x1) each."""

    def __init__(self, ch=8, n_out=10):
        super().__init__()
        with self.init_scope():
            self.stem = L.Convolution2D(3, 4 * ch, 3, pad=1)
            self.blocks = chainer.ChainList(*[chainer.ChainList(
                L.Convolution2D(4 * ch, ch, 1),
                L.Convolution2D(4 * ch, ch, 1), L.Convolution2D(ch, ch, 3, pad=1),
                L.Convolution2D(4 * ch, ch, 1), L.Convolution2D(ch, ch, 5, pad=2),
                L.Convolution2D(4 * ch, ch, 1)) for _ in range(2)])
            self.fc = L.Linear(4 * ch, n_out)

    def forward(self, x):
        h = F.relu(self.stem(x))
        for b in self.blocks:
            p1 = F.relu(b[0](h))
            p2 = F.relu(b[2](F.relu(b[1](h))))
            p3 = F.relu(b[4](F.relu(b[3](h))))
            p4 = F.relu(b[5](F.max_pooling_2d(h, 3, stride=1, pad=1)))
            h = F.concat([p1, p2, p3, p4])
        return self.fc(F.average(h, axis=(2, 3)))


class DropoutNet(chainer.Chain):
    def __init__(self, width=256, n_out=10):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(None, width)
            self.l2 = L.Linear(width, width)
            self.l3 = L.Linear(width, width)
            self.l4 = L.Linear(width, n_out)

    def forward(self, x):
        h = F.dropout(F.relu(self.l1(x)), 0.3)
        h = F.dropout(F.relu(self.l2(h)), 0.3)
        h = F.dropout(F.relu(self.l3(h)), 0.5)
        return self.l4(h)


class SplitNet(chainer.Chain):
    """A multi-output function (F.split_axis) whose halves take different paths."""

    def __init__(self, width=256, n_out=10):
        super().__init__()
        with self.init_scope():
            self.l1 = L.Linear(None, 2 * width)
            self.la = L.Linear(width, width)
            self.lb = L.Linear(width, width)
            self.l2 = L.Linear(2 * width, 2 * width)
            self.l3 = L.Linear(2 * width, n_out)

    def forward(self, x):
        a, b = F.split_axis(F.relu(self.l1(x)), 2, axis=1)
        a = F.relu(self.la(a))
        b = F.tanh(self.lb(b))
        h = F.relu(self.l2(F.concat([a, b])))
        c, d = F.split_axis(h, 2, axis=1)
        return self.l3(F.concat([F.relu(c), d * d]))


class TwoHeads(chainer.Chain):
    """A trunk with an auxiliary head: two losses summed (like GoogLeNet's heads)."""

    def __init__(self, ch=8, n_out=10):
        super().__init__()
        with self.init_scope():
            self.c1 = L.Convolution2D(3, ch, 3, pad=1)
            self.bn = L.BatchNormalization(ch)
            self.c2 = L.Convolution2D(ch, ch, 3, pad=1)
            self.c3 = L.Convolution2D(ch, ch, 3, pad=1)
            self.aux = L.Linear(ch, n_out)
            self.fc = L.Linear(ch, n_out)

    def forward(self, x):
        h = F.relu(self.bn(self.c1(x)))
        h = F.max_pooling_2d(F.relu(self.c2(h)), 2)
        aux = self.aux(F.average(h, axis=(2, 3)))
        h = F.relu(self.c3(h))
        return self.fc(F.average(h, axis=(2, 3))), aux


def _image_batch(batch, size=16, n_out=10, dense=False):
    rng = np.random.RandomState(batch)
    x = rng.standard_normal((batch, 3, size, size)).astype(np.float32)
    shape = (batch, size, size) if dense else (batch,)
    t = rng.randint(0, n_out, size=shape).astype(np.int32)
    return x, t


def _vector_batch(batch, dim=64, n_out=10):
    rng = np.random.RandomState(batch)
    return (rng.standard_normal((batch, dim)).astype(np.float32),
            rng.randint(0, n_out, size=batch).astype(np.int32))


def _ce(model, x, t):
    return F.softmax_cross_entropy(model(x), t)


def _two_losses(model, x, t):
    y, aux = model(x)
    return F.softmax_cross_entropy(y, t) + 0.3 * F.softmax_cross_entropy(aux, t)


NETS = {
    "mlp": (MLP, _vector_batch, _ce),
    "resnet": (ResNetLike, _image_batch, _ce),
    "unet": (UNetLike, lambda b: _image_batch(b, n_out=3, dense=True), _ce),
    "inception": (InceptionLike, _image_batch, _ce),
    "dropout": (DropoutNet, _vector_batch, _ce),
    "split": (SplitNet, _vector_batch, _ce),
    "twoheads": (TwoHeads, _image_batch, _two_losses),
}


def make(name, batch=8, seed=0, device="@numpy"):
    """Return (model, x, t, lossfn) for network `name`, initialised from `seed`, on `device`."""
    build, make_batch, lossfn = NETS[name]
    np.random.seed(seed)
    model = build()
    x, t = make_batch(batch)
    with chainer.using_config("train", True):
        lossfn(model, x, t)  # initialise lazy parameters (Linear(None, ...))
    model.to_device(device)
    return model, model.device.send(x), model.device.send(t), lossfn


def persistents(model):
    """Copies of the BatchNormalization running statistics of `model`, by link path (NumPy)."""
    out = {}
    for path, link in model.namedlinks():
        if isinstance(link, L.BatchNormalization):
            out[path + "/avg_mean"] = cuda.to_cpu(link.avg_mean).copy()
            out[path + "/avg_var"] = cuda.to_cpu(link.avg_var).copy()
    return out


def step(model, x, t, lossfn, hook=None, seed=123):
    """One forward/backward step; returns (loss, {param: grad}, {persistent: value}) as NumPy
    arrays. NumPy's and the model's array module's generators are seeded with `seed`."""
    model.cleargrads()
    np.random.seed(seed)
    model.xp.random.seed(seed)
    with chainer.using_config("train", True):
        if hook is None:
            loss = lossfn(model, x, t)
            loss.backward()
        else:
            with hook:
                loss = lossfn(model, x, t)
                loss.backward()
    grads = {k: cuda.to_cpu(p.grad).copy() for k, p in model.namedparams() if p.grad is not None}
    return cuda.to_cpu(loss.array).copy(), grads, persistents(model)


def assert_same(a, b):
    """Bitwise equality of two step() results."""
    assert a[0].tobytes() == b[0].tobytes(), (a[0], b[0])
    assert a[1].keys() == b[1].keys()
    for k in a[1]:
        assert a[1][k].tobytes() == b[1][k].tobytes(), f"gradient of {k} differs"
    assert a[2].keys() == b[2].keys()
    for k in a[2]:
        assert a[2][k].tobytes() == b[2][k].tobytes(), f"persistent {k} differs"


def clone(model):
    return copy.deepcopy(model)
