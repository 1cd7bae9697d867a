"""examples/bench_executor.py: the ratio, the recomputed share in time and the target bound."""

from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("chainer")

from examples import bench_executor as be  # noqa: E402


def _graph(n):
    return SimpleNamespace(index={v: v for v in range(n)}, total_cost=lambda: 20)


def test_time_row_uses_per_round_ratios_and_the_share_in_seconds():
    g = _graph(4)
    fwd_s = np.array([0.1, 0.2, 0.3, 0.4])   # 1 s of forward
    s = SimpleNamespace(schedule=SimpleNamespace(recomputed=[1, 3], recompute_cost=5))
    plain = ([2.0, 4.0, 2.0], [1.0, 1.0, 1.0])
    hooked = ([2.4, 4.4, 3.0], [1.7, 1.9, 2.0])     # wall ratios 1.2, 1.1, 1.5
    row = be.time_row(hooked, plain, s, g, fwd_s)
    assert row["ratio"] == pytest.approx(1.2)
    assert row["cpu_ratio"] == pytest.approx(1.9) and not row["cpu_met"]
    assert row["share_time"] == pytest.approx(0.6)
    assert row["share_cost"] == pytest.approx(0.25)
    assert row["bound"] == pytest.approx(1.6 + be.SLACK)
    assert row["met"]
    assert row["recompute_forward_s"] == pytest.approx(0.6)
    assert row["plain_s"] == 2.0 and row["time_s"] == 3.0
    assert row["beyond_recompute"] == pytest.approx(1.9 - 1 - 0.6 / 1.0)
    assert row["min_ratio"] == pytest.approx(2.4 / 2.0)


def test_time_row_liveness_only_has_share_zero_and_the_slack_as_bound():
    row = be.time_row(([1.2, 1.0], [1.0, 1.0]), ([1.0, 1.0], [1.0, 1.0]), None, _graph(2),
                      np.array([0.5, 0.5]))
    assert row["share_time"] == row["share_cost"] == 0.0
    assert row["bound"] == pytest.approx(1 + be.SLACK)
    assert row["ratio"] == pytest.approx(1.1) and not row["met"]


def test_profile_executor_meter_times_callbacks_and_recomputed_forwards_only():
    import chainer

    import lowerset
    from chainer_ext import RecomputeHook, trace
    from chainer_ext_nets import assert_same, clone, make, step
    from examples.profile_executor import Meter, function_classes

    model, x, t, lossfn = make("resnet")
    with chainer.using_config("train", True):
        g = trace(lambda: lossfn(model, x, t))
        classes = function_classes(lossfn(model, x, t))
    s = lowerset.solve(g, model="paper", mode="memory")
    assert s.schedule.recomputed
    saved = {cls: cls.__dict__.get("forward") for cls in classes}
    ref = step(clone(model), x, t, lossfn)
    hook, meter = RecomputeHook(s), Meter()
    meter.wrap_callbacks(hook)
    with meter.recompute_forwards(classes):
        got = step(model, x, t, lossfn, hook)
        assert 0 < meter.forwards < meter.callbacks
    assert_same(ref, got)
    assert {cls: cls.__dict__.get("forward") for cls in classes} == saved


_FAULTS = """
import resource, sys
import numpy as np
from examples._machine import reuse_freed_memory
setting = reuse_freed_memory() if sys.argv[1] == "reuse" else "system"
a = np.ones(1 << 24)  # 128 MiB
del a
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
a = np.ones(1 << 24)
print(setting, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def test_reuse_freed_memory_hands_the_freed_block_out_again():
    """With the allocator steadied, a freed 128 MiB block is reused (no page faults); without,
    glibc returns it to the kernel and the next one faults its pages in again."""
    import subprocess
    import sys

    counts = {}
    for mode in ("reuse", "system"):
        out = subprocess.run([sys.executable, "-c", _FAULTS, mode], capture_output=True,
                             text=True, check=True, cwd=be.ROOT).stdout.split()
        if out[0] == "None":
            pytest.skip("glibc's mallopt is not available here")
        counts[mode] = int(out[-1])
    # a fault maps 4 KiB to 2 MiB depending on the kernel: 128 MiB is at least 64 faults
    assert counts["reuse"] < 16 and counts["system"] >= 64, counts


def test_markdown_says_when_the_rounds_are_not_recorded():
    info = {"cpu": "Test CPU", "logical_cores": 2, "python": "3.11", "omp_num_threads": None,
            "openblas_num_threads": None}
    assert "5 rounds round-robin per network; times are medians." in be.markdown([], info, 5)
    assert "Rounds of the round robin not recorded;" in be.markdown([], info, None)
