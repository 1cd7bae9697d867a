"""Packaging: the planner's dependencies, the extras, and what happens without Chainer.

Runs in both environments: ``./scripts/test.sh`` (everything installed) and
``./scripts/test_planner.sh`` (lowerset[test] only, NumPy 2, no Chainer). Where Chainer is
installed, a subprocess hides it by setting ``sys.modules["chainer"] = None``, which makes
``import chainer`` fail exactly as it does where Chainer is not installed
(``ModuleNotFoundError`` with ``name == "chainer"``).
"""

import importlib.metadata
import importlib.util
import re
import subprocess
import sys

import pytest

HAVE_CHAINER = importlib.util.find_spec("chainer") is not None
HIDE_CHAINER = "import sys; sys.modules['chainer'] = None\n"
EXTRA_HINT = "pip install 'lowerset[chainer]'"


def _requirements():
    """``{extra or None: {name: specifier string}}`` from the installed lowerset metadata."""
    out = {}
    for req in importlib.metadata.requires("lowerset") or []:
        spec, _, marker = req.partition(";")
        m = re.match(r"\s*([A-Za-z0-9_.-]+)\s*(.*)", spec)
        extra = re.search(r"extra\s*==\s*['\"]([^'\"]+)['\"]", marker)
        out.setdefault(extra.group(1) if extra else None, {})[m.group(1).lower()] = \
            m.group(2).strip("() ")
    return out


def _python(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)


def test_planner_requires_numpy_numba_networkx_only():
    base = _requirements()[None]
    assert set(base) == {"numpy", "numba", "networkx"}, base
    # NumPy 1.x and 2.x: no upper bound of lowerset's own (numba bounds NumPy)
    assert "<" not in base["numpy"], base["numpy"]


def test_extras():
    reqs = _requirements()
    assert {"chainer", "cuda", "mpi", "plot", "cli", "test"} <= set(reqs), sorted(
        k for k in reqs if k)
    assert reqs["chainer"]["chainer"] == "==7.8.1"
    assert "setuptools" in reqs["chainer"]
    assert any(name.startswith("cupy") for name in reqs["cuda"]), reqs["cuda"]
    assert "mpi4py" in reqs["mpi"]


def test_lowerset_never_imports_chainer():
    code = ("import sys\n"
            "import lowerset as ls\n"
            "g = ls.Graph.chain(4)\n"
            "s = ls.solve(g, budget=1e9, method='approx')\n"
            "ls.baselines.chen_sqrtn(g); ls.simulate(s)\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('chainer', 'chainer_ext', 'cupy', 'chainermn', 'torch', 'torch_ext'))\n"
            "assert not bad, bad\n")
    r = _python(code)
    assert r.returncode == 0, r.stderr


def test_chainer_ext_without_chainer_names_the_extra():
    r = _python(HIDE_CHAINER + "import chainer_ext\n")
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("ModuleNotFoundError: chainer_ext needs Chainer 7.8.1"), r.stderr
    assert EXTRA_HINT in last, last


@pytest.mark.skipif(HAVE_CHAINER, reason="Chainer is installed (the planner-only environment "
                                         "runs this test)")
def test_chainer_ext_import_error_in_planner_only_environment():
    with pytest.raises(ImportError, match=re.escape(EXTRA_HINT)) as e:
        import chainer_ext  # noqa: F401
    assert isinstance(e.value, ModuleNotFoundError)
    assert e.value.name == "chainer"


@pytest.mark.skipif(not HAVE_CHAINER, reason="needs Chainer")
def test_chainer_without_pkg_resources_names_setuptools():
    # setuptools >= 81 has no pkg_resources, which Chainer 7.8.1 imports
    r = _python("import sys; sys.modules['pkg_resources'] = None\nimport chainer_ext\n")
    assert r.returncode != 0
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("ModuleNotFoundError: Chainer 7.8.1 imports pkg_resources"), r.stderr
    assert "setuptools<74" in last, last


def test_torch_extra_and_planner_without_torch():
    assert _requirements()["torch"]["torch"] == "==2.13.0"
    code = ("import sys; sys.modules['torch'] = None\n"
            "import lowerset as ls\n"
            "ls.min_peak(ls.Graph.chain(4))\n"
            "try:\n"
            "    import torch_ext\n"
            "except ImportError as e:\n"
            "    print(e)\n")
    r = _python(code)
    assert r.returncode == 0, r.stderr
    assert "torch_ext needs PyTorch: pip install 'lowerset[torch]'" in r.stdout


def test_optimum_extra_and_lazy_solver_import():
    # lowerset.optimum's solver comes with the optimum extra and is imported only to solve
    assert "highspy" in _requirements().get("optimum", {}), sorted(k for k in _requirements() if k)
    r = _python("import sys\nimport lowerset as ls\nls.optimum\n"
                "assert 'highspy' not in sys.modules, 'highspy imported by import lowerset'\n")
    assert r.returncode == 0, r.stderr
