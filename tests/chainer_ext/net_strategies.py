"""Hypothesis strategies: random Chainer networks for whole-step memory predictions.

:func:`programs` draws a program of image operations, each applied to earlier tensors of known
shape so that every program runs: convolutions (3x3 or 1x1, ReLU or not), BatchNormalization
(with ReLU), dropout, concatenation, a split into two channel halves (views of the input),
residual adds, max and average pooling, arrays made outside the graph (a branch under
``no_backprop_mode`` added to a graph value, NumPy arithmetic on ``.array``), and loss heads
(global average, a linear layer, softmax cross entropy) at any tensor and on every tensor no
other operation reads, summed into one loss: no branch is a dead end. Convolutions and heads
are lazily sized (``in_channels=None``) or not. :class:`ProgramNet` runs a program. Failing
examples shrink toward a short program of convolutions.
"""

import chainer
import chainer.functions as F
import chainer.links as L
import hypothesis.strategies as st
import numpy as np

__all__ = ["programs", "ProgramNet", "batch_of", "N_CLASSES"]

#: Operation kinds; the first is what a failing example shrinks to.
KINDS = ("conv", "bn", "dropout", "concat", "split", "add", "pool", "head", "detach", "numpy")
N_CLASSES = 10


@st.composite
def programs(draw, max_ops=10):
    """Draw ``(batch, size, ops)``: a batch of ``batch`` images of 3 x size x size and the
    operations, each a tuple whose first entry is its kind (see :class:`ProgramNet`)."""
    batch = draw(st.sampled_from([8, 16]), label="batch")
    size = draw(st.sampled_from([16, 32]), label="size")
    shapes = [(3, size)]          # (channels, side) of each tensor, the input first
    ops = []
    for i in range(draw(st.integers(1, max_ops), label="operations")):
        kind = draw(st.sampled_from(KINDS), label=f"kind {i}")
        src = draw(st.integers(0, len(shapes) - 1), label=f"source {i}")
        c, s = shapes[src]
        if kind == "conv" or src == 0:   # the input gets a convolution first
            out = draw(st.sampled_from([8, 16, 4]))
            k = draw(st.sampled_from([3, 1]))
            ops.append(("conv", src, c, out, k, draw(st.booleans()), draw(st.booleans())))
            shapes.append((out, s))
        elif kind == "bn":
            ops.append(("bn", src, c))
            shapes.append((c, s))
        elif kind == "dropout":
            ops.append(("dropout", src, draw(st.sampled_from([0.3, 0.5]))))
            shapes.append((c, s))
        elif kind in ("concat", "add"):
            same = [u for u, (cu, su) in enumerate(shapes) if u and su == s
                    and (kind == "concat" or cu == c)]
            other = draw(st.sampled_from(same))
            ops.append((kind, src, other))
            shapes.append((c + shapes[other][0] if kind == "concat" else c, s))
        elif kind == "split" and c % 2 == 0:
            ops.append(("split", src))
            shapes += [(c // 2, s), (c // 2, s)]
        elif kind == "pool" and s >= 8:
            ops.append(("pool", src, draw(st.sampled_from(["max", "average"]))))
            shapes.append((c, s // 2))
        elif kind == "head":
            ops.append(("head", src, c, draw(st.booleans())))
        elif kind in ("detach", "numpy"):
            ops.append((kind, src))
            shapes.append((c, s))
        else:   # a split of an odd count of channels, a pooling of a small image: ReLU
            ops.append(("relu", src))
            shapes.append((c, s))
    read = {op[1] for op in ops} | {op[2] for op in ops if op[0] in ("concat", "add")}
    for u in range(1, len(shapes)):   # a loss head on every tensor nothing reads
        if u not in read:
            ops.append(("head", u, shapes[u][0], draw(st.booleans(), label=f"lazy head {u}")))
    return batch, size, tuple(ops)


class ProgramNet(chainer.Chain):
    """Run a program of :func:`programs`; ``forward(x, t)`` returns the summed losses.

    Operations (``src`` and ``other`` index the tensors made so far, the input being 0):
    ``("conv", src, in_ch, out_ch, k, lazy, relu)``, ``("bn", src, ch)`` (with ReLU),
    ``("dropout", src, ratio)``, ``("concat", src, other)``, ``("add", src, other)``,
    ``("split", src)`` (two tensors), ``("pool", src, "max" | "average")`` (2x2),
    ``("relu", src)``, ``("detach", src)`` (plus its tanh computed under
    ``no_backprop_mode``), ``("numpy", src)`` (times ``Variable(h.array * 0.5)``) and
    ``("head", src, ch, lazy)`` (a loss: global average, linear, softmax cross entropy,
    weighted 1 for the last head and 0.5 for the others).
    """

    def __init__(self, ops):
        super().__init__()
        self.ops = ops
        with self.init_scope():
            for i, op in enumerate(ops):
                if op[0] == "conv":
                    _, _, c, out, k, lazy, _ = op
                    setattr(self, f"l{i}", L.Convolution2D(None if lazy else c, out, k,
                                                           pad=k // 2))
                elif op[0] == "bn":
                    setattr(self, f"l{i}", L.BatchNormalization(op[2]))
                elif op[0] == "head":
                    setattr(self, f"l{i}", L.Linear(None if op[3] else op[2], N_CLASSES))

    def forward(self, x, t):
        hs, losses = [x], []
        for i, op in enumerate(self.ops):
            kind, h = op[0], hs[op[1]]
            link = getattr(self, f"l{i}", None)
            if kind == "conv":
                y = link(h)
                hs.append(F.relu(y) if op[6] else y)
            elif kind == "bn":
                hs.append(F.relu(link(h)))
            elif kind == "dropout":
                hs.append(F.dropout(h, op[2]))
            elif kind == "concat":
                hs.append(F.concat([h, hs[op[2]]]))
            elif kind == "add":
                hs.append(h + hs[op[2]])
            elif kind == "split":
                hs += list(F.split_axis(h, 2, axis=1))
            elif kind == "pool":
                pool = F.max_pooling_2d if op[2] == "max" else F.average_pooling_2d
                hs.append(pool(h, 2))
            elif kind == "relu":
                hs.append(F.relu(h))
            elif kind == "detach":
                with chainer.no_backprop_mode():
                    s = F.tanh(h)
                hs.append(h + s)
            elif kind == "numpy":
                hs.append(h * chainer.Variable(h.array * 0.5))
            else:
                losses.append(F.softmax_cross_entropy(link(F.average(h, axis=(2, 3))), t))
        loss = losses[-1]
        for other in losses[:-1]:
            loss = loss + 0.5 * other
        return loss


def batch_of(batch, size, seed=0):
    """``(x, t)``: float32 images (batch, 3, size, size) and int32 labels (batch,)."""
    rng = np.random.RandomState(seed)
    return (rng.standard_normal((batch, 3, size, size)).astype(np.float32),
            rng.randint(0, N_CLASSES, batch).astype(np.int32))
