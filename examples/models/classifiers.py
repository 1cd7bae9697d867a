"""Thin wrappers around the ImageNet classifiers in ``chainer.links``.

ResNet50, ResNet152, VGG19 and GoogLeNet come from ``chainer.links`` with ``pretrained_model=None``
(random initialisation, nothing is downloaded). Each wrapper holds the network as ``predictor``,
like ``chainer.links.Classifier``, so parameter names read ``/predictor/...`` as in the authors'
graphs (``cg_resnet50.txt``...). Unlike ``Classifier``, ``forward(x, t)`` returns only the loss:
no accuracy is computed, so the traced graph holds exactly the nodes of the authors' files.
"""

import chainer
import chainer.functions as F
import chainer.links as L

__all__ = ["SoftmaxClassifier", "ResNet50", "ResNet152", "VGG19", "GoogLeNet"]


class SoftmaxClassifier(chainer.Chain):
    """``predictor`` followed by softmax cross entropy; ``forward(x, t)`` returns the loss.

    Parameters
    ----------
    predictor : chainer.Link
        Maps ``x`` to logits.
    """

    def __init__(self, predictor):
        super().__init__()
        with self.init_scope():
            self.predictor = predictor

    def logits(self, x):
        return self.predictor(x)

    def forward(self, x, t):
        return F.softmax_cross_entropy(self.logits(x), t)


class _LayersClassifier(SoftmaxClassifier):
    """Softmax cross entropy on one output layer of a ``chainer.links`` ``*Layers`` model."""

    _layer = None

    def logits(self, x):
        return self.predictor(x, layers=[self._layer])[self._layer]


class ResNet50(_LayersClassifier):
    """``chainer.links.ResNet50Layers`` (bias in conv1, as in the authors' graph) + softmax CE."""

    _layer = "fc6"

    def __init__(self):
        super().__init__(L.ResNet50Layers(pretrained_model=None))


class ResNet152(_LayersClassifier):
    """``chainer.links.ResNet152Layers`` + softmax cross entropy."""

    _layer = "fc6"

    def __init__(self):
        super().__init__(L.ResNet152Layers(pretrained_model=None))


class VGG19(_LayersClassifier):
    """``chainer.links.VGG19Layers`` (dropout 0.5 after fc6 and fc7) + softmax cross entropy."""

    _layer = "fc8"

    def __init__(self):
        super().__init__(L.VGG19Layers(pretrained_model=None))


class GoogLeNet(chainer.Chain):
    """``chainer.links.GoogLeNet``, trained on the sum of its three softmax cross entropies.

    The loss is ``(loss1 + loss2) + loss3`` with the auxiliary heads ``loss1_*`` (on the output
    of inception 4a) and ``loss2_*`` (on inception 4d), in the order of the two ``Add`` nodes of
    the authors' ``cg_googlenet.txt``. The layers are run from ``GoogLeNet.functions`` directly
    rather than through ``GoogLeNet.forward``, which would also compute the unused ``prob``
    softmax.
    """

    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.predictor = L.GoogLeNet(pretrained_model=None)

    def logits(self, x):
        """Return ``(loss1_fc2, loss2_fc2, loss3_fc)`` pre-softmax outputs."""
        funcs = self.predictor.functions
        h = x
        cache = {}
        for key in ("conv1", "pool1", "conv2_reduce", "conv2", "pool2", "inception_3a",
                    "inception_3b", "pool3", "inception_4a", "inception_4b", "inception_4c",
                    "inception_4d", "inception_4e", "pool4", "inception_5a", "inception_5b",
                    "pool5", "loss3_fc"):
            for f in funcs[key]:
                h = f(h)
            cache[key] = h
        out = {}
        for key, src in (("loss1_fc2", "inception_4a"), ("loss2_fc2", "inception_4d")):
            a = cache[src]
            for f in funcs[key]:
                a = f(a)
            out[key] = a
        return out["loss1_fc2"], out["loss2_fc2"], cache["loss3_fc"]

    def forward(self, x, t):
        y1, y2, y3 = self.logits(x)
        loss1 = F.softmax_cross_entropy(y1, t)
        loss2 = F.softmax_cross_entropy(y2, t)
        loss3 = F.softmax_cross_entropy(y3, t)
        return loss1 + loss2 + loss3
