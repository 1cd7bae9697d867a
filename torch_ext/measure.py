"""Measure the bytes a region of PyTorch code allocates, with PyTorch's own accounting.

On the CPU, :class:`MemoryMeter` reads the ``[memory]`` events of ``torch.profiler.profile(
profile_memory=True)``: every allocation and free of PyTorch's CPU allocator with its signed
size, in order; their running sum is the bytes in use. On CUDA it reads the caching
allocator's counters (``torch.cuda.memory_allocated`` / ``max_memory_allocated``). Both count
tensor memory only: scratch that a library allocates outside PyTorch's allocator (oneDNN or MKL
on the CPU, cuDNN workspace through its own calls) is not seen.

cuBLAS and cuBLASLt keep a workspace per thread, handle and stream for the life of the process,
taken from the caching allocator on their first call there (the backward pass runs on autograd's
own thread). A meter on CUDA makes them exist before it reads its base level
(:func:`warm_cuda_libraries`), so that no region, and no traced operation, counts them as its
own: every later step finds them allocated.

Named windows (:meth:`MemoryMeter.window`) give the highest point of a stretch of the region
(one operation, one backward node) above the level where it started: the trace's workspace
figures (``NodeFacts.forward_peak``, ``backward_peak``).
"""

import bisect
import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, cast

import torch

from ._compat import (
    event_device_type,
    event_end_ns,
    event_name,
    event_nbytes,
    event_start_ns,
    profile_events,
    profiler_enabled,
)
from .exceptions import MeasurementError

__all__ = ["MemoryMeter", "MemoryMeasure", "measure_peak", "warm_cuda_libraries"]

_MARK = "lowerset::"

#: (device index, stream, calling thread) triples whose cuBLAS and cuBLASLt workspaces exist.
_WARMED: set[tuple[int, int, int]] = set()


def _call_libraries(device):
    a = torch.ones(8, 8, device=device)
    torch.nn.functional.linear(a, a, torch.ones(8, device=device))   # cuBLASLt
    torch.mm(a, a)                                                    # cuBLAS


class _InBackward(torch.autograd.Function):
    """Identity whose backward calls cuBLAS and cuBLASLt on autograd's device thread."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        with torch.no_grad():
            _call_libraries(grad.device)
        return grad


def warm_cuda_libraries(device: torch.device | str) -> None:
    """Make cuBLAS's and cuBLASLt's workspaces for `device`'s current stream exist, on the
    calling thread and on autograd's thread for the device.

    Both libraries keep a handle per thread and a workspace per handle and stream, allocated
    from the caching allocator on first use and kept (32 MiB for cuBLAS on an H100). The
    forward pass runs on the caller's thread, the backward pass on autograd's device thread,
    so each needs its own. A few 8x8 products (with a bias: PyTorch's cuBLASLt path) in both
    places take them; later calls for the same device, stream and calling thread do nothing.

    Parameters
    ----------
    device : torch.device or str
        A CUDA device (others: nothing happens).
    """
    device = torch.device(device)
    if device.type != "cuda":
        return
    index = torch.cuda.current_device() if device.index is None else device.index
    key = (index, torch.cuda.current_stream(index).cuda_stream, threading.get_ident())
    if key in _WARMED:
        return
    _call_in_both_threads(device)
    torch.cuda.synchronize(device)
    _WARMED.add(key)


def _call_in_both_threads(device):
    """The library calls of :func:`warm_cuda_libraries` on the calling thread and in a
    backward pass (any device; also inside ``torch.inference_mode``)."""
    with torch.no_grad():
        _call_libraries(device)
    with torch.inference_mode(False), torch.enable_grad():
        x = torch.ones(1, device=device, requires_grad=True)
        _InBackward.apply(x).sum().backward()


@dataclass
class MemoryMeasure:
    """What a :class:`MemoryMeter` measured (bytes, relative to the level at its start).

    Attributes
    ----------
    peak : int
        Highest bytes in use above the start level (0 or more).
    end : int
        Bytes in use at the end above the start level (negative when the region freed more
        than it allocated).
    windows : dict
        Window name -> highest bytes in use during the window above the level at its start.
    device : str
    window_starts : dict
        Window name -> bytes in use when the window first opened, above the start level.
    """

    peak: int
    end: int
    device: str
    windows: dict[str, int] = field(default_factory=dict)
    window_starts: dict[str, int] = field(default_factory=dict)


class MemoryMeter:
    """Context manager measuring allocations on `device` inside it (see the module docstring).

    Parameters
    ----------
    device : torch.device or str
        "cpu" or a CUDA device.

    Attributes
    ----------
    result : MemoryMeasure
        Set on exit.

    Raises
    ------
    MeasurementError
        On entry, if a torch profiler is already running (CPU), or CUDA is not available for a
        CUDA device.

    Examples
    --------
    >>> with MemoryMeter("cpu") as m:
    ...     x = torch.empty(1000, dtype=torch.float32)
    ...     with m.window("y"):
    ...         y = torch.empty(250, dtype=torch.float32)
    >>> m.result.peak, m.result.windows["y"]
    (5000, 1000)
    """

    device: torch.device
    result: MemoryMeasure | None
    _prof: torch.profiler.profile | None
    _cuda_marks: list[tuple[str, int, int]]

    def __init__(self, device: torch.device | str) -> None:
        self.device = torch.device(device)
        self.result = None
        self._prof = None
        self._cuda_marks = []

    def __enter__(self) -> "MemoryMeter":
        if self.device.type == "cuda":
            if not torch.cuda.is_available():
                raise MeasurementError("MemoryMeter: CUDA is not available")
            warm_cuda_libraries(self.device)
            torch.cuda.synchronize(self.device)
            self._base = torch.cuda.memory_allocated(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._cuda_peak = self._base
            return self
        if profiler_enabled():
            raise MeasurementError("MemoryMeter: a torch profiler is already running")
        self._prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                            profile_memory=True, record_shapes=False)
        self._prof.__enter__()
        return self

    def __exit__(self, *exc: Any) -> Literal[False]:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            peak = max(self._cuda_peak, torch.cuda.max_memory_allocated(self.device))
            windows: dict[str, int] = {}
            starts: dict[str, int] = {}
            for name, start, high in self._cuda_marks:
                windows[name] = max(windows.get(name, 0), high - start)
                starts.setdefault(name, start - self._base)
            self.result = MemoryMeasure(
                peak=max(0, peak - self._base),
                end=torch.cuda.memory_allocated(self.device) - self._base,
                device=str(self.device), windows=windows, window_starts=starts)
            return False
        self._prof.__exit__(*exc)  # type: ignore[union-attr]  # __enter__ made it (CPU)
        if exc[0] is None:
            self.result = _fold_profile(self._prof, str(self.device))
        return False

    @contextlib.contextmanager
    def window(self, name: str) -> Iterator[None]:
        """Measure the highest point of the code inside, above the level at its start.

        Parameters
        ----------
        name : str
            The window's name in the result's ``windows``.
        """
        if self.device.type == "cuda":
            start = torch.cuda.memory_allocated(self.device)
            self._cuda_peak = max(self._cuda_peak, torch.cuda.max_memory_allocated(self.device))
            torch.cuda.reset_peak_memory_stats(self.device)
            try:
                yield
            finally:
                high = torch.cuda.max_memory_allocated(self.device)
                self._cuda_peak = max(self._cuda_peak, high)
                self._cuda_marks.append((name, start, high))
            return
        with torch.profiler.record_function(_MARK + name):
            yield

    def open_window(self, name: str) -> contextlib.AbstractContextManager[None]:
        """Start a window that :meth:`close_window` ends (for code split across callbacks).

        Parameters
        ----------
        name : str
            As :meth:`window`.
        """
        cm = self.window(name)
        cm.__enter__()
        return cm

    @staticmethod
    def close_window(cm: contextlib.AbstractContextManager[None]) -> None:
        """End a window :meth:`open_window` started.

        Parameters
        ----------
        cm : context manager
            What :meth:`open_window` returned.
        """
        cm.__exit__(None, None, None)


def _fold_profile(prof, device):
    """The running sum of the profile's CPU memory events: its peak, its end, the windows."""
    mem, marks = [], []
    for i, e in enumerate(profile_events(prof)):
        name = event_name(e)
        if name == "[memory]":
            if event_device_type(e) == torch.autograd.DeviceType.CPU:
                mem.append((event_start_ns(e), i, event_nbytes(e)))
        elif name.startswith(_MARK):
            marks.append((name[len(_MARK):], event_start_ns(e), event_end_ns(e)))
    mem.sort()
    times = [t for t, _, _ in mem]
    level, levels = 0, []
    for _, _, b in mem:
        level += b
        levels.append(level)
    peak = max([0] + levels)
    windows: dict[str, int] = {}
    starts: dict[str, int] = {}
    for name, start, end in sorted(marks, key=lambda m: m[1]):
        lo = bisect.bisect_left(times, start)
        hi = bisect.bisect_right(times, end)
        base = levels[lo - 1] if lo > 0 else 0
        high = max([base] + levels[lo:hi]) - base
        windows[name] = max(windows.get(name, 0), high)
        starts.setdefault(name, base)
    return MemoryMeasure(peak=peak, end=level, device=device, windows=windows,
                         window_starts=starts)


_T = TypeVar("_T")


def measure_peak(fn: Callable[[], _T], device: torch.device | str = "cpu"
                 ) -> tuple[_T, MemoryMeasure]:
    """Run `fn()` under a :class:`MemoryMeter` and return ``(fn's result, MemoryMeasure)``.

    Parameters
    ----------
    fn : callable
        Called with no argument.
    device : torch.device or str, default "cpu"
        The device measured.
    """
    with MemoryMeter(device) as meter:
        out = fn()
    return out, cast(MemoryMeasure, meter.result)   # set: the block ended normally
