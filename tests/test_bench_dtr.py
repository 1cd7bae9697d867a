"""examples/bench_dtr.py on the authors' smallest graph: its rows, its targets, its files."""

import json

import pytest

from conftest import graphs_dir
from examples import bench_dtr as bd


@pytest.fixture(scope="module")
def vgg():
    if not (graphs_dir() / "cg_vgg19.txt").is_file():
        pytest.skip("authors' graph cg_vgg19.txt not found")
    return bd.bench("cg/vgg19", graphs_dir())


def test_rows_and_least_budgets(vgg):
    rows = vgg["rows"]
    assert len(rows) == bd.N_BUDGETS
    assert rows[0]["budget"] == vgg["least_peak"] and rows[-1]["budget"] == vgg["plain_peak"]
    assert all(r["solve_peak"] <= r["budget"] for r in rows)
    assert rows[-1]["solve"] == 0 and all(rows[-1][h] == 0 for h in bd.HEURISTICS)
    for h in bd.HEURISTICS:
        least = vgg["dtr_least"][h]
        assert least["failing_below"] < least["budget"]
        assert bd.run_dtr(bd.graph_of("cg/vgg19", graphs_dir()), least["budget"], h)[0] is not None


def test_targets_count_what_the_rows_say(vgg):
    t = bd.targets(vgg)
    done = [r for r in vgg["rows"] if r["dtr"] is not None]
    assert t["dtr_completes"] == len(done)
    assert t["solve_at_most_dtr"] + len(t["dtr_wins"]) == len(done)
    assert all(s > d for _, s, d in t["dtr_wins"])


def test_report(vgg, tmp_path):
    pytest.importorskip("matplotlib")
    bd.picture([vgg], tmp_path / "p.png")
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"
    text = bd.summary_table([vgg]) + bd.network_table(vgg)
    assert "| cg/vgg19 | 46 |" in text and text.count("\n") > bd.N_BUDGETS
    json.dumps(vgg)
