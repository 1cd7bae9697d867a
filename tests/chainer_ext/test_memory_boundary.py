"""peak_memory's boundary peak (the README's Table 1 columns) on nets whose bytes add up by hand.

The arrays are S = 1 MiB each (the convolution's image: 256 KiB); what else tracemalloc counts
(Variables, FunctionNodes, tuples: a few kilobytes per function) stays under TOL. Each step runs
once before it is measured, so lazy imports and caches of a first call are not counted.
"""

import pytest

chainer = pytest.importorskip("chainer")

import chainer.functions as F  # noqa: E402
import chainer.links as L  # noqa: E402
import numpy as np  # noqa: E402

import lowerset  # noqa: E402
from chainer_ext import MemoryReport, PeakMemoryHook, RecomputeHook, peak_memory, trace  # noqa: E402

N = 1 << 18
S = 4 * N  # bytes of one float32 array of N elements
TOL = 64 << 10  # Python objects of the step


def _measured(step, **kw):
    step()  # first call: lazy imports, caches
    return peak_memory(step, **kw)


def _param():
    return chainer.Parameter(np.ones(N, dtype=np.float32))


def test_boundary_peak_and_non_param_peak_by_hand():
    """w -> MulConstant -> a0 -> Sin -> a1 -> Sum.

    Sin retains its input a0 until the step's graph dies. Forward: a0 + a1 = 2S at Sin's
    forward_postprocess (a1 dies after Sum). Backward: Sum's gradient is a broadcast view of a
    scalar (no buffer), Sin's backward makes g0 (S), MulConstant's makes w's gradient (S): at its
    backward_postprocess a0 + g0 + grad w = 3S, and 3S - S without the gradient (as much as at
    Sin's forward_postprocess). MulConstant does not retain w, so the hooks receive None for it:
    the parameter is found by its node.
    """
    w = _param()

    def step():
        w.cleargrad()
        F.sum(F.sin(w * 2.0)).backward()

    r = _measured(step, params=[w])
    assert 3 * S <= r.boundary_peak <= 3 * S + TOL, r
    assert 2 * S <= r.boundary_peak_without_grads <= 2 * S + TOL, r
    assert abs(r.boundary_peak_without_grads - (r.boundary_peak - w.array.nbytes)) <= TOL
    assert r.boundary_peak <= r.peak <= 3 * S + TOL
    assert r.boundary_samples == 3 * 4 * 2  # 3 functions x 4 callbacks x 2 samplers
    assert r.param_bytes == r.param_grad_bytes == S and r.unwrapped_hooks == ()


def test_without_params_nothing_is_subtracted():
    w = _param()

    def step():
        w.cleargrad()
        F.sum(F.sin(w * 2.0)).backward()

    r = _measured(step)
    assert r.boundary_peak_without_grads == r.boundary_peak and r.param_bytes == 0


def test_boundary_peak_leaves_out_im2col():
    """A 3x3 convolution (pad 1, one channel) of an X-byte image: inside its forward the im2col
    buffer (9X) and the output (X) coexist; at every boundary at most the output y (X) and w's
    gradient (36 bytes) are alive (the image predates the call; Sum does not retain y)."""
    conv = L.Convolution2D(1, 1, 3, pad=1, nobias=True)
    x = np.ones((1, 1, 256, 256), dtype=np.float32)
    X = x.nbytes

    def step():
        conv.cleargrads()
        F.sum(conv(x)).backward()

    r = _measured(step, params=conv)
    assert r.peak >= 10 * X
    assert X <= r.boundary_peak <= X + TOL
    assert r.boundary_peak <= r.peak


def _sin_chain(w, k=6):
    """``sum(sin(...sin(w * 1.0)))`` with k Sin functions; each retains its input."""
    h = w * 1.0
    for _ in range(k):
        h = F.sin(h)
    return F.sum(h)


def test_recompute_hook_lowers_the_boundary_peak_by_hand():
    """Values: a0 = MulConstant(w), a_i = Sin_i(a_{i-1}) (i = 1..6); Sin_i retains a_{i-1}.

    Plain: a0..a5 stay retained (6S); at Sin_5's backward_postprocess its gradients in and out
    are alive too: 8S. Strategy [{0..3}, V]: the hook drops a0, a1, a2 in the forward pass and
    recomputes them in Sin_3's backward_preprocess, where g3 is alive; Sin_3's backward adds
    g2: 5S at its backward_postprocess, sampled *before* the hook frees a2 (4S after). A
    sampler that ran only after the hook would miss it.
    """
    w = _param()
    g = trace(lambda: _sin_chain(w))
    order = list(g.labels)  # MulConstant, Sin x 6, Sum
    hook = RecomputeHook(lowerset.CanonicalStrategy(g, [order[:4], order]))

    def step():
        w.cleargrad()
        _sin_chain(w).backward()

    plain = _measured(step, params=[w])
    hooked = _measured(step, params=[w], hooks=[hook])
    assert sorted(hook.last_iteration["recomputed"]) == order[:3]
    assert 8 * S <= plain.boundary_peak <= 8 * S + TOL, plain
    assert 5 * S <= hooked.boundary_peak <= 5 * S + TOL, hooked
    assert hooked.boundary_peak <= hooked.peak and hooked.unwrapped_hooks == ()
    assert chainer.get_function_hooks() == {}


class _Stage(chainer.FunctionHook):
    """Holds an S-byte buffer from each forward_postprocess of the forward pass to the next
    pre-process callback."""

    name = "Stage"

    def __enter__(self):
        self.buf, self.backward = None, False
        return super().__enter__()

    def forward_preprocess(self, function, in_data):
        self.buf = None

    def forward_postprocess(self, function, in_data):
        if not self.backward:
            self.buf = np.ones(N, dtype=np.float32)

    def backward_preprocess(self, function, in_data, out_grad):
        self.buf, self.backward = None, True


def test_boundary_samples_after_the_hooks_too():
    """MulConstants retain nothing. At the second one's forward_postprocess its input a0 (still
    bound to `h`) and output a1 are alive, 2S; the hook then adds its buffer: 3S, seen only by
    the sampler *after* the hook (before the next callback, ``h = ...`` frees a0). Backward:
    at most one gradient in flight and w's gradient, 2S."""
    w = _param()

    def step():
        w.cleargrad()
        h = w * 2.0
        h = h * 2.0
        loss = F.sum(h)
        del h
        loss.backward()

    plain = _measured(step, params=[w])
    staged = _measured(step, params=[w], hooks=_Stage())
    assert 2 * S <= plain.boundary_peak <= 2 * S + TOL, plain
    assert 3 * S <= staged.boundary_peak <= 3 * S + TOL, staged
    assert staged.unwrapped_hooks == ()


def test_hooks_outside_the_samplers_are_reported():
    w = _param()
    g = trace(lambda: _sin_chain(w))
    order = list(g.labels)
    hook = RecomputeHook(lowerset.CanonicalStrategy(g, [order[:4], order]))

    def step(inside=False):
        w.cleargrad()
        if inside:
            with hook:
                _sin_chain(w).backward()
        else:
            _sin_chain(w).backward()

    assert _measured(lambda: step(True), params=[w]).unwrapped_hooks == ("RecomputeHook",)
    with hook:
        r = _measured(step, params=[w])
    assert r.unwrapped_hooks == ("RecomputeHook",)
    assert r.boundary_peak < 5 * S  # only sampled after the hook: misses Sin_3's 5S
    assert _measured(step, params=[w], hooks=hook).unwrapped_hooks == ()


def test_hooks_argument_errors():
    with pytest.raises(TypeError, match="FunctionHook"):
        peak_memory(lambda: None, hooks=[object()])
    with pytest.raises(TypeError, match="FunctionHook"):
        peak_memory(lambda: None, hooks=L.Linear(2, 2))
    assert chainer.get_function_hooks() == {}


def test_table1_columns():
    r = MemoryReport(device="cpu", peak=100, param_bytes=40, param_grad_bytes=40,
                     new_grad_bytes=40, boundary_peak=90, boundary_peak_without_grads=60)
    assert r.table1_columns(input_bytes=7) == {
        "total_peak": 147, "nonparam_peak": 67, "total_boundary_peak": 137,
        "nonparam_boundary_peak": 67}
    assert r.table1_columns()["total_peak"] == 140
    assert r.summary()["boundary_peak"] == 90


def test_sampling_adds_nothing_to_the_peak():
    """Samplers that allocated a few bytes per sample and kept them would add them up over 800
    samples; peak_memory's peak stays within 1 KiB of PeakMemoryHook's on the same step."""
    w = chainer.Parameter(np.ones(256, dtype=np.float32))

    def step():
        w.cleargrad()
        _sin_chain(w, k=100).backward()

    step()
    for _ in range(3):
        with PeakMemoryHook() as h:
            step()
        r = peak_memory(step, params=[w])
        assert r.boundary_samples == 102 * 4 * 2
        assert abs(r.peak - h.total_peak()) <= 1024, (r.peak, h.total_peak())


class _ConvNet(chainer.Chain):
    def __init__(self):
        super().__init__()
        with self.init_scope():
            self.c1 = L.Convolution2D(1, 4, 3, pad=1)
            self.c2 = L.Convolution2D(4, 4, 3, pad=1)
            self.c3 = L.Convolution2D(4, 1, 3, pad=1)

    def forward(self, x):
        return F.sum(self.c3(F.relu(self.c2(F.relu(self.c1(x))))))


@pytest.mark.parametrize("plan", ["plain", "min_activations"])
def test_activation_facts_predict_the_non_param_boundary_peak(plan):
    """The schedule over lowerset.activation_facts (no parameters, no parameter gradients, no
    im2col workspace) is the non-parameter boundary peak that peak_memory measures (the input
    batch predates the step's baseline), plain and under the plan of least activation peak;
    the whole-step schedule is the whole peak."""
    net = _ConvNet()
    x = np.ones((1, 1, 256, 256), dtype=np.float32)
    g = trace(lambda: net(x))
    view = g.with_facts(lowerset.activation_facts(g.facts))
    if plan == "plain":
        hooks, predicted, whole = [], lowerset.schedule(view).peak, lowerset.schedule(g).peak
    else:
        s = lowerset.min_peak(g, measure="activations")
        assert s.schedule.recompute_cost > 0
        hooks = [RecomputeHook(s)]
        predicted = lowerset.schedule(lowerset.CanonicalStrategy(view, s.lower_sets)).peak
        whole = s.schedule.peak

    def step():
        net.cleargrads()
        net(x).backward()

    r = _measured(step, params=net, hooks=hooks)
    assert abs(predicted - x.nbytes - r.boundary_peak_without_grads) <= TOL, (predicted, r)
    assert abs(whole - g.facts.resident - r.peak) <= TOL, (whole, r)


def test_own_bytes_counts_the_blocks_allocated_after_it_starts():
    """The GPU meters' count (chainer_ext._backend.OwnBytes), by hand: a block that existed
    before counting started lowers nothing when it is freed, as with tracemalloc."""
    from chainer_ext._backend import OwnBytes
    c = OwnBytes()
    c.freed(0xA0)                      # allocated before counting started
    assert (c.current, c.peak) == (0, 0)
    c.allocated(0xB0, 512)
    c.allocated(0xC0, 1024)
    c.freed(0xB0)
    assert (c.current, c.peak) == (1024, 1536)
    c.reset_peak()
    c.allocated(0xB0, 512)             # the pool hands the block out again
    assert (c.current, c.peak) == (1536, 1536)
    c.freed(0xB0), c.freed(0xC0), c.freed(0xC0)
    assert (c.current, c.peak) == (0, 1536)


def test_arrays_made_before_the_step_and_freed_in_it_lower_nothing():
    """A step that drops an array made before it (the previous step's gradients) and then
    allocates as much measures what it allocates, not 0."""
    held = [np.ones(N, dtype=np.float32)]

    def step():
        held.pop()
        held.append(np.ones(N, dtype=np.float32))

    r = peak_memory(step)
    assert S <= r.peak <= S + TOL


def test_a_gpu_boundary_recorder_needs_the_meters_reader():
    from chainer_ext._boundary import BoundaryRecorder
    with pytest.raises(ValueError, match="needs `read`"):
        BoundaryRecorder("gpu")
    with pytest.raises(ValueError, match="'tpu'"):
        BoundaryRecorder("tpu")
    r = BoundaryRecorder("gpu", read=iter([5, 12]).__next__)
    r.sample()
    assert (r.base, r.peak) == (5, 7)
