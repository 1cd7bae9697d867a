"""Training steps of at most 11 Chainer functions, small enough for the exhaustive search over
every lower-set sequence (``lowerset.bruteforce``): the traced-fact sample of the optimality
tests and of examples/bench_optimality.py.

Each entry of :data:`STEPS` is ``name -> make(scale=1)``; ``make`` builds the links and a batch
(seeded) and returns a callable that runs one forward pass and returns the loss. `scale`
multiplies the batch, so the activations' share of the step grows with it.
"""

import chainer.functions as F
import chainer.links as L
import numpy as np


def _data(shape, n_out, seed):
    rng = np.random.RandomState(seed)
    return (rng.standard_normal(shape).astype(np.float32),
            rng.randint(0, n_out, shape[0]).astype(np.int32))


def mlp(scale=1):
    """Linear-ReLU x2, Linear, softmax cross entropy (6 functions)."""
    np.random.seed(0)
    l1, l2, l3 = L.Linear(32, 64), L.Linear(64, 64), L.Linear(64, 10)
    x, t = _data((16 * scale, 32), 10, 0)
    return lambda: F.softmax_cross_entropy(l3(F.relu(l2(F.relu(l1(x))))), t)


def cnn(scale=1):
    """Conv-BN-ReLU, conv-ReLU, max pooling, Linear (9 functions, BatchNormalization state)."""
    np.random.seed(1)
    c1, bn = L.Convolution2D(3, 8, 3, pad=1), L.BatchNormalization(8)
    c2, fc = L.Convolution2D(8, 8, 3, pad=1), L.Linear(8 * 4 * 4, 10)
    x, t = _data((4 * scale, 3, 8, 8), 10, 1)

    def step():
        h = F.relu(c2(F.relu(bn(c1(x)))))
        return F.softmax_cross_entropy(fc(F.max_pooling_2d(h, 2)), t)
    return step


def dense(scale=1):
    """A dense block: each conv-ReLU output concatenated to its input (10 functions)."""
    np.random.seed(2)
    c0, c1 = L.Convolution2D(3, 4, 3, pad=1), L.Convolution2D(4, 4, 3, pad=1)
    c2 = L.Convolution2D(8, 4, 3, pad=1)
    x, _ = _data((4 * scale, 3, 8, 8), 10, 2)

    def step():
        h0 = F.relu(c0(x))
        h1 = F.concat([h0, F.relu(c1(h0))])
        h2 = F.concat([h1, F.relu(c2(h1))])
        return F.sum(h2 * h2)
    return step


def dropout(scale=1):
    """Linear-ReLU-dropout, Linear (5 functions, a stochastic one)."""
    np.random.seed(3)
    l1, l2 = L.Linear(32, 64), L.Linear(64, 10)
    x, t = _data((16 * scale, 32), 10, 3)
    return lambda: F.softmax_cross_entropy(l2(F.dropout(F.relu(l1(x)), 0.5)), t)


def residual(scale=1):
    """Conv-ReLU, a residual conv with a skip, average pooling, Linear (8 functions)."""
    np.random.seed(4)
    c1, c2, fc = L.Convolution2D(3, 8, 3, pad=1), L.Convolution2D(8, 8, 3, pad=1), L.Linear(8, 10)
    x, t = _data((4 * scale, 3, 8, 8), 10, 4)

    def step():
        h = F.relu(c1(x))
        y = F.relu(h + c2(h))
        return F.softmax_cross_entropy(fc(F.average(y, axis=(2, 3))), t)
    return step


def split(scale=1):
    """A two-output split_axis whose halves take different paths, then concat (10 functions)."""
    np.random.seed(5)
    l1, la, lb, l2 = L.Linear(16, 64), L.Linear(32, 32), L.Linear(32, 32), L.Linear(64, 10)
    x, t = _data((8 * scale, 16), 10, 5)

    def step():
        a, b = F.split_axis(F.relu(l1(x)), 2, axis=1)
        return F.softmax_cross_entropy(l2(F.concat([F.relu(la(a)), F.tanh(lb(b))])), t)
    return step


def twoheads(scale=1):
    """Two heads on a conv trunk, their losses summed (11 functions)."""
    np.random.seed(6)
    c1, c2 = L.Convolution2D(3, 4, 3, pad=1), L.Convolution2D(4, 4, 3, pad=1)
    fa, fb = L.Linear(4 * 64, 10), L.Linear(4 * 64, 10)
    x, t = _data((4 * scale, 3, 8, 8), 10, 6)

    def step():
        h = F.relu(c1(x))
        g = F.relu(c2(h))
        return F.softmax_cross_entropy(fa(h), t) + F.softmax_cross_entropy(fb(g), t)
    return step


STEPS = {"mlp": mlp, "cnn": cnn, "dense": dense, "dropout": dropout, "residual": residual,
         "split": split, "twoheads": twoheads}
