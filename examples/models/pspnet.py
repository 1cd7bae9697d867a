"""PSPNet (Zhao et al., CVPR 2017) with a dilated ResNet-101, as in the authors' ``cg_pspnet.txt``.

Written here so that Table 1 runs without chainercv (whose last release, 0.13.1, does not install
from PyPI on Python >= 3.9; ``scripts/chainercv.py`` builds it). It reproduces chainercv's
``PSPNetResNet101`` and the ``TrainChain`` of its PSPNet training example, which is what the
authors' graph records (parameter names ``/model/extractor/...``, ``/aux_conv1/...``):

- extractor (dilated ResNet-101): ``conv1_1`` (3x3/2), ``conv1_2``, ``conv1_3`` (each conv-BN-ReLU,
  no bias), 3x3/2 max pooling with pad 1, then ``res2``..``res5`` with 3, 4, 23, 3 bottlenecks.
  The stride of a bottleneck sits on its 3x3 ``conv2`` (chainercv ``stride_first=False``);
  ``res3`` has stride 2, ``res4`` and ``res5`` have stride 1 and dilation 2 and 4. The first
  block of each stage has a projection shortcut ``residual_conv``. Output stride 8;
- pyramid pooling ``ppm``: for bins 6, 3, 2, 1 an average pooling with kernel = stride =
  ``(input // 8) // bin``, a 1x1 conv-BN-ReLU to 512 channels and a bilinear resize back to the
  feature size; concatenated after the feature map (4096 channels);
- head: ``head_conv1`` (3x3 conv-BN-ReLU, 512), dropout 0.1, ``head_conv2`` (1x1, with bias),
  bilinear resize to the input size;
- auxiliary head on the ``res4`` output: ``aux_conv1`` (3x3 conv-BN-ReLU, 512), dropout 0.1,
  ``aux_conv2`` (3x3, with bias), resize to the input size;
- loss: ``0.4 * aux_loss + main_loss``, both per-pixel softmax cross entropies.

The number of classes is 17: the authors' ``head_conv2/b`` has 68 bytes. 385 nodes with the loss.

Importing this module imports :mod:`chainer_ext` first, which applies its fix for Chainer 7.8.1's
``resize_images`` (it uses ``numpy.float``, which NumPy >= 1.24 no longer has; see
``chainer_ext/_compat.py``).
"""

import chainer
import chainer.functions as F
import chainer.links as L
from chainer import initializers

import chainer_ext  # noqa: F401  (first: its NumPy fixes for Chainer, resize_images among them)

__all__ = ["PSPNetTrainChain", "PSPNet", "DilatedResNet", "Conv2DBNActiv", "PyramidPoolingModule"]


class Conv2DBNActiv(chainer.Chain):
    """``conv`` (no bias) - ``bn`` - optional ReLU, as chainercv's ``Conv2DBNActiv``."""

    def __init__(self, in_channels, out_channels, ksize, stride=1, pad=0, dilate=1, activ=True,
                 initialW=None):
        super().__init__()
        self.activ = activ
        with self.init_scope():
            self.conv = L.Convolution2D(in_channels, out_channels, ksize, stride, pad,
                                        nobias=True, initialW=initialW, dilate=dilate)
            self.bn = L.BatchNormalization(out_channels)

    def forward(self, x):
        h = self.bn(self.conv(x))
        return F.relu(h) if self.activ else h


class Bottleneck(chainer.Chain):
    """1x1 - 3x3 (stride, dilation) - 1x1 bottleneck; ``relu(conv3 + shortcut)``."""

    def __init__(self, in_channels, mid_channels, out_channels, stride=1, dilate=1,
                 residual_conv=False, initialW=None):
        super().__init__()
        with self.init_scope():
            self.conv1 = Conv2DBNActiv(in_channels, mid_channels, 1, 1, 0, initialW=initialW)
            self.conv2 = Conv2DBNActiv(mid_channels, mid_channels, 3, stride, dilate, dilate,
                                       initialW=initialW)
            self.conv3 = Conv2DBNActiv(mid_channels, out_channels, 1, 1, 0, activ=False,
                                       initialW=initialW)
            if residual_conv:
                self.residual_conv = Conv2DBNActiv(in_channels, out_channels, 1, stride, 0,
                                                   activ=False, initialW=initialW)

    def forward(self, x):
        h = self.conv3(self.conv2(self.conv1(x)))
        if hasattr(self, "residual_conv"):
            return F.relu(h + self.residual_conv(x))
        return F.relu(h + x)


class ResBlock(chainer.Chain):
    """``a`` (projection shortcut) followed by ``b1``..``b{n-1}``."""

    def __init__(self, n_layer, in_channels, mid_channels, out_channels, stride, dilate,
                 initialW=None):
        super().__init__()
        self.n_layer = n_layer
        with self.init_scope():
            self.a = Bottleneck(in_channels, mid_channels, out_channels, stride, dilate,
                                residual_conv=True, initialW=initialW)
            for i in range(1, n_layer):
                setattr(self, f"b{i}", Bottleneck(out_channels, mid_channels, out_channels, 1,
                                                  dilate, initialW=initialW))

    def forward(self, x):
        h = self.a(x)
        for i in range(1, self.n_layer):
            h = getattr(self, f"b{i}")(h)
        return h


class DilatedResNet(chainer.Chain):
    """Dilated ResNet-101 (output stride 8); ``forward`` returns ``(res4, res5)`` outputs."""

    def __init__(self, blocks=(3, 4, 23, 3), initialW=None):
        super().__init__()
        w = initialW
        with self.init_scope():
            self.conv1_1 = Conv2DBNActiv(3, 64, 3, 2, 1, initialW=w)
            self.conv1_2 = Conv2DBNActiv(64, 64, 3, 1, 1, initialW=w)
            self.conv1_3 = Conv2DBNActiv(64, 128, 3, 1, 1, initialW=w)
            self.res2 = ResBlock(blocks[0], 128, 64, 256, 1, 1, initialW=w)
            self.res3 = ResBlock(blocks[1], 256, 128, 512, 2, 1, initialW=w)
            self.res4 = ResBlock(blocks[2], 512, 256, 1024, 1, 2, initialW=w)
            self.res5 = ResBlock(blocks[3], 1024, 512, 2048, 1, 4, initialW=w)

    def forward(self, x):
        h = self.conv1_3(self.conv1_2(self.conv1_1(x)))
        h = F.max_pooling_2d(h, 3, stride=2, pad=1)
        h = self.res3(self.res2(h))
        aux = self.res4(h)
        return aux, self.res5(aux)


class PyramidPoolingModule(chainer.ChainList):
    """Average pooling to ``bins`` x ``bins``, 1x1 conv-BN-ReLU, resize, concat after ``x``.

    The pooling kernel and stride are ``feat_size // bin`` with ``feat_size = input // 8`` as in
    chainercv; for a 713x713 input the feature map is 90x90 and the kernels are 14, 29, 44, 89.
    """

    def __init__(self, in_channels, feat_size, pyramids=(6, 3, 2, 1), initialW=None):
        out_channels = in_channels // len(pyramids)
        super().__init__(*[Conv2DBNActiv(in_channels, out_channels, 1, 1, 0, initialW=initialW)
                           for _ in pyramids])
        self.ksizes = [(feat_size[0] // p, feat_size[1] // p) for p in pyramids]

    def forward(self, x):
        ys = [x]
        H, W = x.shape[2:]
        for f, ksize in zip(self, self.ksizes):
            y = F.average_pooling_2d(x, ksize, ksize)
            y = f(y)
            ys.append(F.resize_images(y, (H, W)))
        return F.concat(ys, axis=1)


class PSPNet(chainer.Chain):
    """PSPNet-ResNet101 (chainercv's ``PSPNetResNet101``): ``extractor``, ``ppm``, head.

    Parameters
    ----------
    n_class : int
    input_size : tuple of int
        ``(H, W)`` the pyramid pooling kernels are computed for (713x713 in the paper).
    """

    def __init__(self, n_class=17, input_size=(713, 713)):
        super().__init__()
        w = initializers.HeNormal()
        self.n_class = n_class
        self.input_size = tuple(input_size)
        feat_size = (input_size[0] // 8, input_size[1] // 8)
        with self.init_scope():
            self.extractor = DilatedResNet(initialW=w)
            self.ppm = PyramidPoolingModule(2048, feat_size, initialW=w)
            self.head_conv1 = Conv2DBNActiv(4096, 512, 3, 1, 1, initialW=w)
            self.head_conv2 = L.Convolution2D(512, n_class, 1, 1, 0, initialW=w)

    def head(self, h, size):
        h = F.dropout(self.head_conv1(self.ppm(h)), ratio=0.1)
        return F.resize_images(self.head_conv2(h), size)

    def forward(self, x):
        _, h = self.extractor(x)
        return self.head(h, x.shape[2:])


class PSPNetTrainChain(chainer.Chain):
    """PSPNet with the auxiliary head; ``forward(x, t)`` returns ``0.4 * aux + main`` loss."""

    def __init__(self, n_class=17, input_size=(713, 713)):
        super().__init__()
        w = initializers.HeNormal()
        with self.init_scope():
            self.model = PSPNet(n_class, input_size)
            self.aux_conv1 = Conv2DBNActiv(1024, 512, 3, 1, 1, initialW=w)
            self.aux_conv2 = L.Convolution2D(512, n_class, 3, 1, 1, initialW=w)

    def forward(self, x, t):
        size = x.shape[2:]
        h_aux, h_main = self.model.extractor(x)
        h_aux = F.dropout(self.aux_conv1(h_aux), ratio=0.1)
        h_aux = F.resize_images(self.aux_conv2(h_aux), size)
        h_main = self.model.head(h_main, size)
        aux_loss = F.softmax_cross_entropy(h_aux, t)
        main_loss = F.softmax_cross_entropy(h_main, t)
        return 0.4 * aux_loss + main_loss
