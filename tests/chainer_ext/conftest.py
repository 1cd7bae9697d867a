"""Import Chainer once, ignoring the one warning its import emits on this toolchain.

Chainer 7.8.1's ``chainer._environment_check`` imports ``numpy.distutils.system_info``, which
imports setuptools' ``distutils.msvccompiler``, and that module warns
"msvccompiler is deprecated" (DeprecationWarning from ``setuptools._distutils``), which the
repository's ``filterwarnings = error`` would turn into a collection error.
"""

import warnings

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="msvccompiler is deprecated",
                            category=DeprecationWarning)
    try:
        import chainer  # noqa: F401
    except ImportError:  # the tests skip themselves with importorskip
        pass
