"""examples/bench_budgets.py: the Markdown of a run's JSON, in the format of each version."""

import pytest

pytest.importorskip("chainer")

from examples import bench_budgets as bb  # noqa: E402

ROW = {"network": "vgg19", "method": "approx", "budget_label": "min peak", "budget": 2e9,
       "infeasible": 2.5e9}


def test_markdown_names_the_machine_and_the_command():
    md = bb.markdown({"machine": "Test CPU", "command": "examples/bench_budgets.py",
                      "rows": [ROW]})
    assert md.startswith("Machine: Test CPU.\n\nCommand: `examples/bench_budgets.py`.")
    assert "| vgg19 | approx |" in md and "infeasible (min 2.500)" in md


def test_markdown_of_a_bare_list_of_rows():
    """Earlier runs wrote the rows alone: their machine and command read "not recorded"."""
    md = bb.markdown([ROW])
    assert md.startswith("Machine: not recorded.\n\nCommand: `not recorded`.")
    assert "| vgg19 | approx |" in md
