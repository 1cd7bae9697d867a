"""Model zoos under RecomputeHook on the CPU: chainercv.links and chainer.links.model.vision.

Every model starts from random weights (``pretrained_model=None``: nothing is downloaded) at a
small input size where the architecture allows one. Each test traces one training step, then
runs it three times from the same state and random seed: plain Chainer, and under
:class:`chainer_ext.RecomputeHook` with Chen's sqrt(n) strategy and with the approximate
memory-centric DP. Loss, every parameter gradient and BatchNormalization's running statistics
must be bitwise equal to the plain run, and each hooked run must have recomputed values.

chainercv 0.13.1 is built by ``scripts/chainercv.py`` (``scripts/venv.sh`` runs it). Its
PSPNet and DeepLab v3+ call ``F.resize_images``, which needs ``chainer_ext``'s NumPy fix (fix 3
of ``chainer_ext/_compat.py``, applied on import).
"""

import copy

import numpy as np
import pytest

chainer = pytest.importorskip("chainer")

import chainer.functions as F  # noqa: E402
import chainer.links as L  # noqa: E402

import lowerset  # noqa: E402
from chainer_ext import RecomputeHook, trace  # noqa: E402


def _cv():
    return pytest.importorskip("chainercv")


def _images(batch, size, seed=0):
    h, w = (size, size) if isinstance(size, int) else size
    return np.random.RandomState(seed).uniform(-1, 1, (batch, 3, h, w)).astype(np.float32)


def _labels(shape, n_class, seed=1):
    return np.random.RandomState(seed).randint(0, n_class, shape).astype(np.int32)


def _pick(model, layer):
    model.pick = layer  # chainercv classifiers: train on the logits, not the softmax
    return model


def _softmax_ce(model, x, t):
    """Softmax cross entropy of the logits (per image, or per pixel for segmentation)."""
    return F.softmax_cross_entropy(model(x), t)


def _ssd_loss(model, x):
    from chainercv.links.model.ssd import multibox_loss
    locs, confs = model(x)
    rng = np.random.RandomState(2)
    gt_locs = rng.normal(size=locs.shape).astype(np.float32)
    gt_labels = rng.randint(0, confs.shape[2], confs.shape[:2]).astype(np.int32)
    loc_loss, conf_loss = multibox_loss(locs, confs, gt_locs, gt_labels, 3)
    return loc_loss + conf_loss


def _sum_of_squares(model, x):
    # chainercv has no YOLO training loss; any loss that reads every output checks the gradients
    return sum(F.sum(F.square(y)) for y in model(x))


def _faster_rcnn_vgg16():
    C = _cv().links
    from chainercv.links.model.faster_rcnn import FasterRCNNTrainChain
    return FasterRCNNTrainChain(C.FasterRCNNVGG16(n_fg_class=3, pretrained_model=None,
                                                  min_size=128, max_size=128,
                                                  anchor_scales=(1, 2, 4)))


def _faster_rcnn_inputs():
    img = _images(1, 128) * 127.5 + 127.5
    bbox = np.array([[[10, 10, 60, 70], [40, 30, 120, 100]]], np.float32)
    return img, bbox, np.array([[0, 2]], np.int32), np.array([1.0], np.float32)


def _vision_loss(layer):
    return lambda m, x, t: F.softmax_cross_entropy(m(x, layers=[layer])[layer], t)


# name -> (build(), inputs(), loss(model, *inputs))
MODELS = {
    # chainercv classification
    "cv-resnet50": (lambda: _pick(_cv().links.ResNet50(n_class=10, pretrained_model=None,
                                                       arch="fb"), "fc6"),
                    lambda: (_images(2, 64), _labels((2,), 10)), _softmax_ce),
    "cv-vgg16": (lambda: _pick(_cv().links.VGG16(n_class=10, pretrained_model=None), "fc8"),
                 lambda: (_images(2, 32), _labels((2,), 10)), _softmax_ce),
    "cv-seresnext50": (lambda: _pick(_cv().links.SEResNeXt50(n_class=10,
                                                             pretrained_model=None), "fc6"),
                       lambda: (_images(2, 64), _labels((2,), 10)), _softmax_ce),
    # chainercv semantic segmentation (per-pixel softmax cross entropy)
    "cv-segnet": (lambda: _cv().links.SegNetBasic(n_class=5),
                  lambda: (_images(2, 32), _labels((2, 32, 32), 5)), _softmax_ce),
    "cv-pspnet-resnet50": (
        lambda: __import__("chainercv.experimental.links", fromlist=["x"]).PSPNetResNet50(
            n_class=5, input_size=(65, 65)),
        lambda: (_images(2, 65), _labels((2, 65, 65), 5)), _softmax_ce),
    "cv-deeplabv3plus-xception65": (
        lambda: _cv().links.DeepLabV3plusXception65(n_class=5, min_input_size=(65, 65)),
        lambda: (_images(2, 65), _labels((2, 65, 65), 5)),
        # the decoder's output has a quarter of the input's resolution
        lambda m, x, t: F.softmax_cross_entropy(F.resize_images(m(x), x.shape[2:]), t)),
    # chainercv detection
    "cv-ssd300": (lambda: _cv().links.SSD300(n_fg_class=3, pretrained_model=None),
                  lambda: (_images(1, 300),), _ssd_loss),
    "cv-yolov2": (lambda: _cv().links.YOLOv2(n_fg_class=3, pretrained_model=None),
                  lambda: (_images(1, 128),), _sum_of_squares),
    "cv-yolov3": (lambda: _cv().links.YOLOv3(n_fg_class=3, pretrained_model=None),
                  lambda: (_images(1, 128),), _sum_of_squares),
    "cv-faster-rcnn-vgg16": (_faster_rcnn_vgg16, _faster_rcnn_inputs,
                             lambda m, *a: m(*a)),
    # chainer.links.model.vision (VGG16Layers and GoogLeNet need 224x224: fixed-size FC layers)
    "vision-resnet50": (lambda: L.ResNet50Layers(pretrained_model=None),
                        lambda: (_images(2, 64), _labels((2,), 1000)), _vision_loss("fc6")),
    "vision-vgg16": (lambda: L.VGG16Layers(pretrained_model=None),
                     lambda: (_images(1, 224), _labels((1,), 1000)), _vision_loss("fc8")),
    "vision-googlenet": (lambda: L.GoogLeNet(pretrained_model=None),
                         lambda: (_images(1, 224), _labels((1,), 1000)),
                         _vision_loss("loss3_fc")),
}

SLOW = {"vision-vgg16"}  # about 20 s at 224x224; cv-vgg16 covers the same layers at 32x32


def _params(model):
    return {name: p for name, p in model.namedparams()}


def _persistents(model):
    out = {}
    for path, link in model.namedlinks():
        for name in link._persistent:
            value = getattr(link, name)
            if isinstance(value, np.ndarray):
                out[f"{path}/{name}"] = value.copy()
    return out


def _step(model, inputs, lossfn, hook=None, seed=7):
    """One forward/backward step in train mode; returns (loss, grads, persistents)."""
    model.cleargrads()
    np.random.seed(seed)  # Dropout and the detectors' sampling draw from NumPy's global RNG
    with chainer.using_config("train", True):
        if hook is None:
            loss = lossfn(model, *inputs)
            loss.backward()
        else:
            with hook:
                loss = lossfn(model, *inputs)
                loss.backward()
    grads = {k: (None if p.grad is None else p.grad.copy()) for k, p in _params(model).items()}
    return loss.array.copy(), grads, _persistents(model)


def _assert_bitwise_equal(ref, got, what):
    assert ref[0].tobytes() == got[0].tobytes(), f"{what}: loss {got[0]} != {ref[0]}"
    assert ref[1].keys() == got[1].keys()
    for k, g in ref[1].items():
        h = got[1][k]
        assert (g is None) == (h is None), f"{what}: gradient of {k}"
        if g is not None:
            assert g.tobytes() == h.tobytes(), \
                f"{what}: gradient of {k} differs by up to {np.abs(g - h).max()}"
    assert ref[2].keys() == got[2].keys()
    for k, v in ref[2].items():
        assert v.tobytes() == got[2][k].tobytes(), f"{what}: persistent {k}"


def _cases():
    for name in MODELS:
        marks = []
        if name in SLOW:
            marks.append(pytest.mark.slow)
        yield pytest.param(name, marks=marks, id=name)


@pytest.mark.parametrize("name", list(_cases()))
def test_bitwise_equal_gradients_under_recompute_hook(name):
    build, make_inputs, lossfn = MODELS[name]
    np.random.seed(0)
    model = build()
    inputs = make_inputs()
    with chainer.using_config("train", True):
        np.random.seed(7)
        # the first forward pass also initialises lazily shaped parameters (in_size=None)
        graph = trace(lambda: lossfn(model, *inputs))
    start = copy.deepcopy(model)
    ref = _step(copy.deepcopy(start), inputs, lossfn)
    assert any(g is not None and np.any(g) for g in ref[1].values()), "no gradient at all"
    strategies = {"chen": lowerset.baselines.chen_sqrtn(graph),
                  "approx-memory": lowerset.solve(graph, mode="memory", method="approx",
                                                  model="paper"),
                  "min peak": lowerset.min_peak(graph, "approx")}
    for label, strategy in strategies.items():
        hook = RecomputeHook(strategy, record=True)
        got = _step(copy.deepcopy(start), inputs, lossfn, hook)
        _assert_bitwise_equal(ref, got, f"{name} with {label}")
        assert hook.events == list(strategy.schedule.events), f"{name} with {label}"
        # the least peak may need no recomputation (when parameters dominate); the others do
        assert hook.last_iteration["recomputed"] or label == "min peak", \
            f"{name} with {label}: nothing recomputed"


def test_chainercv_gpu_nms_loop_matches_cpu_suppression():
    """``scripts/chainercv.py``'s NumPy port of chainercv's ``_nms_gpu_post`` (Cython there).

    The CUDA kernel's suppression mask is built here in NumPy: bit ``k`` of word
    ``i * col_blocks + c`` is set when IoU(box i, box 64 c + k) >= thresh, for every box after
    ``i`` (and every box of a later block). The loop must then keep exactly the boxes that
    chainercv's CPU suppression keeps.
    """
    _cv()
    from chainercv.utils import bbox_iou, non_maximum_suppression
    from chainercv.utils.bbox._nms_gpu_post import _nms_gpu_post

    rng = np.random.RandomState(0)
    n, threads, thresh = 200, 64, 0.3  # four 64-box blocks
    tl = rng.uniform(0, 100, (n, 2))
    bbox = np.concatenate([tl, tl + rng.uniform(5, 40, (n, 2))], axis=1)
    iou = bbox_iou(bbox, bbox)
    col_blocks = -(-n // threads)
    mask = np.zeros(n * col_blocks, np.uint64)
    for i in range(n):
        for j in range(n):
            same_block = j // threads == i // threads
            if (j > i or not same_block) and iou[i, j] >= thresh:
                mask[i * col_blocks + j // threads] |= np.uint64(1) << np.uint64(j % threads)
    selection, n_selection = _nms_gpu_post(mask, n, threads, col_blocks)
    expected = non_maximum_suppression(bbox, thresh)
    assert 0 < len(expected) < n
    assert selection.dtype == np.int32
    assert selection[:n_selection].tolist() == expected.tolist()
