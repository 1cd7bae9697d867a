"""Measured peak memory of a training step: CuPy pool high-water mark on GPU, tracemalloc on CPU.

Numbers are measured, not estimated. On CPU, NumPy reports its buffers to :mod:`tracemalloc`
(domain ``np.lib.tracemalloc_domain``); tracemalloc's peak counts every traced allocation, so the
figure also includes the Python objects created during the call (graph nodes, Variables: a few
kilobytes per function, small next to the arrays). On GPU, the peak is the largest
``MemoryPool.used_bytes()`` seen after any allocation of CuPy's default pool.
"""

import dataclasses
import sys
import tracemalloc
import weakref

import chainer
import numpy as np

from . import _backend

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
        Bytes of the given parameters' arrays (allocated before the call, not in `peak`).
    param_grad_bytes : int
        Bytes of the parameters' gradient arrays after the call.
    new_grad_bytes : int
        Bytes of the gradient arrays created during the call (part of `peak`).
    peak_without_grads : int
        ``peak - new_grad_bytes``: the peak of everything else (activations, their gradients,
        work space); a lower bound when gradients are created after the peak.
    """

    device: str
    peak: int
    param_bytes: int = 0
    param_grad_bytes: int = 0
    new_grad_bytes: int = 0

    @property
    def peak_without_grads(self):
        return self.peak - self.new_grad_bytes

    def summary(self):
        """Return the report as a dict (with ``peak_without_grads``)."""
        d = dataclasses.asdict(self)
        d["peak_without_grads"] = self.peak_without_grads
        return d


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

    def __init__(self, device="cpu"):
        if device not in ("cpu", "gpu"):
            raise ValueError(f"device must be 'cpu' or 'gpu', got {device!r}")
        if device == "gpu":
            _backend.require_cupy("PeakMemoryHook(device='gpu')")
        self.device = device
        self._peak = 0
        self._cupy_hook = None

    def __enter__(self):
        if self.device == "cpu":
            if tracemalloc.is_tracing():
                raise RuntimeError("tracemalloc is already tracing; stop it before measuring")
            tracemalloc.start()
            self._base = tracemalloc.get_traced_memory()[0]
        else:  # pragma: no cover - GPU
            self._cupy_hook = _CupyPeakHook()
            self._cupy_hook.__enter__()
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            if self.device == "cpu":
                self._peak = max(0, tracemalloc.get_traced_memory()[1] - self._base)
                tracemalloc.stop()
            else:  # pragma: no cover - GPU
                self._cupy_hook.__exit__(*exc)
                self._peak = self._cupy_hook.peak - self._cupy_hook.base
        finally:
            super().__exit__(*exc)

    def total_peak(self):
        """Peak bytes above the baseline at ``__enter__`` (int)."""
        return int(self._peak)

    def summary(self):
        """Return ``{"device": ..., "peak": ...}``."""
        return {"device": self.device, "peak": self.total_peak()}

    def print_report(self, file=sys.stdout):
        """Write a one-line report to `file`."""
        file.write(f"peak: {self.total_peak():,} bytes ({self.device})\n")


if _backend.cupy is not None:  # pragma: no cover - GPU
    class _CupyPeakHook(_backend.cupy.cuda.MemoryHook):
        name = "chainer_ext_peak"

        def __init__(self):
            self.pool = _backend.cupy.get_default_memory_pool()
            self.base = self.pool.used_bytes()
            self.peak = self.base

        def malloc_postprocess(self, **kwargs):
            self.peak = max(self.peak, self.pool.used_bytes())


def _params_of(params):
    if params is None:
        return []
    if isinstance(params, chainer.Link):
        return list(params.params())
    return list(params)


def _grad_ref(grad):
    """What tells afterwards whether a parameter still holds the array `grad`: a weak reference
    (the id of a freed array is often the id of the next one made, so ids alone would count a
    new gradient as the old one), or the id for an array type without weak references."""
    if grad is None:
        return None
    try:
        return weakref.ref(grad)
    except TypeError:  # pragma: no cover - an array type without weak references
        return id(grad)


def _same_grad(ref, grad):
    if ref is None:
        return False
    if isinstance(ref, int):  # pragma: no cover - see _grad_ref
        return ref == id(grad)
    return ref() is grad


def peak_memory(fn, *, params=None, device=None):
    """Run `fn()` and return the peak bytes allocated meanwhile, with parameters reported apart.

    Parameters
    ----------
    fn : callable
        Takes no argument; for instance one training step.
    params : chainer.Link or iterable of chainer.Parameter, optional
        Parameters whose bytes (and gradient bytes) are reported apart.
    device : {"cpu", "gpu"}, optional
        Default: "gpu" if a parameter lives on a GPU, else "cpu".

    Returns
    -------
    MemoryReport

    Raises
    ------
    RuntimeError
        As :class:`PeakMemoryHook`.
    ValueError
        If `device` is invalid.

    Examples
    --------
    >>> peak_memory(lambda: np.zeros(1 << 20)).peak >= 8 << 20
    True
    """
    ps = _params_of(params)
    if device is None:
        device = "gpu" if any(_backend.is_cupy_array(p.array) for p in ps) else "cpu"
    before = {id(p): _grad_ref(p.grad) for p in ps}
    hook = PeakMemoryHook(device)
    with hook:
        fn()
        if device == "gpu":  # pragma: no cover - GPU
            _backend.synchronize()
    grads = [p.grad for p in ps if p.grad is not None]
    new = sum(int(p.grad.nbytes) for p in ps
              if p.grad is not None and not _same_grad(before[id(p)], p.grad))
    return MemoryReport(device=device, peak=hook.total_peak(),
                        param_bytes=sum(int(p.array.nbytes) for p in ps if p.array is not None),
                        param_grad_bytes=sum(int(g.nbytes) for g in grads),
                        new_grad_bytes=int(new))


_ = np  # numpy is used in doctests
