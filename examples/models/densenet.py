"""DenseNet-161 (Huang et al., CVPR 2017) in Chainer, as in the authors' ``cg_densenet.txt``.

Written here because chainercv does not install on Python 3.11. The layout and the parameter
names follow the authors' graph exactly:

- stem: ``c0`` (7x7/2, pad 3, 96 channels, no bias), ``bn0``, ReLU, 3x3/2 max pooling (pad 1,
  ``cover_all=False``);
- dense blocks ``d0``..``d3`` of 6, 12, 36, 24 layers, growth rate 48; layer ``i`` of a block is
  ``bn0``-ReLU-``c0`` (1x1, 192 channels)-``bn1``-ReLU-``c1`` (3x3, 48 channels), then
  ``concat(x, new)``;
- transitions ``t0``..``t2``: ``bn0``-ReLU-``c0`` (1x1, half the channels)-2x2/2 average pooling;
- head: ``t3_bn0``, ReLU, 7x7 global average pooling, reshape, ``fc`` (2208 -> 1000, with bias).

No convolution has a bias. No dropout (the authors' graph has none). 568 nodes with the loss.
"""

import chainer
import chainer.functions as F
import chainer.links as L
from chainer import initializers

__all__ = ["DenseNet161", "DenseLayer", "Transition"]


class DenseLayer(chainer.Chain):
    """BN-ReLU-Conv1x1-BN-ReLU-Conv3x3, concatenated to its input along channels."""

    def __init__(self, in_channels, growth_rate, bn_size=4, initialW=None):
        super().__init__()
        mid = bn_size * growth_rate
        with self.init_scope():
            self.bn0 = L.BatchNormalization(in_channels)
            self.c0 = L.Convolution2D(in_channels, mid, 1, nobias=True, initialW=initialW)
            self.bn1 = L.BatchNormalization(mid)
            self.c1 = L.Convolution2D(mid, growth_rate, 3, pad=1, nobias=True,
                                      initialW=initialW)

    def forward(self, x):
        h = self.c0(F.relu(self.bn0(x)))
        h = self.c1(F.relu(self.bn1(h)))
        return F.concat((x, h), axis=1)


class Transition(chainer.Chain):
    """BN-ReLU-Conv1x1 followed by 2x2/2 average pooling."""

    def __init__(self, in_channels, out_channels, initialW=None):
        super().__init__()
        with self.init_scope():
            self.bn0 = L.BatchNormalization(in_channels)
            self.c0 = L.Convolution2D(in_channels, out_channels, 1, nobias=True,
                                      initialW=initialW)

    def forward(self, x):
        h = self.c0(F.relu(self.bn0(x)))
        return F.average_pooling_2d(h, 2, stride=2)


class DenseNet161(chainer.Chain):
    """DenseNet-161; ``forward(x)`` returns the logits.

    Wrap it in :class:`classifiers.SoftmaxClassifier` for the loss (parameter names then read
    ``/predictor/...`` as in the authors' graph).

    Parameters
    ----------
    n_class : int, optional
        Number of classes (1000, as in the authors' graph).
    blocks : tuple of int, optional
        Layers per dense block.
    growth_rate, init_channels, bn_size : int, optional
        DenseNet-161 defaults 48, 96, 4.
    """

    def __init__(self, n_class=1000, blocks=(6, 12, 36, 24), growth_rate=48, init_channels=96,
                 bn_size=4):
        super().__init__()
        initialW = initializers.HeNormal()
        ch = init_channels
        with self.init_scope():
            self.c0 = L.Convolution2D(3, ch, 7, stride=2, pad=3, nobias=True, initialW=initialW)
            self.bn0 = L.BatchNormalization(ch)
        for b, n_layers in enumerate(blocks):
            block = chainer.ChainList()
            for _ in range(n_layers):
                block.add_link(DenseLayer(ch, growth_rate, bn_size, initialW))
                ch += growth_rate
            with self.init_scope():
                setattr(self, f"d{b}", block)
            if b < len(blocks) - 1:
                with self.init_scope():
                    setattr(self, f"t{b}", Transition(ch, ch // 2, initialW))
                ch //= 2
        self.n_blocks = len(blocks)
        with self.init_scope():
            setattr(self, f"t{len(blocks) - 1}_bn0", L.BatchNormalization(ch))
            self.fc = L.Linear(ch, n_class)

    def forward(self, x):
        h = F.relu(self.bn0(self.c0(x)))
        h = F.max_pooling_2d(h, 3, stride=2, pad=1, cover_all=False)
        for b in range(self.n_blocks):
            for layer in getattr(self, f"d{b}"):
                h = layer(h)
            if b < self.n_blocks - 1:
                h = getattr(self, f"t{b}")(h)
        h = F.relu(getattr(self, f"t{self.n_blocks - 1}_bn0")(h))
        n, c, rows, cols = h.shape
        h = F.average_pooling_2d(h, (rows, cols), stride=1)
        h = F.reshape(h, (n, c))
        return self.fc(h)
