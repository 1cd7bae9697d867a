"""examples/bench_floor.py: its verdicts on hand-made rows, and one network measured end to end
(the MILP's lower bound below our least peak, our peak as predicted, gradients bitwise)."""

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("highspy")

from examples import bench_floor as bf  # noqa: E402


def _row(**kw):
    row = {"resident": 10, "gradient_bytes": 10, "plain": 100, "checkpoint": 100, "ours": 96,
           "bound": 94}
    return row | kw


def test_verdicts_by_hand():
    d = bf.derive(_row())
    assert d["share"] == pytest.approx(0.8) and d["margin"] == pytest.approx(0.04)
    assert d["reachable"] == pytest.approx(0.06) and d["verdict"] == "missed"
    assert bf.derive(_row(bound=96))["verdict"] == "unreachable"   # no plan goes 5% below
    assert bf.derive(_row(ours=95))["verdict"] == "met"            # 5% below
    assert bf.derive(_row(resident=40, gradient_bytes=20))["verdict"] == "met"   # share 0.4
    assert bf.derive(_row(bound=None))["verdict"] == "missed"      # no bound: no excuse


def test_one_network_end_to_end():
    row = bf.bench_network("mlp", "test", time_limit=60)
    assert row["bound"] is not None and row["bound"] <= row["ours_predicted"]
    assert row["ours"] == row["ours_predicted"] and row["ours_bitwise"]
    assert row["checkpoint_bitwise"] and row["ours"] < row["plain"]
    data = {"machine": bf.bench_torch.machine_info(torch.device("cpu")), "preset": "test",
            "time_limit": 60, "rows": [row]}
    line = next(x for x in bf.markdown(data).splitlines() if x.startswith("| mlp |"))
    assert f"{row['ours'] / 1e6:.1f} / {row['ours_predicted'] / 1e6:.1f}" in line
