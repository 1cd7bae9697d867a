"""Optional CuPy support: a guarded import and small helpers that work for NumPy and CuPy."""

from collections.abc import Iterable, Sequence
from typing import Any, Literal, TypeAlias

import numpy as np

try:  # CuPy is optional; CPU-only machines import this module without it.
    import cupy  # noqa: F401
    _cupy_import_error = None
except Exception as e:  # pragma: no cover - depends on the machine
    cupy = None
    _cupy_import_error = e

__all__ = ["cupy", "cupy_available", "require_cupy", "is_cupy_array", "array_types",
           "synchronize", "root_buffer", "device_of", "OwnBytes", "pool_peak_hook", "Array",
           "Device"]

#: An array the executor handles: numpy.ndarray or cupy.ndarray (CuPy is optional and ships no
#: type information, so the alias is Any; the docstrings give shapes and dtypes).
Array: TypeAlias = Any

#: Where a step runs: "cpu" (NumPy) or "gpu" (CuPy).
Device: TypeAlias = Literal["cpu", "gpu"]


def cupy_available() -> bool:
    """Return True if CuPy imports and a CUDA device is visible."""
    if cupy is None:
        return False
    try:  # pragma: no cover - needs a GPU
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # pragma: no cover
        return False


def require_cupy(what: str) -> None:
    """Raise RuntimeError naming `what` if CuPy is not usable.

    Raises
    ------
    RuntimeError
        If CuPy cannot be imported (the import error is chained).
    """
    if cupy is None:
        raise RuntimeError(f"{what} needs CuPy, which could not be imported") \
            from _cupy_import_error


def array_types() -> tuple[type, ...]:
    """Tuple of the array types the executor handles (numpy.ndarray, and cupy.ndarray if any)."""
    if cupy is None:
        return (np.ndarray,)
    return (np.ndarray, cupy.ndarray)  # pragma: no cover


def is_cupy_array(a: object) -> bool:
    """Return True if `a` is a cupy.ndarray."""
    return cupy is not None and isinstance(a, cupy.ndarray)


def synchronize(arrays: Sequence[Array] = ()) -> None:
    """Wait for the current CUDA stream if any of `arrays` (or none given) lives on a GPU."""
    if cupy is None:
        return
    if not arrays or any(is_cupy_array(a) for a in arrays):  # pragma: no cover - GPU
        cupy.cuda.get_current_stream().synchronize()


def root_buffer(a: Array) -> Array:
    """The object that owns the memory of array `a` (itself unless it is a view).

    Two arrays share memory when their root buffers are the same object: the last array of
    the ``base`` chain (NumPy's or CuPy's, whose views set ``base`` alike). The root is an
    array, so it has ``nbytes`` and takes weak references (CuPy's memory objects take none).
    """
    kind = cupy.ndarray if is_cupy_array(a) else np.ndarray
    while isinstance(getattr(a, "base", None), kind):
        a = a.base
    return a


def device_of(arrays: Iterable[Array]) -> Device:
    """"gpu" if any of `arrays` lives on a GPU, else "cpu"."""
    return "gpu" if any(is_cupy_array(a) for a in arrays) else "cpu"


class OwnBytes:
    """Bytes of the blocks allocated since counting started and not freed yet, and their peak:
    what :mod:`tracemalloc` counts on the CPU, for CuPy's memory pool (:func:`pool_peak_hook`).

    A block that existed before counting started is not counted when it is freed, so a step
    that drops arrays made earlier (the gradients of the previous step) is measured from its
    own allocations, as on the CPU. Sizes are the pool's rounded block sizes (``mem_size``),
    as ``MemoryPool.used_bytes`` counts them.

    Attributes
    ----------
    current : int
        Bytes (of blocks allocated since counting started) in use now.
    peak : int
        Highest `current` since counting started or :meth:`reset_peak`.
    """

    def __init__(self) -> None:
        self._live: dict[int, int] = {}
        self.current = self.peak = 0

    def allocated(self, ptr: int, size: int) -> None:
        """Count block `ptr` of `size` bytes."""
        self._live[ptr] = size
        self.current += size
        if self.current > self.peak:
            self.peak = self.current

    def freed(self, ptr: int) -> None:
        """Uncount block `ptr` (nothing if it was allocated before counting started)."""
        self.current -= self._live.pop(ptr, 0)

    def reset_peak(self) -> None:
        """Forget the peak so far (it becomes `current`)."""
        self.peak = self.current


def pool_peak_hook() -> Any:  # pragma: no cover - GPU
    """A CuPy memory hook on the default pool that counts, as an :class:`OwnBytes`, the blocks
    the pool hands out while the hook is registered (``with hook:``): ``hook.current``,
    ``hook.peak`` and ``hook.reset_peak()``. Typed Any: a ``cupy.cuda.MemoryHook`` (no type
    information) that is an :class:`OwnBytes`."""
    require_cupy("pool_peak_hook")

    class _PoolPeakHook(cupy.cuda.MemoryHook, OwnBytes):
        name = "chainer_ext_pool_peak"

        def __init__(self):
            OwnBytes.__init__(self)

        def malloc_postprocess(self, **kwargs):
            self.allocated(kwargs["mem_ptr"], kwargs["mem_size"])

        def free_postprocess(self, **kwargs):
            self.freed(kwargs["mem_ptr"])

    return _PoolPeakHook()
