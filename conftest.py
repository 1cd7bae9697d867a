"""Repo-wide pytest configuration: doctest namespace, --runslow, hypothesis profiles."""

import os

import pytest

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
