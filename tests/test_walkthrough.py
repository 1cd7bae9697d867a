"""The README's walkthrough (examples/walkthrough.py) runs and tells the story it claims."""

import re

import pytest

pytest.importorskip("chainer")

from examples import walkthrough  # noqa: E402


def test_walkthrough(capsys, tmp_path):
    assert walkthrough.main(["--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    plain = float(re.search(r"the plain step needs ([\d.]+) MB", out).group(1))
    assert plain > 200, "the plain step must not fit the walkthrough's 200 MB cap"
    assert (tmp_path / "plan.json").stat().st_size > 0
    batches = dict(re.findall(r"planner=(None|'lowerset'): (\d+)", out))
    assert int(batches["'lowerset'"]) > int(batches["None"])
