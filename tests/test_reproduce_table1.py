"""Fast end-to-end test of examples/reproduce_table1.py on one tiny configuration."""

import json

import pytest

pytest.importorskip("chainer")
pytest.importorskip("matplotlib")
pytest.importorskip("tqdm")

from examples import reproduce_table1 as rt  # noqa: E402

MEASURES = ("total_peak", "nonparam_peak", "total_boundary_peak", "nonparam_boundary_peak")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("table1")
    res = rt.main(["--networks", "resnet50", "--batch", "1", "--size", "64", "--out", str(out)])
    return out, res


def test_outputs_written(run):
    out, _ = run
    for name in ("table1.md", "table1.json", "table1.png"):
        assert (out / name).stat().st_size > 0
    assert (out / "table1.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    md = (out / "table1.md").read_text()
    assert "| resnet50 |" in md and "Vanilla" in md and "Machine:" in md
    for key in rt.OURS + ("chen",):
        assert rt.STRATEGIES[key][0] in md


def test_every_strategy_measured(run):
    out, res = run
    data = json.loads((out / "table1.json").read_text())
    assert data["machine"]["chainer"]
    rows = {r["strategy"]: r for r in data["results"][0]["rows"]}
    assert list(rows) == list(rt.STRATEGIES)
    for key, r in rows.items():
        assert r["note"] is None, key
        for m in MEASURES:
            assert r[m] > 0, (key, m)
        # the boundary peak is sampled inside the iteration whose peak is the maximum
        assert r["total_boundary_peak"] <= r["total_peak"], key
        assert r["nonparam_boundary_peak"] <= r["total_boundary_peak"], key
        # the schedule predicts the measured whole-step peak
        assert abs(r["predicted_peak"] - r["total_peak"]) <= 0.03 * r["total_peak"] + (256 << 10)
        # and, over the paper's memory (activation_facts), the non-param boundary peak; at
        # this size (2-3 MB of activations) the step's Python objects (Variables, function
        # nodes: about 4 KiB per function, which the schedule does not count) weigh 20-30%
        npb = r["nonparam_boundary_peak"]
        tol = 0.03 * npb + (256 << 10) + (4 << 10) * data["results"][0]["nodes"]
        assert abs(r["predicted_activation_peak"] - npb) <= tol, key
        if key != "vanilla":
            assert r["planned_peak"] > 0 and r["recompute_cost"] >= 0 and r["time_s"] > 0
            assert "total_peak_reduction" in r
    # the plan of least activation peak is predicted at most Chen's there
    assert (rows["exact-ma"]["predicted_activation_peak"]
            <= rows["chen"]["predicted_activation_peak"])
    assert data["targets"][0]["network"] == "resnet50"
    assert res["targets"][0]["ours"] is not None


def test_timeout_cell(tmp_path, monkeypatch):
    """An exact DP past --time-limit shows "timeout" and is not measured."""
    import lowerset

    def too_slow(*args, **kwargs):
        raise lowerset.SearchLimitError("time limit", limit="time_limit")

    monkeypatch.setattr(lowerset, "solve", too_slow)
    monkeypatch.setattr(lowerset, "min_peak", too_slow)
    g = lowerset.Graph.chain(3)
    s, _, note = rt.plan(g, "exact-mc", 0.01)
    assert s is None and note == "timeout"
    res = {"network": "vgg19", "batch": 1, "size": [8, 8], "nodes": 3, "paper_nodes": 46,
           "rows": [{"strategy": "exact-mc", "label": "ExactDP+MC", "planner_s": 0.01,
                     "note": "timeout"}]}
    assert "| timeout | timeout |" in rt.markdown_table([res])


@pytest.mark.parametrize("ours, others, ok", [
    ((100, 99), (100, 120), True),      # min peak at the lowest other
    ((100, None), (99.6, 130), True),   # within 0.5 %
    ((100, 101), (99.0, 130), False),   # 1 % above the lowest other
    ((None, None), (99, 130), None),    # not measured
])
def test_whole_step_check(ours, others, ok):
    rows = [{"strategy": k, "total_peak": v} for k, v in zip(("approx-mp", "exact-mp"), ours)
            if v is not None]
    rows += [{"strategy": k, "total_peak": v} for k, v in zip(("vanilla", "chen"), others)]
    rows.append({"strategy": "exact-tc"})  # timed out: no peak
    c = rt.check_whole_step({"network": "n", "rows": rows})
    assert c["ok"] is ok
    if ok is not None:
        assert c["ours"] == min(v for v in ours if v is not None) and c["others"] == others[0]
