"""Every module of lowerset, torch_ext and chainer_ext imports first, in a fresh interpreter.

An import cycle hides while the modules of a cycle happen to be imported in a lucky order (a
package's ``__init__`` importing them all, in one order); importing each module before any
other of its package, in a new interpreter, is what shows it. A front end whose framework is
not installed in the running environment is skipped: torch_ext needs PyTorch (``.venv-torch``),
chainer_ext needs Chainer (``.venv``). The interpreters run side by side, one per core.
"""

import importlib.util
import os
import pkgutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Each package and the framework it needs (None: none).
PACKAGES = {"lowerset": None, "torch_ext": "torch", "chainer_ext": "chainer"}


def _modules():
    """A pytest param per module of each package (the package included), those of a package
    whose framework is missing marked skipped."""
    params = []
    for package, framework in PACKAGES.items():
        missing = framework is not None and importlib.util.find_spec(framework) is None
        names = [package] + [m.name for m in pkgutil.walk_packages([str(ROOT / package)],
                                                                    package + ".")]
        marks = pytest.mark.skip(reason=f"{package} needs {framework}") if missing else ()
        params += [pytest.param(name, marks=marks, id=name) for name in names]
    return params


def _import_alone(name):
    """Import module `name` first thing in a new interpreter; return the finished process."""
    return subprocess.run([sys.executable, "-c", f"import {name}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def imported(request):
    """Module name -> the process that imported it alone, for every module the session runs
    this file's test on (all at once, so that the interpreters share the cores)."""
    names = [item.callspec.params["module"] for item in request.session.items
             if getattr(item, "function", None) is test_module_imports_first
             and not item.get_closest_marker("skip")]
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        return dict(zip(names, pool.map(_import_alone, names)))


@pytest.mark.parametrize("module", _modules())
def test_module_imports_first(module, imported):
    r = imported[module]
    assert r.returncode == 0, f"`import {module}` in a fresh interpreter failed:\n{r.stderr}"
