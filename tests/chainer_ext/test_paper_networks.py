"""The paper's seven networks under RecomputeHook: the hook executes the schedule, event by event.

For each network of ``examples/models`` at a small size (batch 1, PSPNet 2; the Figure 4 CPU
preset's resolutions), every strategy of Table 1 (``examples/reproduce_table1.STRATEGIES``: Chen's
sqrt(n), the paper's four at their minimal eq. (2) budget, the least whole-step peak and the
least activation peak) runs one training step under ``RecomputeHook(record=True)``. The events
the hook executed must equal ``lowerset.schedule(strategy).events`` (kind, node, bytes and
outputs of each), and the loss, every parameter gradient and every BatchNormalization
statistic must be bitwise equal to a plain step from the same state and random seed.
"""

import pytest

chainer = pytest.importorskip("chainer")

import lowerset  # noqa: E402
from chainer_ext import RecomputeHook, trace  # noqa: E402
from chainer_ext_nets import assert_same, clone, step  # noqa: E402
from examples import reproduce_table1 as rt  # noqa: E402
from examples.models import NETWORKS  # noqa: E402

#: Input side per network: the smallest the Figure 4 CPU preset runs (VGG19's fully connected
#: head and GoogLeNet's average poolings need 224x224; U-Net's crops need 188x188 or more).
SIZES = {"pspnet": 97, "unet": 188, "resnet50": 64, "resnet152": 64, "vgg19": 224,
         "densenet161": 64, "googlenet": 224}
#: Batch per network: PSPNet's pyramid pools a branch to 1x1, where BatchNormalization needs
#: two samples.
BATCH = {"pspnet": 2}


@pytest.mark.parametrize("name", sorted(SIZES))
def test_every_table1_strategy_runs_its_schedule(name):
    net = NETWORKS[name]
    size = (SIZES[name], SIZES[name])
    model = net.build(size)
    x, t = net.make_batch(BATCH.get(name, 1), size)
    with chainer.using_config("train", True):
        g = trace(lambda: net.loss(model, x, t))
    ref = step(clone(model), x, t, net.loss)
    recomputes = {}
    for key, (label, spec) in rt.STRATEGIES.items():
        if spec is None:
            continue  # Vanilla: plain Chainer, no hook
        s, _, note = rt.plan(g, key, time_limit=None)
        assert note is None and isinstance(s, lowerset.CanonicalStrategy), label
        hook = RecomputeHook(s, record=True)
        assert_same(ref, step(clone(model), x, t, net.loss, hook))
        assert hook.events == list(s.schedule.events), f"{name}: {label}"
        recomputes[key] = bool(hook.last_iteration["recomputed"])
    # not a vacuous check: Chen's and the paper's four recompute (the least whole-step peak
    # may need no recomputation where parameters and workspace set it)
    assert all(recomputes[k] for k in ("chen", "approx-mc", "approx-tc", "exact-mc",
                                       "exact-tc")), recomputes
