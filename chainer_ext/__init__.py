"""Chainer executor for :mod:`lowerset` plans (Kusumoto et al., NeurIPS 2019, Sec. 3).

Needs Chainer 7.8.1: ``pip install 'lowerset[chainer]'``; without it, ``import chainer_ext``
raises ``ModuleNotFoundError`` (an ``ImportError``) saying so. Importing this package first
applies the fixes that let Chainer 7.8.1 run on NumPy 2, Python >= 3.12 and NumPy >= 1.24
(``numpy.sctypes``, a ``numpy.distutils`` stub during ``import chainer``, ``numpy.float`` in
``F.resize_images``, which chainercv's PSPNet and DeepLab call); each acts only where it is
needed, and ``chainer_ext._compat.applied`` lists those that ran (see ``_compat.py``).

>>> graph = trace(lambda: F.softmax_cross_entropy(model(x), t))   # doctest: +SKIP
>>> hook = RecomputeHook(lowerset.solve(graph, mode="time"))      # doctest: +SKIP
"""

# ruff: noqa: E402, F401, F403
from ._compat import import_chainer as _import_chainer

_import_chainer()  # before anything imports chainer: NumPy 2 / Python 3.12 fixes (_compat.py)

from . import exceptions
from .batch import (
    BatchScalingError,
    BatchSizeResult,
    BatchTrial,
    NoBatchFitsError,
    extrapolate,
    max_batch_size,
)
from .exceptions import *
from .hook import LivenessHook, RecomputeHook
from .memory import MemoryReport, PeakMemoryHook, peak_memory
from .timeline import MeasuredTimeline, measure_timeline
from .trace import COST_MODELS, TracedGraph, preset_cost, trace
from .verify import VerificationError, VerifyReport, verify

__all__ = (["trace", "TracedGraph", "preset_cost", "COST_MODELS", "RecomputeHook",
            "LivenessHook", "peak_memory", "PeakMemoryHook", "MemoryReport", "max_batch_size",
            "BatchSizeResult", "BatchTrial", "BatchScalingError", "NoBatchFitsError",
            "extrapolate", "measure_timeline", "MeasuredTimeline", "verify", "VerifyReport",
            "VerificationError"]
           + exceptions.__all__)
