"""Measured peak memory of a PyTorch training step, with the parameters reported apart.

:func:`peak_memory` runs a callable under :class:`torch_ext.measure.MemoryMeter`: on the CPU
the running sum of the profiler's memory events (every allocation and free of PyTorch's CPU
allocator), on CUDA the caching allocator's ``max_memory_allocated``. Both count tensor memory
only, above what is allocated when the call starts.

There is no boundary peak (``chainer_ext.peak_memory`` samples one at function boundaries for
the paper's Table 1): the allocator's own accounting already sees each allocation and free in
order, and the trace measures each operation's workspace itself (``NodeFacts.forward_peak``).
"""

import dataclasses
import gc
import weakref
from collections.abc import Callable, Iterable
from typing import Any, cast

import torch

from lowerset.exceptions import ArgumentTypeError

from ._guards import step_device
from .measure import MemoryMeasure, MemoryMeter

__all__ = ["peak_memory", "MemoryReport"]


@dataclasses.dataclass
class MemoryReport:
    """Result of :func:`peak_memory` (all sizes in bytes).

    Attributes
    ----------
    device : str
        "cpu" or a CUDA device ("cuda:0").
    peak : int
        Highest bytes allocated during the call above what was allocated when it started.
    end : int
        Bytes allocated at the end above the start (negative when the call freed more than it
        allocated).
    param_bytes : int
        Bytes of the given parameters (allocated before the call, not in `peak`; a parameter
        given twice counts once).
    param_grad_bytes : int
        Bytes of the parameters' gradients after the call.
    new_grad_bytes : int
        Bytes of the gradients made during the call (a parameter whose gradient tensor is not
        the one it had at the start; part of `peak`). A gradient accumulated in place into the
        tensor it had is not new.
    peak_without_grads : int
        ``peak - new_grad_bytes``: the peak of everything else (activations, their gradients,
        workspace); a lower bound when gradients are made after the peak.
    """

    device: str
    peak: int
    end: int
    param_bytes: int = 0
    param_grad_bytes: int = 0
    new_grad_bytes: int = 0

    @property
    def peak_without_grads(self) -> int:
        """The peak less the parameter gradients the step made (bytes)."""
        return self.peak - self.new_grad_bytes

    def summary(self) -> dict[str, Any]:
        """Return the report as a dict (with ``peak_without_grads``)."""
        d = dataclasses.asdict(self)
        d["peak_without_grads"] = self.peak_without_grads
        return d


def peak_memory(fn: Callable[[], object], *,
                params: torch.nn.Module | Iterable[torch.Tensor] | None = None,
                device: torch.device | str | None = None) -> MemoryReport:
    """Run `fn()` and return the peak bytes allocated meanwhile, with the parameters reported
    apart.

    Parameters
    ----------
    fn : callable
        Takes no argument; for instance one training step (``loss_fn().backward()``, under a
        :class:`RecomputeContext` or not).
    params : torch.nn.Module or iterable of tensors, optional
        Parameters whose bytes (and gradients' bytes) are reported apart.
    device : torch.device or str, optional
        Where to measure. Default: the device of the first parameter, else of the first module
        or tensor `fn` refers to (its closure, defaults, globals), else the CPU.

    Returns
    -------
    MemoryReport

    Raises
    ------
    MeasurementError
        As :class:`torch_ext.measure.MemoryMeter`: a torch profiler is already running (CPU),
        or CUDA is not available for a CUDA device.
    lowerset.ArgumentTypeError
        If `params` is neither a Module nor an iterable of tensors.

    Notes
    -----
    Python's garbage is collected (``gc.collect()``) before `fn` runs, so that no object an
    earlier step left in a reference cycle (FSDP2's states hold buffers so) is freed inside
    the measured call. Both figures are relative to the bytes allocated when `fn` starts:
    gradients that `fn` sets to None (``optimizer.zero_grad()``) lower that level when they
    are freed, so clear them before the call to measure the step alone. Gradients that exist
    when `fn` starts
    (gradient accumulation: ``zero_grad(set_to_none=False)``, micro-batches) are part of that
    level and not of `peak`; a graph traced with ``accumulate_grads=True`` counts them in its
    resident bytes, so ``plan.schedule.peak - graph.facts.resident`` is what `peak` measures
    (the gradients added into them in place free their own bytes, and are not in
    `new_grad_bytes`). The measure is of tensors: memory a
    library allocates outside PyTorch's allocator (oneDNN or MKL scratch on the CPU, cuDNN's
    own workspace calls) is not seen. On the CPU the profiler slows the call down: do not time
    a step while measuring it.

    Examples
    --------
    >>> peak_memory(lambda: torch.zeros(1 << 20)).peak   # 4 MiB of float32, freed at the end
    4194304
    >>> w = torch.ones(1 << 18, requires_grad=True)                     # 1 MiB
    >>> r = peak_memory(lambda: (w * 2.0).sum().backward(), params=[w])
    >>> r.param_bytes, r.new_grad_bytes, r.end                          # w's new gradient
    (1048576, 1048576, 1048576)
    """
    ps = _params_of(params)
    if device is None:
        device = ps[0].device if ps else step_device(fn)
    before = {id(p): _ref(p.grad) for p in ps}
    gc.collect()   # no garbage of earlier steps freed inside the call: FSDP2's cycles hold buffers
    with MemoryMeter(device) as meter:
        fn()
    measured = cast(MemoryMeasure, meter.result)   # set: the block ended normally
    grads = [p.grad for p in ps if p.grad is not None]
    new = sum(_nbytes(p.grad) for p in ps
              if p.grad is not None and before[id(p)]() is not p.grad)
    return MemoryReport(device=str(measured.device), peak=int(measured.peak),
                        end=int(measured.end), param_bytes=sum(_nbytes(p) for p in ps),
                        param_grad_bytes=sum(_nbytes(g) for g in grads), new_grad_bytes=int(new))


def _params_of(params):
    """The distinct tensors of `params` (a Module's parameters, or an iterable's)."""
    if params is None:
        return []
    if isinstance(params, torch.nn.Module):
        params = params.parameters()
    elif isinstance(params, torch.Tensor):
        params = [params]
    try:
        items = list(params)
    except TypeError:
        raise ArgumentTypeError(f"params must be a Module or an iterable of tensors, got "
                                f"{type(params).__name__}") from None
    if not all(isinstance(p, torch.Tensor) for p in items):
        raise ArgumentTypeError("params must hold tensors only")
    return list({id(p): p for p in items}.values())


def _ref(t):
    """A weak reference to `t` (one that returns None for None)."""
    return (lambda: None) if t is None else weakref.ref(t)


def _nbytes(t):
    return t.numel() * t.element_size()
