"""examples/bench_costs.py on the test preset: the two graphs differ in their costs only, each
plan fits its budget at the peak it predicts, and the profiled seconds are those of the
recomputed operations."""

import pytest

torch = pytest.importorskip("torch")

from examples import bench_costs as bc  # noqa: E402


def test_the_mlp_under_both_cost_models():
    case = bc.bench_torch.Case("mlp", "test")
    graphs = bc._traces(case)
    f, p = graphs["flops"], graphs["profile"]
    assert f.facts == p.facts and list(f.memory) == list(p.memory)
    assert f.cost_model == "flops" and p.cost_model == "profile" and p.time_unit > 0
    assert list(f.cost) != list(p.cost)
    plan = bc.lowerset.min_peak(p)
    want = sum(int(p.cost[v]) for v in plan.schedule.recomputed) * p.time_unit
    assert plan.schedule.recomputed and bc._seconds(p, plan) == pytest.approx(want)

    result = bc.bench_network("mlp", "test", rounds=1)
    rows = result["rows"]
    assert {r["cost_model"] for r in rows} == set(bc.COST_MODELS)
    for r in rows:
        assert r["peak"] == r["predicted"] <= r["budget"]   # on the CPU, to the byte
    text = bc.markdown({"machine": bc.bench_torch.machine_info(torch.device("cpu")),
                        "preset": "test", "rounds": 1, "rows": [result]})
    assert text.count("| mlp |") == len(rows)
