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


def test_a_fresh_lazily_sized_model_is_measured_with_its_new_weights():
    """A model whose gradients were never set (no cleargrads) and whose first link is sized in
    the step: no gradient counts as none, and the weights the link makes are the step's."""
    import chainer.functions as F
    import chainer.links as L
    model = chainer.ChainList(L.Linear(None, 64), L.Linear(64, 10))
    x, t = np.ones((8, 32), np.float32), np.zeros(8, np.int32)

    def step():
        F.softmax_cross_entropy(model[1](F.relu(model[0](x))), t).backward()
    r = peak_memory(step, params=model)
    made = 64 * 32 * 4                                   # model[0].W, made in the step
    before = 64 * 4 + (10 * 64 + 10) * 4                 # model[0].b, model[1].W and b
    assert (r.new_param_bytes, r.param_bytes) == (made, before)
    assert r.param_grad_bytes == made + before           # every parameter got a gradient
    # model[1]'s gradients exist before the step (Chainer fills them with NaN), but the
    # backward adds into them by making new arrays: every gradient array is the step's
    assert r.new_grad_bytes == made + before
    assert r.peak >= made + r.new_grad_bytes
    cols = r.table1_columns(input_bytes=x.nbytes + t.nbytes)
    assert cols["total_peak"] == r.peak + before + x.nbytes + t.nbytes
    assert cols["nonparam_peak"] == r.peak - r.param_grad_bytes - made + x.nbytes + t.nbytes


def test_new_gradient_in_a_freed_one_s_place_counts_as_new():
    # the step frees each old gradient before making the new one, so CPython may give the new
    # array the freed one's id; it is still a new gradient
    p = chainer.Parameter(np.ones(1000, dtype=np.float32))
    p.grad = np.ones(1000, dtype=np.float32)

    def step():
        for _ in range(3):
            p.grad = None
            p.grad = np.zeros(1000, dtype=np.float32)

    assert peak_memory(step, params=[p]).new_grad_bytes == 4000
    assert peak_memory(lambda: None, params=[p]).new_grad_bytes == 0  # the same array: not new


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
                        ("time", RecomputeHook(lowerset.solve(g, model="paper", mode="time"))),
                        ("memory",
                         RecomputeHook(lowerset.solve(g, model="paper", mode="memory")))]:
        m = clone(model)
        peaks[label] = peak_memory(lambda: step(m, x, t, lossfn, hook), params=m).peak
    assert peaks["time"] < peaks["plain"], peaks
    assert peaks["memory"] < peaks["plain"], peaks


def test_recomputation_frees_intermediates_nobody_keeps():
    """Recomputing a segment frees each value after its last use there, when backward keeps none.

    A chain of MulConstant functions retains nothing for backward; the Sin after it retains its
    input. The Sin's backward needs that input, so the whole chain is recomputed; a plain run
    holds about two of its arrays at a time, and so must the recomputation.
    """
    n_funcs, size = 10, 1 << 18  # ten MulConstant functions on 1 MiB float32 arrays
    w = chainer.Parameter(np.ones(size, dtype=np.float32))

    def loss():
        h = w * 1.5
        for _ in range(n_funcs - 1):
            h = h * 1.01
        return chainer.functions.sum(chainer.functions.sin(h))

    g = trace(loss)
    order = list(g.labels)  # MulConstant x n_funcs, Sin, Sum
    # segment 2: the MulConstants after the first, and the Sin (its boundary)
    strategy = lowerset.CanonicalStrategy(g, [order[:1], order[:n_funcs + 1], order])
    hook = RecomputeHook(strategy)

    def run(h):
        w.cleargrad()
        if h is None:
            loss().backward()
        else:
            with h:
                loss().backward()

    plain = peak_memory(lambda: run(None)).peak
    hooked = peak_memory(lambda: run(hook)).peak
    assert sorted(hook.last_iteration["recomputed"]) == order[1:n_funcs]
    # holding every recomputed value at once would cost about (n_funcs - 3) MiB more
    assert hooked <= plain + 2 * size * 4, (plain, hooked)
