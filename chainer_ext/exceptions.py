"""Exceptions raised by :mod:`chainer_ext`; all derive from :class:`lowerset.LowersetError`."""

from lowerset.exceptions import LowersetError, StrategyError

__all__ = ["ChainerExtError", "TraceError", "StrategyMismatchError", "HookUsageError"]


class ChainerExtError(LowersetError):
    """Base class of the errors raised on purpose by :mod:`chainer_ext`."""


class TraceError(ChainerExtError, ValueError):
    """The traced callable did not produce a usable graph (no function applied, bad return)."""


class StrategyMismatchError(ChainerExtError, StrategyError):
    """The forward pass does not match the graph the strategy was planned for.

    Parameters
    ----------
    message : str
        The error message.
    position : int or None
        Index (in forward order) of the first function application that differs; kept as
        ``.position``.
    """

    def __init__(self, message: str, position: int | None = None) -> None:
        self.position = position
        super().__init__(message)


class HookUsageError(ChainerExtError, RuntimeError):
    """A hook is used in a way it does not support (for instance two nested RecomputeHooks)."""
