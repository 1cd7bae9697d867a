"""measure_timeline: samples at the schedule's events, against the schedule's own timeline."""

import pytest

pytest.importorskip("chainer_ext")
chainer = pytest.importorskip("chainer")

import numpy as np  # noqa: E402

import lowerset  # noqa: E402
from chainer_ext import measure_timeline, trace  # noqa: E402
from chainer_ext_nets import make  # noqa: E402


@pytest.mark.parametrize("hooked", [False, True])
def test_samples_follow_the_schedule(hooked):
    model, x, t, lossfn = make("resnet", batch=16)

    def loss():
        with chainer.using_config("train", True):
            return lossfn(model, x, t)

    g = trace(loss)
    plan = lowerset.min_peak(g, "approx") if hooked else g
    sched = lowerset.schedule(plan)
    m = measure_timeline(loss, plan, params=model)
    kinds = [sched.events[i].kind for i in m.index]
    assert kinds.count("forward") == g.n
    assert kinds.count("backward") == len(g.facts.backward_order)
    assert np.all(np.diff(m.index) > 0)
    # after each sampled event the measured level is the schedule's, within 10% of the peak
    # (see the module docstring of chainer_ext.timeline), and on average within 3%
    gap = np.abs(m.bytes - sched.timeline[m.index])
    assert gap.max() <= 0.10 * sched.peak and gap.mean() <= 0.03 * sched.peak
    assert abs(m.peak - sched.peak) <= 0.05 * sched.peak


def test_errors():
    with pytest.raises(TypeError,
                       match="CanonicalStrategy, a lowerset.DropSetStrategy or a lowerset.Graph"):
        measure_timeline(lambda: None, "plan")
