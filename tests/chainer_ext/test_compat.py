"""chainer_ext/_compat.py: the NumPy fixes for Chainer 7.8.1, applied on import of chainer_ext."""

import numpy as np
import pytest

chainer = pytest.importorskip("chainer")

import chainer.functions as F  # noqa: E402

from chainer_ext import _compat  # noqa: E402


def test_fixes_applied_where_numpy_needs_them():
    assert ("sctypes" in np.__dict__) and ("int" in np.sctypes)
    if "float" not in np.__dict__:  # NumPy >= 1.24
        assert any("resize_images" in a for a in _compat.applied), _compat.applied
    assert _compat.fix_resize_images() is False  # already applied (or not needed): idempotent


def test_resize_images_bilinear_values_and_gradient():
    # 2x2 -> 3x3 with align_corners: the corners stay, the rest are midpoints
    x = chainer.Variable(np.array([[[[0.0, 1.0], [2.0, 3.0]]]], np.float32))
    y = F.resize_images(x, (3, 3), mode="bilinear", align_corners=True)
    expected = np.array([[0.0, 0.5, 1.0], [1.0, 1.5, 2.0], [2.0, 2.5, 3.0]], np.float32)
    np.testing.assert_array_equal(y.array[0, 0], expected)
    F.sum(y).backward()
    # each input pixel's weights over the 9 outputs: 1 + 2 * 0.5 + 0.25 = 2.25
    np.testing.assert_array_equal(x.grad, np.full((1, 1, 2, 2), 2.25, np.float32))


def test_resize_images_nearest_and_half_pixel():
    x = np.arange(4, dtype=np.float32).reshape(1, 1, 1, 4)
    y = F.resize_images(x, (1, 2), mode="nearest").array
    np.testing.assert_array_equal(y[0, 0, 0], [0.0, 2.0])
    # half-pixel centres (align_corners=False): 4 -> 2 samples at 0.5 and 2.5
    y = F.resize_images(x, (1, 2), mode="bilinear", align_corners=False).array
    np.testing.assert_array_equal(y[0, 0, 0], [0.5, 2.5])
