"""The seven benchmark networks of the paper (Kusumoto et al., NeurIPS 2019, Sec. 5, Table 1).

``NETWORKS[name]`` is a :class:`Network` for ``name`` in ``"resnet50"``, ``"resnet152"``,
``"vgg19"``, ``"googlenet"``, ``"densenet161"``, ``"unet"``, ``"pspnet"``. All models are
randomly initialised (nothing is downloaded) and are meant to run with
``chainer.config.train = True``: BatchNormalization uses batch statistics and Dropout is active, as
in the authors' graphs. Each network reproduces the authors' published computational graph
``cg_<graph>.txt`` node for node (see ``README.md`` in this folder and ``tests/test_models.py``).

Examples
--------
>>> from examples.models import NETWORKS
>>> net = NETWORKS["vgg19"]
>>> model = net.build()
>>> x, t = net.make_batch(1)
>>> loss = net.loss(model, x, t)   # scalar Variable; loss.backward() trains
"""

from dataclasses import dataclass
from typing import Callable, Tuple

import numpy

__all__ = ["Network", "NETWORKS"]


@dataclass(frozen=True)
class Network:
    """One benchmark network and how to feed it.

    Attributes
    ----------
    name : str
        Key in :data:`NETWORKS`.
    constructor : callable
        ``constructor(size)`` returns the ``chainer.Chain``; ``size`` is the input ``(H, W)``
        (only PSPNet uses it, for its pyramid pooling kernels).
    input_size : tuple of int
        The paper's input ``(H, W)`` (Sec. 5: 572x572 U-Net, 713x713 PSPNet, else 224x224).
    in_channels : int
    n_class : int
    dense : bool
        True for per-pixel labels (U-Net, PSPNet), False for one label per image.
    paper_batch : int
        Batch of Table 1.
    dump_batch : int
        Batch at which the authors dumped ``cg_<graph>.txt`` (the first dimension of its
        variables).
    paper_nodes : int
        #V of Table 1.
    graph : str
        Stem of the authors' graph file, ``cg_<graph>.txt``.
    """

    name: str
    constructor: Callable
    input_size: Tuple[int, int]
    in_channels: int
    n_class: int
    dense: bool
    paper_batch: int
    dump_batch: int
    paper_nodes: int
    graph: str

    @property
    def graph_file(self):
        """File name of the authors' graph, e.g. ``"cg_resnet50.txt"``."""
        return f"cg_{self.graph}.txt"

    def build(self, size=None):
        """Return a new randomly initialised model for input ``size`` (default: paper's)."""
        return self.constructor(tuple(size) if size is not None else self.input_size)

    def label_shape(self, batch, size=None):
        """Shape of the int32 labels for ``batch`` inputs of ``size`` (default: paper's)."""
        if not self.dense:
            return (batch,)
        h, w = size if size is not None else self.input_size
        if self.name == "unet":
            from .unet import output_size
            return (batch, output_size(h), output_size(w))
        return (batch, h, w)

    def make_batch(self, batch, size=None, xp=numpy, seed=0):
        """Return random ``(x, t)``: float32 ``(batch, C, H, W)`` images, int32 labels.

        Parameters
        ----------
        batch : int
        size : tuple of int, optional
            ``(H, W)``; default :attr:`input_size`.
        xp : module, optional
            ``numpy`` or ``cupy``; arrays are drawn with NumPy and moved with ``xp.asarray``.
        seed : int, optional

        Returns
        -------
        x : ndarray of float32, shape (batch, in_channels, H, W)
        t : ndarray of int32, shape :meth:`label_shape`
        """
        h, w = size if size is not None else self.input_size
        rng = numpy.random.RandomState(seed)
        x = rng.uniform(-1, 1, (batch, self.in_channels, h, w)).astype(numpy.float32)
        t = rng.randint(0, self.n_class, self.label_shape(batch, (h, w))).astype(numpy.int32)
        return xp.asarray(x), xp.asarray(t)

    def traced(self, batch, size=None, seed=0):
        """Build a model, draw a batch and trace one training step on the CPU.

        NumPy's global generator is seeded with `seed` before the model is built, so every
        script gets the same weights for the same network and size.

        Returns
        -------
        model : chainer.Chain
        x, t : ndarray
            As :meth:`make_batch`.
        graph : lowerset.Graph
            ``chainer_ext.trace`` of :meth:`loss` with ``chainer.config.train = True``, with
            its execution facts (bytes measured on this step).
        """
        import chainer

        from chainer_ext import trace

        numpy.random.seed(seed)
        model = self.build(size)
        x, t = self.make_batch(batch, size)
        with chainer.using_config("train", True):
            graph = trace(lambda: self.loss(model, x, t))
        return model, x, t, graph

    def loss(self, model, x, t):
        """Return the scalar training loss ``Variable`` of ``model`` on ``(x, t)``.

        Classifiers: softmax cross entropy; GoogLeNet: the sum of its three softmax cross
        entropies; U-Net: per-pixel softmax cross entropy; PSPNet: ``0.4 * aux + main``.
        """
        if self.name == "unet":
            return model.loss(x, t)
        return model(x, t)


def _resnet50(size):
    from .classifiers import ResNet50
    return ResNet50()


def _resnet152(size):
    from .classifiers import ResNet152
    return ResNet152()


def _vgg19(size):
    from .classifiers import VGG19
    return VGG19()


def _googlenet(size):
    from .classifiers import GoogLeNet
    return GoogLeNet()


def _densenet161(size):
    from .classifiers import SoftmaxClassifier
    from .densenet import DenseNet161
    return SoftmaxClassifier(DenseNet161())


def _unet(size):
    from .unet import UNet
    return UNet()


def _pspnet(size):
    from .pspnet import PSPNetTrainChain
    return PSPNetTrainChain(n_class=17, input_size=size)


def _net(name, constructor, size, in_channels, n_class, dense, paper_batch, dump_batch,
         paper_nodes, graph):
    return Network(name, constructor, size, in_channels, n_class, dense, paper_batch,
                   dump_batch, paper_nodes, graph)


#: The seven networks of Table 1, keyed by name.
NETWORKS = {
    n.name: n for n in (
        _net("pspnet", _pspnet, (713, 713), 3, 17, True, 2, 1, 385, "pspnet"),
        _net("unet", _unet, (572, 572), 1, 2, True, 8, 8, 60, "unet"),
        _net("resnet50", _resnet50, (224, 224), 3, 1000, False, 96, 32, 176, "resnet50"),
        _net("resnet152", _resnet152, (224, 224), 3, 1000, False, 48, 32, 516, "resnet152"),
        _net("vgg19", _vgg19, (224, 224), 3, 1000, False, 64, 32, 46, "vgg19"),
        _net("densenet161", _densenet161, (224, 224), 3, 1000, False, 32, 32, 568, "densenet"),
        _net("googlenet", _googlenet, (224, 224), 3, 1000, False, 256, 32, 134, "googlenet"),
    )
}
