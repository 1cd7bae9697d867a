"""Build and install chainercv 0.13.1 (its last release) on Python >= 3.9.

Usage: ``PYTHON scripts/chainercv.py`` with the Python of the environment to install into
(``scripts/venv.sh`` runs it with ``.venv/bin/python``); it reads pip's usual settings
(``PIP_CONSTRAINT``, ``PIP_BUILD_CONSTRAINT``, indexes) from the environment.

Why: chainercv 0.13.1 is on PyPI only as an sdist, and ``pip install chainercv`` fails on every
Python from 3.9 up. Its one C extension, ``chainercv/utils/bbox/_nms_gpu_post.c``, was generated
by Cython 0.28.3 from a ``.pyx`` that the sdist leaves out, and that C code uses CPython
internals that are gone (``longintrepr.h``, the old ``PyCode_New`` signature, ``PyFrameObject``
fields, ``exc_type`` of ``_PyErr_StackItem``), so it cannot be compiled or regenerated.

What: the extension holds one function, ``_nms_gpu_post``: the host-side loop of chainercv's
*GPU* non-maximum suppression, which turns the suppression bit mask computed by a CUDA kernel
into the indices of the kept boxes. Nothing on the CPU calls it, but ``chainercv.utils`` imports
it. This script downloads the sdist with pip, removes the extension from its ``setup.py``, adds
``chainercv/utils/bbox/_nms_gpu_post.py`` (:data:`NMS_GPU_POST`: the same loop in NumPy,
which ``tests/chainer_ext/test_model_zoo.py`` checks against chainercv's CPU suppression), builds
a wheel and installs it without dependencies (Chainer and Pillow come from the project's
extras). The rest of chainercv is unchanged.

Raises
------
SystemExit
    If pip fails, or the sdist's ``setup.py`` does not have the lines this script edits (then
    the version is not 0.13.1).
"""

import glob
import os
import subprocess
import sys
import tarfile
import tempfile

VERSION = "0.13.1"

#: Source of ``chainercv/utils/bbox/_nms_gpu_post.py``: the loop of chainercv 0.13.1's
#: ``_nms_gpu_post.pyx`` (as quoted in the comments of its generated C file), in NumPy.
NMS_GPU_POST = '''\
"""Host-side loop of chainercv's GPU non-maximum suppression, in NumPy.

Written by lowerset's scripts/chainercv.py in place of chainercv 0.13.1's Cython extension
(whose generated C does not compile on Python >= 3.9); same arguments and results.
"""

import numpy as np


def _nms_gpu_post(mask, n_bbox, threads_per_block, col_blocks):
    """Return ``(selection, n_selection)``: kept box indices (int32, first n_selection valid).

    ``mask`` is uint64, shape ``(n_bbox * col_blocks,)``: bit ``k`` of word ``i * col_blocks
    + j`` is set when box ``i`` suppresses box ``j * threads_per_block + k``.
    """
    mask = np.asarray(mask, dtype=np.uint64)
    selection = np.zeros((n_bbox,), dtype=np.int32)
    remv = np.zeros((col_blocks,), dtype=np.uint64)
    n_selection = 0
    one = np.uint64(1)
    for i in range(n_bbox):
        nblock = i // threads_per_block
        inblock = np.uint64(i % threads_per_block)
        if not (remv[nblock] & (one << inblock)):
            selection[n_selection] = i
            n_selection += 1
            index = i * col_blocks
            remv[nblock:] |= mask[index + nblock:index + col_blocks]
    return selection, n_selection
'''

# (old, new) replacements in the sdist's setup.py
SETUP_EDITS = [
    ("    ext_modules=extensions,\n", "    ext_modules=[],\n"),
    ("    setup_requires=setup_requires,\n", ""),
]


def _pip(*args):
    cmd = [sys.executable, "-m", "pip", *args]
    print("+", " ".join(cmd), flush=True)
    rc = subprocess.call(cmd)
    if rc:
        raise SystemExit(f"scripts/chainercv.py: {' '.join(cmd)} failed with exit code {rc}")


def patch(src):
    """Edit the unpacked sdist in `src` so that it builds without its C extension.

    Parameters
    ----------
    src : str
        The sdist's top folder (with ``setup.py``).

    Raises
    ------
    SystemExit
        If ``setup.py`` lacks a line to edit (another chainercv version).
    """
    path = os.path.join(src, "setup.py")
    with open(path) as f:
        text = f.read()
    for old, new in SETUP_EDITS:
        if text.count(old) != 1:
            raise SystemExit(f"scripts/chainercv.py: {path} has no line {old.strip()!r}; this "
                             f"script edits chainercv {VERSION} only")
        text = text.replace(old, new)
    with open(path, "w") as f:
        f.write(text)
    bbox = os.path.join(src, "chainercv", "utils", "bbox")
    os.remove(os.path.join(bbox, "_nms_gpu_post.c"))
    with open(os.path.join(bbox, "_nms_gpu_post.py"), "w") as f:
        f.write(NMS_GPU_POST)


def main():
    with tempfile.TemporaryDirectory(prefix="chainercv-build-") as tmp:
        _pip("download", "--quiet", "--no-deps", "--no-binary", ":all:",
             f"chainercv=={VERSION}", "-d", tmp)
        (sdist,) = glob.glob(os.path.join(tmp, f"chainercv-{VERSION}.tar.gz"))
        with tarfile.open(sdist) as tar:
            if hasattr(tarfile, "data_filter"):  # Python >= 3.10.12 / 3.11.4
                tar.extractall(tmp, filter="data")
            else:
                tar.extractall(tmp)
        src = os.path.join(tmp, f"chainercv-{VERSION}")
        patch(src)
        wheels = os.path.join(tmp, "wheels")
        _pip("wheel", "--quiet", "--no-deps", "-w", wheels, src)
        (wheel,) = glob.glob(os.path.join(wheels, "chainercv-*.whl"))
        _pip("install", "--quiet", "--no-deps", "--force-reinstall", wheel)


if __name__ == "__main__":
    main()
