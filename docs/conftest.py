"""pytest configuration for the pages' examples, run by scripts/test_planner.sh in the
planner-only environment (``pytest --doctest-glob='*.md'`` over the pages that need neither
PyTorch nor Chainer). Sphinx's doctest builder (scripts/docs.sh) runs the same examples with the
names of ``doctest_global_setup`` in docs/conf.py; this fixture gives pytest's doctests those
names too: ``lowerset``, ``ls`` and ``GRAPHS``, the folder of the authors' ``cg_*.txt`` graphs
($LOWERSET_GRAPHS, else ../shared/graphs beside the checkout).
"""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "_ext"))
from authors_graphs import GRAPHS, have_graphs  # noqa: E402


def pytest_collection_modifyitems(items):
    """Skip a page whose examples read the authors' graphs where GRAPHS holds none (Sphinx
    skips those blocks by ``:skipif: not HAVE_GRAPHS``; pytest runs a page as one doctest)."""
    if have_graphs():
        return
    skip = pytest.mark.skip(reason=f"the authors' graphs (cg_*.txt) are not in {GRAPHS}: "
                                   "set LOWERSET_GRAPHS to their folder")
    for item in items:
        test = getattr(item, "dtest", None)
        if test is not None and any("GRAPHS" in e.source for e in test.examples):
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _page_names(doctest_namespace):
    import lowerset

    doctest_namespace["lowerset"] = lowerset
    doctest_namespace["ls"] = lowerset
    doctest_namespace["GRAPHS"] = GRAPHS
