"""What a Variable holds after RecomputeHook frees its array in the forward pass.

The hook takes the array of a Variable the model's code still holds when the schedule drops or
frees the value (after its last use in forward), so that the memory is released as the schedule
predicts. Code that reads the Variable's shape afterwards (``outsize=h.shape[2:]``) must keep
working, and code that reads its values must not get numbers silently. So the Variable gets a
stand-in of the same shape and dtype that owns one element: on NumPy a :class:`FreedArray`, which
raises :class:`~chainer_ext.HookUsageError` on the usual ways of reading values and is NaN where
a path reads them anyway; on CuPy a NaN array broadcast to the shape. Arrays of other dtypes
than floating point and complex get None, as they have no NaN to show a silent read.
"""

from typing import Any

import numpy as np

from . import _backend
from .exceptions import HookUsageError

__all__ = ["FreedArray", "stand_in"]

_MESSAGE = ("this Variable's array {shape} {dtype} was freed by RecomputeHook after its last use "
            "in the forward pass (the plan frees or drops it there); its shape and dtype stay "
            "readable. To read its values, read them before that last use, or with a function "
            "applied under chainer.no_backprop_mode(), which trace sees and then keeps the value")


class FreedArray(np.ndarray):
    """A NumPy stand-in for a freed array: shape, dtype, ndim and size are the freed array's;
    reading values raises :class:`~chainer_ext.HookUsageError` (its one element is NaN)."""

    def _refuse(self, *args, **kwargs):
        raise HookUsageError(_MESSAGE.format(shape=self.shape, dtype=self.dtype))

    __array_ufunc__ = __array_function__ = _refuse
    __getitem__ = __setitem__ = __iter__ = __float__ = __int__ = __complex__ = __bool__ = _refuse
    copy = astype = dot = tolist = item = tobytes = fill = _refuse

    def __deepcopy__(self, memo: Any) -> "FreedArray":
        return self   # read-only: a copy of the model may share it

    def __repr__(self) -> str:
        return f"FreedArray(shape={self.shape}, dtype={self.dtype}: freed by RecomputeHook)"

    __str__ = __repr__


def stand_in(array: _backend.Array) -> _backend.Array | None:
    """Return the stand-in of `array` (see the module docstring), or None for other dtypes."""
    if not np.issubdtype(array.dtype, np.inexact):
        return None
    if _backend.is_cupy_array(array):  # pragma: no cover - GPU
        xp = _backend.cupy
        return xp.broadcast_to(xp.full((), np.nan, array.dtype), array.shape)
    one = np.full((), np.nan, array.dtype)
    return np.lib.stride_tricks.as_strided(one, array.shape, (0,) * array.ndim,
                                           writeable=False).view(FreedArray)
