"""The whole-step prediction on random networks (``net_strategies.programs``): the plain step,
the least peak and three budgets between it and the plain step's peak, each on a fresh model's
first step (its lazily sized links made inside it) and on its second step, measured within 1%
(or 256 KiB) of the schedule's peak."""

import copy
import gc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

chainer = pytest.importorskip("chainer")

import lowerset  # noqa: E402
from chainer_ext import RecomputeHook, peak_memory, trace  # noqa: E402

from net_strategies import ProgramNet, batch_of, programs  # noqa: E402
from strategies import examples  # noqa: E402

TOLERANCE, SLACK = 0.01, 256 << 10


def plans(g):
    """The plain step (the graph), ``min_peak`` and ``solve`` at a quarter, half and three
    quarters of the way from the least peak to the plain step's."""
    least = lowerset.min_peak(g)
    plain, low = lowerset.schedule(g).peak, least.schedule.peak
    out = {"plain": g, "min_peak": least}
    for frac in (0.25, 0.5, 0.75):
        out[f"budget {frac}"] = lowerset.solve(g, budget=int(low + frac * (plain - low)))
    return out


def whole_step_peaks(model, x, t, plan, steps=2):
    """Measured whole-step peaks (bytes) of `steps` steps of `model` under `plan`: the peak
    above the start of each step, plus the parameters that existed before it and the batch."""
    hook = None if isinstance(plan, lowerset.Graph) else RecomputeHook(plan)

    def run():
        model.cleargrads()
        with chainer.using_config("train", True):
            if hook is None:
                model(x, t).backward()
            else:
                with hook:
                    model(x, t).backward()
    out = []
    for _ in range(steps):
        gc.collect()
        r = peak_memory(run, params=model)
        out.append(r.table1_columns(input_bytes=x.nbytes + t.nbytes)["total_peak"])
    return out


@settings(max_examples=examples(0.1), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(program=programs())
def test_whole_step_prediction_on_random_networks(program):
    batch, size, ops = program
    x, t = batch_of(batch, size)
    np.random.seed(0)
    fresh = ProgramNet(ops)                  # lazily sized links not made yet
    traced = copy.deepcopy(fresh)
    with chainer.using_config("train", True):
        g = trace(lambda: traced(x, t))
    for name, plan in plans(g).items():
        predicted = lowerset.schedule(plan).peak
        for i, measured in enumerate(whole_step_peaks(copy.deepcopy(fresh), x, t, plan)):
            assert abs(measured - predicted) <= TOLERANCE * measured + SLACK, (
                name, f"step {i + 1}", measured, predicted)
