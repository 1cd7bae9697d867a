"""Exceptions raised by :mod:`torch_ext`; all derive from :class:`lowerset.LowersetError`."""

from lowerset.exceptions import LowersetError, StrategyError

__all__ = ["TorchExtError", "TraceError", "StrategyMismatchError", "HookUsageError"]


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
