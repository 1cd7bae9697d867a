"""The helpers of examples/reproduce_figure4.py: timing points, timing rounds, targets."""

import pytest

pytest.importorskip("chainer")
pytest.importorskip("matplotlib")

import chainer  # noqa: E402
import chainer.functions as F  # noqa: E402
import chainer.links as L  # noqa: E402
import numpy as np  # noqa: E402

from examples import reproduce_figure4 as rf  # noqa: E402

CPU = rf.PRESETS["cpu"]
GPU = rf.PRESETS["gpu"]


def test_timing_points_by_hand():
    largest = {"vanilla": 2, "chen": 5, "paper": 4, "ours": 7}
    assert rf.timing_points(largest, "vanilla", CPU) == [2]
    assert rf.timing_points(largest, "chen", CPU) == [4, 5]
    assert rf.timing_points(largest, "paper", CPU) == [4]
    assert rf.timing_points(largest, "ours", CPU) == [4, 5, 7]
    # the GPU preset adds six points across the range above Vanilla's largest batch
    assert rf.timing_points(largest, "vanilla", GPU) == [1, 2]
    assert rf.timing_points(largest, "ours", GPU) == [3, 4, 5, 6, 7]


class _Recorder:
    """A model whose loss records the batch size and whether a hook was set."""

    def __init__(self):
        self.link = L.Linear(3, 2)
        self.calls = []

    def cleargrads(self):
        self.link.cleargrads()

    def loss_fn(self, b):
        self.calls.append((b, bool(chainer.get_function_hooks())))
        x = np.ones((b, 3), dtype=np.float32)
        return F.sum(F.relu(self.link(x)))


def test_time_points_runs_rounds_in_order():
    import lowerset
    from chainer_ext import trace

    m = _Recorder()
    g = trace(lambda: m.loss_fn(2))
    strategy = lowerset.CanonicalStrategy(g, [set(g.labels)])
    m.calls.clear()
    points = [(2, None), (3, None), (2, strategy)]
    out = rf.time_points(m, m.loss_fn, points, repeat=3, device="cpu", warmup=1)
    # one warm-up of each point, then three rounds of every point in order
    expected = [(2, False), (3, False), (2, True)]
    assert m.calls == expected * 4
    assert len(out) == 3
    for med, times in out:
        assert len(times) == 3 and med == sorted(times)[1] and min(times) > 0


def test_check_targets_by_hand():
    out = {"network": "pspnet",
           "methods": {"vanilla": {"largest_batch": 2}, "chen": {"largest_batch": 4},
                       "ours": {"largest_batch": 8}},
           "timings": {"chen": [{"batch": 4, "time_s": 2.0}],
                       "ours": [{"batch": 4, "time_s": 1.6}, {"batch": 8, "time_s": 3.0}]}}
    c = rf.check_targets(out)
    assert c["ratio"] == 4.0 and c["ratio_ok"]          # the paper's ratio is 8 / 2
    assert c["at_chen_batch"] == 4 and c["speedup"] == pytest.approx(1.25) and c["time_ok"]
    out["methods"]["ours"]["largest_batch"] = 7
    out["timings"]["ours"][0]["time_s"] = 2.1
    c = rf.check_targets(out)
    assert not c["ratio_ok"] and not c["time_ok"]


def test_ours_below_its_least_peak_runs_the_least_peak_plan():
    """A timing point that real runs confirmed above the predicted largest batch has a cap
    below the planner's least predicted peak: ours runs the least-peak plan there (what the
    batch search ran), not an error; within the cap it runs solve's plan."""
    import lowerset

    g = lowerset.Graph.chain(12, memory=10**6)
    low = lowerset.pareto(g)[-1]
    below = low.schedule.peak - 1
    with pytest.raises(lowerset.InfeasibleBudgetError):
        lowerset.solve(g, budget=below)
    assert rf.plan_at("ours", g, below, "exact").lower_sets == low.lower_sets
    plain = lowerset.schedule(g).peak
    assert rf.plan_at("ours", g, plain, "exact").lower_sets == \
        lowerset.solve(g, budget=plain, method="exact").lower_sets


def _record(**extra):
    info = {"cpu": "Test CPU", "logical_cores": 2, "python": "3.11", "allocator": None}
    return {"machine": info, "loadavg": [[0.5, 0, 0], [1.5, 0, 0]], "preset": "gpu",
            "command": "examples/reproduce_figure4.py --device gpu", "repeat": 4,
            "elapsed_s": 12.0, "results": [], **extra}


def test_page_markdown_of_a_record():
    """The page's Markdown comes from the JSON alone; a record without "device" and "warmup"
    (written before they were recorded) takes them from its command and its preset."""
    old = rf.page_markdown(_record())
    assert old.startswith("# Figure 4 reproduction (gpu preset, gpu)\n\nMachine: Test CPU")
    assert "load average 0.5 at the start, 1.5 at the end" in old
    assert "medians of 4 iterations after a warm-up." in old
    new = rf.page_markdown(_record(device="cpu", warmup=0))
    assert "(gpu preset, cpu)" in new and "iterations." in new and "warm-up" not in new
    assert rf.picture_title(_record()) == "Figure 4 (gpu preset, gpu)"
