"""Exceptions raised by :mod:`torch_ext`; all derive from :class:`lowerset.LowersetError`.

Each also derives from the builtin exception that a caller would expect of it (a
:class:`ValueError` for a step the trace cannot use, a :class:`RuntimeError` for misuse), so
that ``except ValueError`` and the like keep catching them. A bad argument raises the core's
:class:`lowerset.ArgumentError` (a ValueError) or :class:`lowerset.ArgumentTypeError` (a
TypeError).
"""

from collections.abc import Iterable
from typing import NamedTuple, Optional

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


#: ``(shape, dtype, device)`` of a tensor as an :class:`OpRecord` shows it: the shape in
#: elements, the dtype without ``torch.`` (``"float32"``), the device as ``str`` gives it.
TensorSignature = tuple[tuple[int, ...], str, str]


class OpRecord(NamedTuple):
    """One forward operation as a :class:`StrategyMismatchError` shows it: of the traced step
    (``error.traced``) or of the step being run (``error.actual``).

    Attributes
    ----------
    index : int
        Position in the forward pass's dispatch order, counting the operations that are not
        nodes of the graph (the "operation i" of the error's message).
    op : str
        The ATen overload, e.g. ``"aten.addmm.default"``.
    node : int or None
        The graph node the operation is (in this step: the node it matched); None for an
        operation on parameters and inputs only, which is not a node, and for this step's
        operation where it matched none.
    inputs : tuple of (tuple of int, str, str), or None
        ``(shape, dtype, device)`` of each tensor argument, shapes in elements; None where
        not recorded (a traced operation that is not a node).
    outputs : tuple of (tuple of int, str, str), or None
        The same of each output tensor; None where not known (an operation that did not run).
    where : tuple of (str, int, str), or None
        ``(file, line, function)`` of the innermost frame outside torch and torch_ext that
        dispatched it: for a traced operation, recorded by ``trace(..., debug=True)`` (else
        None); for this step's differing operation, always.
    """

    # the field shadows tuple.index (the method): a public name since the record's first
    # release, and an OpRecord is never searched with .index()
    index: int  # type: ignore[assignment]
    op: str
    node: Optional[int]
    inputs: Optional[tuple[TensorSignature, ...]]
    outputs: Optional[tuple[TensorSignature, ...]]
    where: Optional[tuple[str, int, str]]


class StrategyMismatchError(TorchExtError, StrategyError):
    """The step does not match the graph the strategy was planned for.

    Where the difference shows in the forward pass, the message lists the operations around
    it in pairs, the traced step's above this step's: up to :data:`CONTEXT` operations before
    the differing one, and the differing one (marked ``>``), each with the shapes and dtypes
    of its tensor arguments and outputs and, where known, the file and line of the user's code
    that dispatched it.

    Each parameter but `message` is kept as the attribute of the same name.

    Parameters
    ----------
    message : str
        The error message.
    position : int or None
        Index (in forward order) of the first node that differs.
    operation : int or None
        Index in the forward pass's dispatch order (operations that are not nodes counted) of
        the first operation that differs; None where the difference is not in the forward
        pass (the backward calls' order).
    traced : tuple of OpRecord
        The traced step's operations at ``operation - CONTEXT`` to `operation` (the last one
        missing where the traced step has no more); empty where `operation` is None.
    actual : tuple of OpRecord
        This step's operations up to the same one (the last one missing where the backward
        pass started in its place); a node's arguments and outputs there are the traced ones,
        which the check found equal; empty where `operation` is None.
    """

    position: int | None
    operation: int | None
    traced: tuple[OpRecord, ...]
    actual: tuple[OpRecord, ...]

    def __init__(self, message: str, position: int | None = None, *,
                 operation: int | None = None, traced: Iterable[OpRecord] = (),
                 actual: Iterable[OpRecord] = ()) -> None:
        self.position = position
        self.operation = operation
        self.traced, self.actual = tuple(traced), tuple(actual)
        super().__init__(message)

    def __str__(self) -> str:
        message = super().__str__()
        if self.operation is None or not (self.traced or self.actual):
            return message
        return f"{message}\n{_side_by_side(self.operation, self.traced, self.actual)}"


#: How many operations before the differing one a StrategyMismatchError shows.
CONTEXT = 3


def _side_by_side(operation, traced, actual):
    """The rows of the operations around a mismatch: per index, the traced one, then this
    step's."""
    by_index = ({r.index: r for r in traced}, {r.index: r for r in actual})
    first = min(r.index for r in traced + actual)
    rows = ["forward operations (traced step, then this step; > the first difference):"]
    for i in range(first, operation + 1):
        mark = ">" if i == operation else " "
        head = f"  {mark} {i:>4}  "
        for label, records in zip(("traced", "this  "), by_index):
            rows.append(f"{head}{label}  {_fmt_record(records.get(i), label)}")
            head = " " * len(head)
    return "\n".join(rows)


def _fmt_record(r, label):
    if r is None:
        return ("(the traced forward pass has ended)" if label == "traced"
                else "(the backward pass started)")
    text = r.op
    if r.inputs is not None:
        text += f"({', '.join(map(_fmt_tensor, r.inputs))})"
    if r.outputs is not None:
        text += f" -> {', '.join(map(_fmt_tensor, r.outputs))}"
    if r.where is not None:
        text += f"  at {r.where[0]}:{r.where[1]} in {r.where[2]}"
    return text


def _fmt_tensor(sig):
    """``float32[8, 16]``, with ``@device`` where it is not the CPU."""
    shape, dtype, device = sig
    text = f"{dtype}[{', '.join(map(str, shape))}]"
    return text if device == "cpu" else f"{text}@{device}"


class HookUsageError(TorchExtError, RuntimeError):
    """The executor is used in a way it does not support (nesting, a second backward pass over
    one step, a backward pass outside its ``with`` block)."""


class RecomputationError(TorchExtError, RuntimeError):
    """A recomputed value differs from the value its operation made in the forward pass
    (``RecomputeContext(check=True)``): a recomputation read an input that changed since, or
    missed a write the forward pass made into the value's memory. `node` and `output` are kept
    as the attributes of the same name.

    Parameters
    ----------
    message : str
        The error message.
    node : int
        The graph node whose recomputation differs.
    output : int
        The index of the first differing output of that node.
    """

    node: int
    output: int

    def __init__(self, message: str, node: int, output: int) -> None:
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

    Parameters
    ----------
    message : str
        The error message.
    missing : list of str
        Where torch_ext looked for each missing API (dotted paths from ``torch``); kept as
        ``.missing``.
    """

    missing: list[str]

    def __init__(self, message: str, missing: list[str]) -> None:
        self.missing = missing
        super().__init__(message)


class BatchScalingError(TorchExtError, lowerset.exceptions.BatchScalingError):
    """The traced graphs do not scale with the batch size (different operations, wiring, or
    sizes that are not affine in the batch size)."""


class NoBatchFitsError(TorchExtError, lowerset.exceptions.NoBatchFitsError):
    """Not even the smallest batch fits the memory limit (``budget``, ``min_budget`` and
    ``batch_size`` as :class:`lowerset.NoBatchFitsError`)."""
