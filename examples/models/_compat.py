"""Compatibility fix for Chainer 7.8.1 with NumPy >= 1.24.

``chainer.functions.resize_images`` (used by PSPNet) computes its sampling positions with
``dtype=numpy.float``, an alias NumPy 1.24 removed, so it raises ``AttributeError`` on the NumPy
1.26 this project pins. :func:`fix_resize_images` replaces that one helper,
``chainer.functions.array.resize_images.compute_indices_and_weights``, by the same code with
``numpy.float64`` (what ``numpy.float`` meant). Forward and backward results are unchanged.
It does nothing where NumPy still has the alias or the helper is already fixed.
"""

import numpy

__all__ = ["fix_resize_images"]


def _compute_indices_and_weights(out_size, in_size, mode, align_corners, xp):
    # verbatim from chainer 7.8.1 chainer/functions/array/resize_images.py, numpy.float -> float64
    out_H, out_W = out_size
    H, W = in_size
    if mode == 'bilinear':
        if align_corners:
            v = xp.linspace(0, H - 1, num=out_H, dtype=numpy.float64)
            u = xp.linspace(0, W - 1, num=out_W, dtype=numpy.float64)
        else:
            y_scale = H / out_H
            x_scale = W / out_W
            v = (xp.arange(out_H, dtype=numpy.float64) + 0.5) * y_scale - 0.5
            v = xp.maximum(v, 0)
            u = (xp.arange(out_W, dtype=numpy.float64) + 0.5) * x_scale - 0.5
            u = xp.maximum(u, 0)
        vw, v = xp.modf(v)
        uw, u = xp.modf(u)
    elif mode == 'nearest':
        y_scale = H / out_H
        x_scale = W / out_W
        v = xp.minimum(xp.floor(
            xp.arange(out_H, dtype=numpy.float64) * y_scale), H - 1)
        u = xp.minimum(xp.floor(
            xp.arange(out_W, dtype=numpy.float64) * x_scale), W - 1)
        vw = xp.zeros_like(v)
        uw = xp.zeros_like(u)
    return v, u, vw, uw


def fix_resize_images():
    """Make ``chainer.functions.resize_images`` work on NumPy >= 1.24 (idempotent).

    Returns
    -------
    bool
        True if the helper was replaced by this call.
    """
    if "float" in numpy.__dict__:
        return False
    from chainer.functions.array import resize_images
    if resize_images.compute_indices_and_weights is _compute_indices_and_weights:
        return False
    resize_images.compute_indices_and_weights = _compute_indices_and_weights
    return True
