"""Measured peak memory of a training step: CuPy pool high-water mark on GPU, tracemalloc on CPU.

Numbers are measured, not estimated. On CPU, NumPy reports its buffers to :mod:`tracemalloc`
(domain ``np.lib.tracemalloc_domain``); tracemalloc's peak counts every traced allocation, so the
figure also includes the Python objects created during the call (graph nodes, Variables: a few
kilobytes per function, small next to the arrays). On GPU, a CuPy memory hook counts the blocks
CuPy's default pool hands out during the call and not yet given back
(:class:`chainer_ext._backend.OwnBytes`). Both count only what the call allocates: an array made
before it and freed during it (the previous step's gradients) does not lower the figure.

:func:`peak_memory` also reports the *boundary peak*, the highest memory in use at function
boundaries (``_boundary.py``), and the figures of the paper's Table 1
(:meth:`MemoryReport.table1_columns`).
"""

import contextlib
import dataclasses
import sys
import tracemalloc
import weakref
from collections.abc import Callable, Iterable
from typing import Any, TextIO

import chainer
import numpy as np

from . import _backend, _boundary
from ._backend import Device
from ._chainer_internals import grad_or_none

__all__ = ["peak_memory", "PeakMemoryHook", "MemoryReport"]


@dataclasses.dataclass
class MemoryReport:
    """Result of :func:`peak_memory` (all sizes in bytes).

    Attributes
    ----------
    device : str
        "cpu" or "gpu".
    peak : int
        Peak bytes allocated during the call above what was allocated when it started.
    param_bytes : int
        Bytes of the given parameters' arrays allocated before the call (not in `peak`).
    new_param_bytes : int
        Bytes of the given parameters' arrays created during the call (part of `peak`): the
        weights a lazily sized link (``L.Linear(None, n)``) makes in its first call.
    param_grad_bytes : int
        Bytes of the parameters' gradient arrays after the call (a gradient never set counts
        as none).
    new_grad_bytes : int
        Bytes of the gradient arrays created during the call (part of `peak`).
    peak_without_grads : int
        ``peak - new_grad_bytes``: the peak of everything else (activations, their gradients,
        work space); a lower bound when gradients are created after the peak.
    boundary_peak : int
        Highest bytes in use at a function boundary above what was in use when `fn`
        started: sampled in the pre- and post-process callbacks of forward and backward of
        every outermost function application, before and after the work of the hooks passed
        to :func:`peak_memory`. It leaves out the temporaries that live inside one function
        (im2col buffers), so ``boundary_peak <= peak``; 0 when no function ran.
    boundary_peak_without_grads : int
        Highest ``bytes in use - bytes of the given parameters' gradients computed so far`` at
        those samples (a parameter's gradient counts from the end of the backward of the first
        function that reads the parameter).
    boundary_samples : int
        Number of boundary samples taken.
    unwrapped_hooks : tuple of str
        Names of the global function hooks that ran during the call outside the two boundary
        samplers: registered before the call, or inside `fn` (seen at a sample). The boundary
        figures see their work from one side only; empty when every hook is passed as
        ``hooks=``.
    """

    device: Device
    peak: int
    param_bytes: int = 0
    new_param_bytes: int = 0
    param_grad_bytes: int = 0
    new_grad_bytes: int = 0
    boundary_peak: int = 0
    boundary_peak_without_grads: int = 0
    boundary_samples: int = 0
    unwrapped_hooks: tuple[str, ...] = ()

    @property
    def peak_without_grads(self) -> int:
        """The peak less the parameter gradients the step made (bytes)."""
        return self.peak - self.new_grad_bytes

    def summary(self) -> dict[str, Any]:
        """Return the report as a dict (with ``peak_without_grads``)."""
        d = dataclasses.asdict(self)
        d["peak_without_grads"] = self.peak_without_grads
        return d

    def table1_columns(self, input_bytes: int = 0) -> dict[str, int]:
        """The four peaks of the paper's Table 1 as the benchmark reports them, in bytes.

        Parameters
        ----------
        input_bytes : int
            Bytes of the step's inputs allocated before the call (the batch ``x`` and ``t``).

        Returns
        -------
        dict
            ``total_peak`` (Peak: ``peak + param_bytes + input_bytes``), ``nonparam_peak``
            (Non-param peak: ``peak - param_grad_bytes - new_param_bytes + input_bytes``, a
            lower bound of the non-parameter bytes at the peak when the parameters have no
            gradient when the call starts, as after ``model.cleargrads()``),
            ``total_boundary_peak`` (Boundary peak:
            ``boundary_peak + param_bytes + input_bytes``) and ``nonparam_boundary_peak``
            (Non-param boundary: ``boundary_peak_without_grads + input_bytes``).
        """
        return {"total_peak": self.peak + self.param_bytes + input_bytes,
                "nonparam_peak": (self.peak - self.param_grad_bytes - self.new_param_bytes
                                  + input_bytes),
                "total_boundary_peak": self.boundary_peak + self.param_bytes + input_bytes,
                "nonparam_boundary_peak": self.boundary_peak_without_grads + input_bytes}


class PeakMemoryHook(chainer.FunctionHook):
    """Measure the peak bytes allocated while the hook is registered.

    The hook overrides no function callbacks; it only measures between ``__enter__`` and
    ``__exit__`` (register it with ``with``). On CPU it traces with :mod:`tracemalloc` (which
    slows Python code down: do not time a step while measuring); on GPU it attaches a CuPy
    ``MemoryHook`` to CuPy's default pool.

    Parameters
    ----------
    device : {"cpu", "gpu"}
        Which allocator to watch.

    Raises
    ------
    RuntimeError
        If `device` is "gpu" and CuPy is not available, or tracemalloc is already tracing (the
        baseline would be wrong).
    ValueError
        If `device` is not "cpu" or "gpu".

    Examples
    --------
    >>> with PeakMemoryHook() as h:
    ...     a = np.ones(1000)
    >>> h.total_peak() >= 8000
    True
    >>> h.print_report()  # doctest: +SKIP
    peak: 8,112 bytes (cpu)
    """

    name = "PeakMemoryHook"

    def __init__(self, device: Device = "cpu") -> None:
        if device not in ("cpu", "gpu"):
            raise ValueError(f"device must be 'cpu' or 'gpu', got {device!r}")
        if device == "gpu":
            _backend.require_cupy("PeakMemoryHook(device='gpu')")
        self.device = device
        self._peak = self._base = 0
        self._cupy_hook: Any = None  # on GPU while measuring: _backend.pool_peak_hook()

    def __enter__(self) -> "PeakMemoryHook":
        self.start()
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        try:
            self.stop(*exc)
        finally:
            super().__exit__(*exc)

    def start(self) -> None:
        """Start measuring without registering the hook (``__enter__`` does both).

        Raises
        ------
        RuntimeError
            If tracemalloc is already tracing.
        """
        if self.device == "cpu":
            if tracemalloc.is_tracing():
                raise RuntimeError("tracemalloc is already tracing; stop it before measuring")
            tracemalloc.start()
            self._base = tracemalloc.get_traced_memory()[0]
        else:  # pragma: no cover - GPU
            self._cupy_hook = _backend.pool_peak_hook()
            self._cupy_hook.__enter__()

    def stop(self, *exc: Any) -> None:
        """Stop measuring.

        Parameters
        ----------
        *exc
            The exception triple of ``__exit__``, if any.
        """
        if self.device == "cpu":
            self._peak = max(0, tracemalloc.get_traced_memory()[1] - self._base)
            tracemalloc.stop()
        else:  # pragma: no cover - GPU
            self._cupy_hook.__exit__(*(exc or (None, None, None)))
            self._peak = self._cupy_hook.peak

    def current(self) -> int:
        """Bytes allocated since measuring started and still in use (0 before it starts)."""
        if self.device == "cpu":
            return tracemalloc.get_traced_memory()[0] - self._base if tracemalloc.is_tracing() \
                else 0
        return 0 if self._cupy_hook is None else self._cupy_hook.current  # pragma: no cover

    def total_peak(self) -> int:
        """Peak bytes above the baseline at ``__enter__`` (int)."""
        return int(self._peak)

    def summary(self) -> dict[str, Any]:
        """Return ``{"device": ..., "peak": ...}``."""
        return {"device": self.device, "peak": self.total_peak()}

    def print_report(self, file: TextIO = sys.stdout) -> None:
        """Write a one-line report.

        Parameters
        ----------
        file : text file, default sys.stdout
            Where to write it.
        """
        file.write(f"peak: {self.total_peak():,} bytes ({self.device})\n")


def _params_of(params):
    if params is None:
        return []
    if isinstance(params, chainer.Link):
        return list(params.params())
    return list(params)


class _Ref:
    """A reference to an array that does not keep it alive: a weak reference, or for a type
    without weak references its ``id`` (which a later array may reuse once this one is
    freed)."""

    def __init__(self, array):
        self._id = None if array is None else id(array)
        try:
            self._weak = None if array is None else weakref.ref(array)
        except TypeError:
            self._weak = None

    def refers_to(self, array):
        if self._weak is not None:
            return self._weak() is array
        return self._id == id(array)


def _hooks_of(hooks):
    """`hooks` (one chainer.FunctionHook or an iterable of them) as a list; TypeError else."""
    if isinstance(hooks, chainer.FunctionHook):
        return [hooks]
    try:
        hooks = list(hooks)
    except TypeError:
        hooks = [hooks]
    for h in hooks:
        if not isinstance(h, chainer.FunctionHook):
            raise TypeError(f"hooks must be chainer.FunctionHook objects, got {type(h).__name__}")
    return hooks


@contextlib.contextmanager
def _measuring(meter):
    """Measure with `meter` (a PeakMemoryHook) without registering it as a function hook."""
    meter.start()
    try:
        yield meter
    except BaseException as e:
        meter.stop(type(e), e, e.__traceback__)
        raise
    else:
        meter.stop()


def peak_memory(fn: Callable[[], object], *,
                params: chainer.Link | Iterable[chainer.Parameter] | None = None,
                device: Device | None = None,
                hooks: chainer.FunctionHook | Iterable[chainer.FunctionHook] = ()
                ) -> MemoryReport:
    """Run `fn()` and return the peak bytes allocated meanwhile, with parameters reported apart
    and the boundary peak (the figures of the paper's Table 1).

    Both peaks count from what is allocated when `fn` starts, so arrays made before it
    (parameters, the input batch) are not in them; :meth:`MemoryReport.table1_columns` adds
    them back. The weights a lazily sized link creates inside `fn` (its first call) are the
    step's: in the peaks and in ``new_param_bytes``, not in ``param_bytes``. A parameter whose
    gradient was never set (a fresh model without ``cleargrads()``, a link not sized yet) has
    none. Measuring starts after `hooks` are registered (what their ``__enter__``
    allocates is not counted). The boundary peak is sampled by two function hooks registered
    around `hooks`: pass a ``RecomputeHook`` (or any hook that frees or allocates in its
    callbacks) here rather than entering it inside `fn` or before the call, so every boundary
    is sampled both before and after its work. A hook registered elsewhere still runs, and its
    name is in ``MemoryReport.unwrapped_hooks``.

    Parameters
    ----------
    fn : callable
        Takes no argument; for instance one training step.
    params : chainer.Link or iterable of chainer.Parameter, optional
        Parameters whose bytes (and gradient bytes) are reported apart.
    device : {"cpu", "gpu"}, optional
        Default: "gpu" if a parameter lives on a GPU, else "cpu".
    hooks : chainer.FunctionHook or sequence of them, optional
        Registered (in order) for the call of `fn`, between the boundary samplers, and exited
        after it in reverse order.

    Returns
    -------
    MemoryReport

    Raises
    ------
    RuntimeError
        As :class:`PeakMemoryHook`.
    ValueError
        If `device` is invalid.
    TypeError
        If `hooks` holds something that is not a ``chainer.FunctionHook``.
    KeyError
        If a hook in `hooks` has the name of a hook already registered (Chainer's rule).

    Examples
    --------
    >>> peak_memory(lambda: np.zeros(1 << 20)).peak >= 8 << 20
    True
    >>> w = chainer.Parameter(np.ones(1 << 18, np.float32))           # 1 MiB
    >>> r = peak_memory(lambda: chainer.functions.sum(w * 2.0).backward(), params=[w])
    >>> (1 << 20) <= r.boundary_peak <= r.peak                        # w's gradient
    True
    """
    ps = _params_of(params)
    hooks = _hooks_of(hooks)
    if device is None:
        device = "gpu" if any(_backend.is_cupy_array(p.array) for p in ps) else "cpu"
    before = {id(p): _Ref(grad_or_none(p)) for p in ps}
    made_before = {id(p) for p in ps if p.array is not None}
    earlier = tuple(chainer.get_function_hooks())
    meter = PeakMemoryHook(device)
    recorder = _boundary.BoundaryRecorder(device, ps,
                                          read=meter.current if device == "gpu" else None)
    with _boundary.sampling(recorder, hooks) as last_sampler, _measuring(meter):
        recorder.start()
        fn()
        if device == "gpu":  # pragma: no cover - GPU
            _backend.synchronize()
    grads = [(p, grad_or_none(p)) for p in ps]
    grads = [(p, g) for p, g in grads if g is not None]
    new = sum(int(g.nbytes) for p, g in grads if not before[id(p)].refers_to(g))
    arrays = [(p, p.array) for p in ps if p.array is not None]
    return MemoryReport(device=device, peak=meter.total_peak(),
                        param_bytes=sum(int(a.nbytes) for p, a in arrays if id(p) in made_before),
                        new_param_bytes=sum(int(a.nbytes) for p, a in arrays
                                            if id(p) not in made_before),
                        param_grad_bytes=sum(int(g.nbytes) for _, g in grads),
                        new_grad_bytes=int(new), boundary_peak=int(recorder.peak),
                        boundary_peak_without_grads=int(recorder.peak_without_grads),
                        boundary_samples=recorder.samples,
                        unwrapped_hooks=earlier + tuple(last_sampler.later_hooks))


_ = np  # numpy is used in doctests
