"""U-Net (Ronneberger et al., MICCAI 2015) in Chainer, as in the authors' ``cg_unet.txt``.

The original Caffe layout: one input channel, 572x572 input, unpadded 3x3 convolutions, 2x2
max pooling, dropout 0.5 after the last ReLU of the two deepest levels, 2x2/2 up-convolutions
(``Deconvolution2D``, to 512, 256, 128 and again 128 channels) each followed by a ReLU, skip
connections cropped to the centre with slicing (``GetItem``) and concatenated before the
up-sampled map, and a 1x1 score convolution to 2 classes; the loss is a per-pixel softmax cross
entropy over the 388x388 output. Link names are the Caffe layer names of the authors' graph
(``conv_d0a_b``, ``upconv_d4c_u3a``, ...), and the network is the top-level chain (no
``/predictor``). 60 nodes with the loss.

Valid input sizes are ``16 * k + 124`` with ``k >= 4`` (572 = 16 * 28 + 124; the smallest is
188); the output is ``input - 184`` pixels wide.
"""

import chainer
import chainer.functions as F
import chainer.links as L
from chainer import initializers

__all__ = ["UNet", "output_size"]


def output_size(size):
    """Side of the score map for an input of side ``size`` (``size - 184``).

    Raises
    ------
    ValueError
        If ``size`` is not ``16 * k + 124`` with ``k >= 4``: then a pooled map has odd size or
        a decoder map vanishes.
    """
    if size < 188 or (size - 124) % 16:
        raise ValueError(f"U-Net input side must be 16 * k + 124 with k >= 4, got {size}")
    return size - 184


class UNet(chainer.Chain):
    """U-Net; ``forward(x)`` returns the score map, ``loss(x, t)`` the softmax cross entropy.

    Parameters
    ----------
    in_channels : int, optional
        Input channels (1, as in the authors' graph).
    n_class : int, optional
        Output classes (2).
    dropout_ratio : float, optional
        Ratio of the two dropout layers (0.5).
    """

    def __init__(self, in_channels=1, n_class=2, dropout_ratio=0.5):
        super().__init__()
        self.dropout_ratio = dropout_ratio
        w = initializers.HeNormal()
        ch = [64, 128, 256, 512, 1024]
        with self.init_scope():
            prev = in_channels
            for i, c in enumerate(ch):
                setattr(self, f"conv_d{i}a_b", L.Convolution2D(prev, c, 3, initialW=w))
                setattr(self, f"conv_d{i}b_c", L.Convolution2D(c, c, 3, initialW=w))
                prev = c
            # decoder: level i receives the up-convolution of level i + 1
            # up-convolution into level i has up[i] channels; as in the original Caffe model,
            # the last one keeps 128 (not 64), so conv_u0b_c sees 64 + 128 = 192 channels
            up = [128, 128, 256, 512]
            self.upconv_d4c_u3a = L.Deconvolution2D(1024, up[3], 2, stride=2, initialW=w)
            for i in (3, 2, 1, 0):
                c = ch[i]
                setattr(self, f"conv_u{i}b_c", L.Convolution2D(c + up[i], c, 3, initialW=w))
                setattr(self, f"conv_u{i}c_d", L.Convolution2D(c, c, 3, initialW=w))
                if i > 0:
                    setattr(self, f"upconv_u{i}d_u{i - 1}a",
                            L.Deconvolution2D(c, up[i - 1], 2, stride=2, initialW=w))
            self.conv_u0d_score = L.Convolution2D(64, n_class, 1, initialW=w)

    @staticmethod
    def _crop(skip, like):
        """Centre crop of ``skip`` to the spatial size of ``like`` (one ``GetItem``)."""
        dh = (skip.shape[2] - like.shape[2]) // 2
        dw = (skip.shape[3] - like.shape[3]) // 2
        return skip[:, :, dh:-dh, dw:-dw]

    def forward(self, x):
        output_size(x.shape[2])
        output_size(x.shape[3])
        skips = []
        h = x
        for i in range(5):
            h = F.relu(getattr(self, f"conv_d{i}a_b")(h))
            h = F.relu(getattr(self, f"conv_d{i}b_c")(h))
            if i >= 3:
                h = F.dropout(h, ratio=self.dropout_ratio)
            if i < 4:
                skips.append(h)
                h = F.max_pooling_2d(h, 2, stride=2)
        h = F.relu(self.upconv_d4c_u3a(h))
        for i in (3, 2, 1, 0):
            h = F.concat((self._crop(skips[i], h), h), axis=1)
            h = F.relu(getattr(self, f"conv_u{i}b_c")(h))
            h = F.relu(getattr(self, f"conv_u{i}c_d")(h))
            if i > 0:
                h = F.relu(getattr(self, f"upconv_u{i}d_u{i - 1}a")(h))
        return self.conv_u0d_score(h)

    def loss(self, x, t):
        """Per-pixel softmax cross entropy; ``t`` is int32 of shape ``(N, H - 184, W - 184)``."""
        return F.softmax_cross_entropy(self.forward(x), t)
