"""Exceptions raised by :mod:`lowerset`.

One base class, :class:`LowersetError`; "your input is wrong" errors also derive from
:class:`ValueError`, while "no solution exists" (:class:`InfeasibleBudgetError`) and "the search is
too large" (:class:`SearchLimitError`) do not.
"""

from __future__ import annotations

from os import PathLike
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .verifying import VerifyReport

__all__ = [
    "LowersetError",
    "GraphError",
    "NotALowerSetError",
    "StrategyError",
    "InfeasibleBudgetError",
    "SearchLimitError",
    "FormatError",
    "ArgumentError",
    "ArgumentTypeError",
    "FrozenGraphError",
    "BatchScalingError",
    "NoBatchFitsError",
    "VerificationError",
    "TimeLimitWarning",
    "UnmodeledMemoryWarning",
]


class LowersetError(Exception):
    """Base class of every exception raised on purpose by :mod:`lowerset`."""


class ArgumentError(LowersetError, ValueError):
    """An argument has a bad value: an unknown method or mode, a negative or NaN budget or time
    limit, a non-positive count. The message names the argument and the value given."""


class ArgumentTypeError(LowersetError, TypeError):
    """An argument has the wrong type (a string where a Graph or a number of bytes is expected).
    The message names the argument, the expected type and the type given."""


class GraphError(LowersetError, ValueError):
    """The forward graph is invalid: a cycle, a bad cost or memory, an unknown node, no nodes."""


class FrozenGraphError(LowersetError, AttributeError):
    """An attribute of a :class:`~lowerset.Graph` was rebound or deleted: a Graph is immutable
    after construction (build a new one), which keeps the planner's cached results valid."""


class NotALowerSetError(LowersetError, ValueError):
    """A node set that must be a lower set has an edge entering it from outside."""


class StrategyError(LowersetError, ValueError):
    """A sequence of lower sets is not a valid canonical strategy, or belongs to another graph."""


class InfeasibleBudgetError(LowersetError):
    """No canonical strategy fits the budget (the step's schedule peak, or eq. (2) for the
    paper's model). Each parameter is kept as the attribute of the same name.

    Parameters
    ----------
    budget : int
        The budget asked for, in bytes.
    min_budget : int or None
        The smallest feasible budget in bytes for the same method, when it is known.
    method : str or None
        The planner method that found no strategy, when one is named.
    reason : str or None
        What failed, when the method says (``lowerset.baselines.dtr``: the function and the
        bytes it needed).
    """

    budget: int
    min_budget: int | None
    method: str | None
    reason: str | None

    def __init__(self, budget: int, min_budget: int | None = None, method: str | None = None,
                 reason: str | None = None) -> None:
        self.budget = int(budget)
        self.min_budget = None if min_budget is None else int(min_budget)
        self.method = method
        self.reason = reason
        msg = f"budget {self.budget} bytes ({self.budget / 1e9:.3f} GB) is infeasible"
        if method is not None:
            msg += f" for method={method!r}"
        if reason is not None:
            msg += f": {reason}"
        if self.min_budget is not None:
            msg += (f"; the minimal feasible budget is {self.min_budget} bytes "
                    f"({self.min_budget / 1e9:.3f} GB)")
        super().__init__(msg)


class SearchLimitError(LowersetError):
    """The search is too large: too many lower sets, the caller's time limit passed, or the
    search would not fit in the memory available.

    Parameters
    ----------
    message : str
        The error message.
    limit : str
        Which limit was hit: "max_lower_sets", "time_limit" or "memory".
    """

    limit: str

    def __init__(self, message: str, limit: str) -> None:
        self.limit = limit
        super().__init__(message)


class TimeLimitWarning(UserWarning):
    """A planner call (``solve``, ``min_peak``, ``pareto``) reached its time limit, or skipped
    search steps that would have run past it, and returned the best plan it had found; the
    message names the steps it cut and how to search further (``time_limit=None``)."""


class UnmodeledMemoryWarning(UserWarning):
    """The step allocates memory its schedule leaves out, so a measured peak can be above the
    prediction; the message names what is left out (a front end warns when it traces such a
    step, e.g. ``torch_ext.trace`` of a model sharded by FSDP2 with ``measure_memory=False``)."""


class FormatError(LowersetError, ValueError):
    """A graph or strategy file is malformed; the message starts with the file and line.

    Parameters
    ----------
    message : str
        What is wrong.
    path : str or PathLike
        The file (kept as a str).
    lineno : int or None
        1-based line number of the problem, when it is tied to a line.
    """

    path: str
    lineno: int | None

    def __init__(self, message: str, path: str | PathLike[str],
                 lineno: int | None = None) -> None:
        self.path = str(path)
        self.lineno = lineno
        where = self.path if lineno is None else f"{self.path}, line {lineno}"
        super().__init__(f"{where}: {message}")


class BatchScalingError(LowersetError, ValueError):
    """Graphs traced at two batch sizes do not scale with the batch size: a different structure,
    or sizes that are not affine in it (:func:`lowerset.batching.extrapolate`)."""


class NoBatchFitsError(InfeasibleBudgetError):
    """Not even the smallest batch fits the memory limit (:func:`lowerset.batching.search`).

    Parameters
    ----------
    message : str
        The error message.
    budget : int
        The memory limit, bytes.
    min_budget : int or None
        The least whole-step peak at `batch_size` (bytes), predicted or measured.
    batch_size : int
        The smallest batch size tried.
    """

    batch_size: int

    def __init__(self, message: str, budget: int, min_budget: int | None,
                 batch_size: int) -> None:
        InfeasibleBudgetError.__init__(self, budget, min_budget)
        self.batch_size = batch_size
        self.args = (message,)

    def __str__(self) -> str:
        return str(self.args[0])


class VerificationError(LowersetError, AssertionError):
    """A step under a plan differs from a plain step (a front end's ``verify`` with
    ``raise_on_mismatch=True``).

    Parameters
    ----------
    report : lowerset.verifying.VerifyReport
        What differs; kept as ``.report``.
    """

    report: VerifyReport

    def __init__(self, report: VerifyReport) -> None:
        self.report = report
        where = (f"first at {report.first_mismatch!r}" if report.first_mismatch is not None
                 else "in the events it executed")
        super().__init__(f"the step under the plan differs from a plain step, {where}: "
                         f"{report}")
