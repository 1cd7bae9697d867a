"""Bytes in use on the device, and the highest level since a mark: what :func:`chainer_ext.trace`
measures around each forward and backward call (their transient workspace).

On CPU the probe reads :mod:`tracemalloc` (NumPy reports its buffers to it; Python objects made
meanwhile are counted too); on GPU it counts the blocks CuPy's default memory pool hands out
(:func:`chainer_ext._backend.pool_peak_hook`). Both count only what is allocated while the probe
is entered.
"""

import tracemalloc
from typing import Any

from . import _backend
from ._backend import Device

__all__ = ["MemoryProbe"]


class MemoryProbe:
    """Measure bytes in use and the peak since :meth:`mark` on one device.

    Parameters
    ----------
    device : {"cpu", "gpu"}

    Raises
    ------
    RuntimeError
        For "cpu" if tracemalloc is already tracing (the caller's own measurement would be
        disturbed); for "gpu" if CuPy is not available.
    """

    def __init__(self, device: Device) -> None:
        self.device = device
        if device == "cpu":
            if tracemalloc.is_tracing():
                raise RuntimeError("tracemalloc is already tracing: stop it before trace(), or "
                                   "call trace(..., measure_memory=False)")
        else:
            _backend.require_cupy("measuring GPU memory")
        self._hook: Any = None  # on GPU while entered: _backend.pool_peak_hook()

    def __enter__(self) -> "MemoryProbe":
        if self.device == "cpu":
            tracemalloc.start()
        else:  # pragma: no cover - GPU
            self._hook = _backend.pool_peak_hook()
            self._hook.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.device == "cpu":
            tracemalloc.stop()
        else:  # pragma: no cover - GPU
            self._hook.__exit__(*exc)

    def level(self) -> int:
        """Bytes in use now."""
        if self.device == "cpu":
            return tracemalloc.get_traced_memory()[0]
        return self._hook.current  # pragma: no cover - GPU

    def mark(self) -> int:
        """Forget the peak so far; return the level now."""
        if self.device == "cpu":
            tracemalloc.reset_peak()
        else:  # pragma: no cover - GPU
            self._hook.reset_peak()
        return self.level()

    def peak(self) -> int:
        """Highest bytes in use since the last :meth:`mark`."""
        if self.device == "cpu":
            return tracemalloc.get_traced_memory()[1]
        return self._hook.peak  # pragma: no cover - GPU
