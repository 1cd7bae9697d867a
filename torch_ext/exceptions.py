"""Exceptions raised by :mod:`torch_ext`; all derive from :class:`lowerset.LowersetError`.

Each also derives from the builtin exception that a caller would expect of it (a
:class:`ValueError` for a step the trace cannot use, a :class:`RuntimeError` for misuse), so
that ``except ValueError`` and the like keep catching them. A bad argument raises the core's
:class:`lowerset.ArgumentError` (a ValueError) or :class:`lowerset.ArgumentTypeError` (a
TypeError).
"""

import lowerset.exceptions
from lowerset.exceptions import LowersetError, StrategyError

__all__ = ["TorchExtError", "TraceError", "StrategyMismatchError", "HookUsageError",
           "RecomputationError", "MeasurementError", "InternalError", "MissingTorchAPIError",
           "BatchScalingError", "NoBatchFitsError"]


class TorchExtError(LowersetError):
    """Base class of the errors raised on purpose by :mod:`torch_ext`."""


class TraceError(TorchExtError, ValueError):
    """The traced step did not produce a usable graph (no operation, a loss that is not a
    scalar with a gradient, an autograd construct the trace does not model)."""


class StrategyMismatchError(TorchExtError, StrategyError):
    """The step does not match the graph the strategy was planned for.

    Attributes
    ----------
    position : int or None
        Index (in forward order) of the first operation that differs.
    """

    def __init__(self, message, position=None):
        self.position = position
        super().__init__(message)


class HookUsageError(TorchExtError, RuntimeError):
    """The executor is used in a way it does not support (nesting, a second backward pass over
    one step, a backward pass outside its ``with`` block)."""


class RecomputationError(TorchExtError, RuntimeError):
    """A recomputed value differs from the value its operation made in the forward pass
    (``RecomputeContext(check=True)``): a recomputation read an input that changed since, or
    missed a write the forward pass made into the value's memory.

    Attributes
    ----------
    node : int
        The graph node whose recomputation differs.
    output : int
        The index of the first differing output of that node.
    """

    def __init__(self, message, node, output):
        self.node, self.output = node, output
        super().__init__(message)


class MeasurementError(TorchExtError, RuntimeError):
    """A :class:`~torch_ext.measure.MemoryMeter` cannot measure: another torch profiler is
    already running (the CPU meter reads the memory events of a profiler of its own), or CUDA
    is not available for a CUDA device."""


class InternalError(TorchExtError, RuntimeError):
    """An invariant of torch_ext does not hold: a bug in torch_ext, to be reported."""


class MissingTorchAPIError(TorchExtError, ImportError):
    """The installed PyTorch lacks a private API torch_ext uses (:mod:`torch_ext._compat`),
    raised by ``import torch_ext``: an ImportError, as a missing PyTorch is.

    Attributes
    ----------
    missing : list of str
        Where torch_ext looked for each missing API (dotted paths from ``torch``).
    """

    def __init__(self, message, missing):
        self.missing = missing
        super().__init__(message)


class BatchScalingError(TorchExtError, lowerset.exceptions.BatchScalingError):
    """The traced graphs do not scale with the batch size (different operations, wiring, or
    sizes that are not affine in the batch size)."""


class NoBatchFitsError(TorchExtError, lowerset.exceptions.NoBatchFitsError):
    """Not even the smallest batch fits the memory limit (``budget``, ``min_budget`` and
    ``batch_size`` as :class:`lowerset.NoBatchFitsError`)."""
