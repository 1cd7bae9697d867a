"""Measured peak memory: PeakMemoryHook / peak_memory, and the hook's savings on every net."""

import io
import tracemalloc

import pytest

chainer = pytest.importorskip("chainer")

import numpy as np  # noqa: E402

import lowerset  # noqa: E402
from chainer_ext import PeakMemoryHook, RecomputeHook, peak_memory, trace  # noqa: E402

from chainer_ext_nets import NETS, clone, make, step  # noqa: E402


def test_peak_memory_hook_counts_numpy_arrays():
    with PeakMemoryHook() as h:
        a = np.ones(1 << 18)  # 2 MiB
        del a
        b = np.ones(1 << 16)  # 512 KiB
    assert 2 << 20 <= h.total_peak() < (2 << 20) + (256 << 10)
    assert h.summary() == {"device": "cpu", "peak": h.total_peak()}
    out = io.StringIO()
    h.print_report(out)
    assert "bytes (cpu)" in out.getvalue()
    del b


def test_peak_memory_reports_parameters_apart():
    model, x, t, lossfn = make("mlp")
    r = peak_memory(lambda: step(model, x, t, lossfn), params=model)
    nbytes = sum(p.array.nbytes for p in model.params())
    assert r.device == "cpu"
    assert r.param_bytes == nbytes
    assert r.param_grad_bytes == nbytes and r.new_grad_bytes == nbytes
    assert r.peak >= r.new_grad_bytes
    assert r.summary()["peak_without_grads"] == r.peak - nbytes


def test_errors():
    with pytest.raises(ValueError, match="device"):
        PeakMemoryHook("tpu")
    tracemalloc.start()
    try:
        with pytest.raises(RuntimeError, match="already tracing"):
            with PeakMemoryHook():
                pass
    finally:
        tracemalloc.stop()
    assert chainer.get_function_hooks() == {}


@pytest.mark.parametrize("name", sorted(NETS))
def test_hook_at_min_budget_uses_less_memory_than_plain(name):
    batch = 128 if name in ("mlp", "dropout", "split") else 16
    model, x, t, lossfn = make(name, batch=batch)
    with chainer.using_config("train", True):
        g = trace(lambda: lossfn(model, x, t))
    peaks = {}
    for label, hook in [("plain", None),
                        ("time", RecomputeHook(lowerset.solve(g, mode="time"))),
                        ("memory", RecomputeHook(lowerset.solve(g, mode="memory")))]:
        m = clone(model)
        peaks[label] = peak_memory(lambda: step(m, x, t, lossfn, hook), params=m).peak
    assert peaks["time"] < peaks["plain"], peaks
    assert peaks["memory"] < peaks["plain"], peaks
