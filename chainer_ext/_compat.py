"""Run Chainer 7.8.1 (written for NumPy 1.x and CuPy 7) on today's NumPy, CuPy and Python.

``chainer_ext/__init__.py`` calls :func:`import_chainer` before anything else, so importing
:mod:`chainer_ext` applies these fixes before Chainer is first imported (the repository's
``conftest.py`` imports it first in every test run). Code that imports ``chainer`` itself before
:mod:`chainer_ext` gets fixes 1 and 3 when it imports :mod:`chainer_ext` later, but on NumPy 2
its own ``import chainer`` fails before that (fix 2); import :mod:`chainer_ext` first.

Each fix checks whether it is needed and does nothing otherwise; :data:`applied` names those
that ran. On the CPU setup of ``./scripts/test.sh`` (Python 3.11, NumPy 1.26) only fix 3 runs.

1. ``numpy.sctypes`` (removed in NumPy 2.0): ``chainer.functions.array.as_strided`` reads
   ``numpy.sctypes['int']`` at import and ``numpy.sctypes['float']`` in its backward, so
   ``import chainer`` fails with ``AttributeError``. Set to NumPy 1.x's table, only where NumPy
   has no ``sctypes``. Permanent (needed at call time too).
2. ``numpy.distutils`` (not shipped for Python >= 3.12, removed in NumPy 2.x):
   ``chainer/_environment_check.py`` does ``import numpy.distutils.system_info`` at import, only
   to call ``get_info('blas_opt')`` in a macOS-only check for Apple's Accelerate BLAS. Where
   ``numpy.distutils`` cannot be found, a stub module whose ``get_info`` returns ``{}`` ("no BLAS
   information": the check then warns of nothing) is put in ``sys.modules`` while ``chainer`` is
   imported, and removed again afterwards, so nothing else sees it.
3. ``numpy.float`` (removed in NumPy 1.24) in ``chainer.functions.resize_images``, which
   chainercv's PSPNet and DeepLab v3+, and ``examples/models/pspnet.py``, call: its helper
   ``chainer.functions.array.resize_images.compute_indices_and_weights`` computes sampling
   positions with ``dtype=numpy.float`` and raises ``AttributeError``. The helper is replaced by
   the same code with ``numpy.float64`` (what ``numpy.float`` meant), so forward and backward
   results are unchanged. Permanent, only where NumPy has no ``float`` alias.

If ``chainer`` is not installed, :func:`import_chainer` raises a ``ModuleNotFoundError`` (an
``ImportError``) that names the extra to install (``pip install 'lowerset[chainer]'``); if
Chainer's own import of ``pkg_resources`` fails (setuptools >= 81 has none), the error names
``setuptools<74``.

Not patched here, on purpose:

- ``pkg_resources`` itself: install ``setuptools<74`` next to Chainer (the ``chainer`` extra
  does) rather than stubbing it; ``scripts/gpu_device.sh`` does too.
- ``numpy.bool`` (absent from NumPy 1.24 to 1.26, back in NumPy 2) in chainercv's dataset,
  visualisation and instance-mask helpers, and ``numpy.int`` in its experimental FCIS: none of
  them runs in a training step of the models in ``tests/chainer_ext/test_model_zoo.py``.
- ``xp.array(v, copy=False, dtype=...)`` in ``chainermn.communicators._memory_utility.
  unpack_params``: NumPy 2 raises there when the dtypes differ, which happens only with
  ``allreduce_grad_dtype`` set on the GPU communicators; the CPU ``naive`` communicator that
  ``examples/train_chainermn.py`` uses does not call it.
- ``cupy.util`` (renamed ``cupy._util`` in CuPy 9): Chainer 7.8.1 already tries ``cupy._util``
  first.
- cuDNN: CuPy >= 14 has no cuDNN bindings; Chainer then sets
  ``chainer.backends.cuda.cudnn_enabled = False`` and uses its own CuPy kernels (im2col
  convolutions, elementwise pooling and batch normalization).
"""

import contextlib
import importlib.util
import sys
import types

import numpy

__all__ = ["import_chainer", "applied", "fix_resize_images", "INSTALL_HINT"]

#: What to install for :mod:`chainer_ext` (the ``chainer`` extra of ``setup.cfg``).
INSTALL_HINT = "pip install 'lowerset[chainer]'"

#: Names of the fixes that were needed on this machine, in the order they ran (for reports).
applied: list[str] = []


def _fix_numpy_sctypes():
    if "sctypes" in numpy.__dict__:
        return
    numpy.sctypes = {  # NumPy 1.26's numpy.sctypes
        "int": [numpy.int8, numpy.int16, numpy.int32, numpy.int64],
        "uint": [numpy.uint8, numpy.uint16, numpy.uint32, numpy.uint64],
        "float": [numpy.float16, numpy.float32, numpy.float64, numpy.longdouble],
        "complex": [numpy.complex64, numpy.complex128, numpy.clongdouble],
        "others": [bool, object, bytes, str, numpy.void],
    }
    applied.append("numpy.sctypes")


def _numpy_distutils_missing():
    try:
        return importlib.util.find_spec("numpy.distutils") is None
    except (ImportError, ValueError):
        return True


@contextlib.contextmanager
def _numpy_distutils_stub():
    """Provide ``numpy.distutils.system_info.get_info`` (returning ``{}``) inside the block."""
    if not _numpy_distutils_missing():
        yield
        return
    names = ("numpy.distutils", "numpy.distutils.system_info")
    saved = {n: sys.modules[n] for n in names if n in sys.modules}
    pkg = types.ModuleType("numpy.distutils",
                           "Stub from chainer_ext._compat (import chainer only).")
    pkg.__path__ = []
    info = types.ModuleType("numpy.distutils.system_info",
                            "Stub from chainer_ext._compat: get_info() knows no library.")
    info.get_info = lambda name, notfound_action=0: {}
    pkg.system_info = info
    had_attr = "distutils" in numpy.__dict__
    sys.modules.update(zip(names, (pkg, info)))
    if not had_attr:  # the macOS check reads numpy.distutils.system_info as an attribute
        numpy.distutils = pkg
    applied.append("numpy.distutils stub (during import chainer)")
    try:
        yield
    finally:
        if not had_attr:
            numpy.__dict__.pop("distutils", None)
        for n in names:
            if n in saved:
                sys.modules[n] = saved[n]
            else:
                sys.modules.pop(n, None)


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
    """Make ``chainer.functions.resize_images`` work on NumPy >= 1.24 (fix 3; idempotent).

    Returns
    -------
    bool
        True if this call replaced the helper; False where NumPy still has ``numpy.float`` or
        the helper is already replaced.
    """
    if "float" in numpy.__dict__:
        return False
    from chainer.functions.array import resize_images
    if resize_images.compute_indices_and_weights is _compute_indices_and_weights:
        return False
    resize_images.compute_indices_and_weights = _compute_indices_and_weights
    applied.append("chainer.functions.resize_images: numpy.float -> numpy.float64")
    return True


def _import_error(e):
    """The error to raise when ``import chainer`` failed with `e`, naming the fix, or None.

    A ``ModuleNotFoundError`` (an ``ImportError``) with the missing module's ``name``, so that
    ``pytest.importorskip("chainer_ext")`` and ``except ModuleNotFoundError`` still work.
    """
    missing = getattr(e, "name", None)
    if missing == "chainer":
        return ModuleNotFoundError(f"chainer_ext needs Chainer 7.8.1, which is not installed: "
                                   f"{INSTALL_HINT} (see the manual's install page, "
                                   "docs/getting-started/install.md)",
                                   name="chainer")
    if missing == "pkg_resources":
        return ModuleNotFoundError("Chainer 7.8.1 imports pkg_resources, which this setuptools "
                                   "does not have (setuptools >= 81): pip install "
                                   "'setuptools<74' (the chainer extra pins it)",
                                   name="pkg_resources")
    return None


def import_chainer():
    """Apply the fixes that this machine needs, then import and return ``chainer``.

    If ``chainer`` was already imported, only the fixes that act after import are applied
    (1 and 3; then Chainer imported fine without fix 2).

    Returns
    -------
    module
        ``chainer``.

    Raises
    ------
    ModuleNotFoundError
        (an ``ImportError``) If Chainer is not installed (the message says ``pip install
        'lowerset[chainer]'``), or its import of ``pkg_resources`` fails (the message names
        ``setuptools<74``). Other import errors of Chainer propagate unchanged.
    """
    _fix_numpy_sctypes()
    if "chainer" in sys.modules and sys.modules["chainer"] is not None:
        chainer = sys.modules["chainer"]
    else:
        try:
            with _numpy_distutils_stub():
                import chainer
        except ImportError as e:
            err = _import_error(e)
            if err is None:
                raise
            raise err from e
    fix_resize_images()
    return chainer
