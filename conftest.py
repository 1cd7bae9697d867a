"""Repo-wide pytest configuration: doctest namespace, --runslow, hypothesis profiles.

Where Chainer is installed, :mod:`chainer_ext` is imported here, before any test module imports
``chainer``: it applies its NumPy fixes for Chainer 7.8.1 first (``chainer_ext/_compat.py``),
which ``import chainer`` needs on NumPy 2. Where Chainer is not installed (the planner-only
environment of ``scripts/test_planner.sh``), ``chainer_ext/``, ``examples/`` and
``tests/chainer_ext/`` are not collected (pytest collects a path given on its command line or in
``testpaths`` all the same, so that script names ``tests lowerset``), and the other tests that
need Chainer skip themselves. Without PyTorch (every environment but ``.venv-torch``),
``tests/torch_ext/`` and the PyTorch examples are not collected. Without matplotlib (the ``plot`` extra) the doctests of
``lowerset/plot.py`` are not collected.
"""

import importlib.util
import os

import pytest

#: True where Chainer is installed (``pip install 'lowerset[chainer]'``).
HAVE_CHAINER = importlib.util.find_spec("chainer") is not None

if HAVE_CHAINER:
    import chainer_ext  # noqa: F401
    collect_ignore = []
else:
    collect_ignore = ["chainer_ext", "examples", "tests/chainer_ext"]
if importlib.util.find_spec("torch") is None:
    # the PyTorch front end's tests and examples run in .venv-torch (scripts/test.sh)
    collect_ignore += ["tests/torch_ext", "examples/torch_models.py", "examples/bench_torch.py"]
if importlib.util.find_spec("matplotlib") is None:
    collect_ignore.append("lowerset/plot.py")  # its doctests draw (the plot extra)

try:
    from hypothesis import HealthCheck, settings
except ImportError:  # pragma: no cover - hypothesis is a test dependency
    settings = None

if settings is not None:
    # deadline=None: the first example of a test pays Numba's JIT compilation.
    settings.register_profile("default", deadline=None, max_examples=100)
    settings.register_profile("ci", deadline=None, max_examples=200,
                              suppress_health_check=[HealthCheck.too_slow])
    settings.register_profile("dev", deadline=None, max_examples=20)
    settings.load_profile(os.getenv("HYPOTHESIS_PROFILE", "default"))


def pytest_addoption(parser):
    parser.addoption("--runslow", action="store_true", default=False, help="run tests marked slow")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--runslow"):
        return
    skip_slow = pytest.mark.skip(reason="slow test: run with --runslow")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip_slow)


@pytest.fixture(autouse=True)
def _add_lowerset(doctest_namespace):
    import lowerset

    doctest_namespace["ls"] = lowerset
