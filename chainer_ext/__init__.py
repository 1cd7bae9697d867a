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

from ._compat import import_chainer as _import_chainer

_import_chainer()  # before anything imports chainer: NumPy 2 / Python 3.12 fixes (_compat.py)

from .exceptions import *  # noqa: F401,F403,E402
from .trace import trace, TracedGraph, preset_cost, COST_MODELS  # noqa: F401,E402
from .hook import RecomputeHook, LivenessHook  # noqa: F401,E402
from .memory import peak_memory, PeakMemoryHook, MemoryReport  # noqa: F401,E402
from .batch import (max_batch_size, BatchSizeResult, BatchTrial, BatchScalingError,  # noqa: F401,E402
                    NoBatchFitsError, extrapolate)
from .timeline import measure_timeline, MeasuredTimeline  # noqa: F401,E402
from .verify import verify, VerifyReport, VerificationError  # noqa: F401,E402
from . import exceptions  # noqa: E402

__all__ = (["trace", "TracedGraph", "preset_cost", "COST_MODELS", "RecomputeHook",
            "LivenessHook", "peak_memory", "PeakMemoryHook", "MemoryReport", "max_batch_size",
            "BatchSizeResult", "BatchTrial", "BatchScalingError", "NoBatchFitsError",
            "extrapolate", "measure_timeline", "MeasuredTimeline", "verify", "VerifyReport",
            "VerificationError"]
           + exceptions.__all__)
