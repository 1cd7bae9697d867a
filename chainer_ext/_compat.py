"""Run Chainer 7.8.1 (written for NumPy 1.x and CuPy 7) on NumPy 2 and Python 3.12.

``chainer_ext/__init__.py`` calls :func:`import_chainer` before anything else, so importing
:mod:`chainer_ext` applies these fixes before Chainer is first imported. Code that imports
``chainer`` itself first (``examples/reproduce_table1.py``, the tests'
``pytest.importorskip("chainer")``) must import :mod:`chainer_ext` before it on such a machine,
e.g. ``python -m pytest -p chainer_ext ...`` (see ``scripts/gpu_device.sh``).

Each fix checks whether it is needed and does nothing otherwise. On the project's own pins
(Python 3.11, NumPy 1.26, no CuPy) none of them changes anything.

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

Not patched here, on purpose:

- ``pkg_resources`` (imported by ``chainer/_environment_check.py``) is part of setuptools < 81.
  Where setuptools has no ``pkg_resources``, install ``setuptools<74`` (the project's
  constraint) next to Chainer rather than stubbing it; ``scripts/gpu_device.sh`` does.
- ``numpy.float`` in ``chainer.functions.resize_images`` (removed in NumPy 1.24, so also on the
  pinned NumPy 1.26): fixed where it is used, by ``examples/models/_compat.py`` (PSPNet).
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

__all__ = ["import_chainer", "applied"]

#: Names of the fixes that were needed on this machine (for reports; empty on the pinned setup).
applied = []


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
    pkg = types.ModuleType("numpy.distutils", "Stub from chainer_ext._compat (import chainer only).")
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


def import_chainer():
    """Apply the fixes that this machine needs, then import and return ``chainer``.

    Does nothing but return the module if ``chainer`` was already imported (then Chainer imported
    fine without the import-time fixes; the permanent ones are still applied).
    """
    _fix_numpy_sctypes()
    if "chainer" in sys.modules:
        return sys.modules["chainer"]
    with _numpy_distutils_stub():
        import chainer
    return chainer
