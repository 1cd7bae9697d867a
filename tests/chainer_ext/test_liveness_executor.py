"""lowerset.simulate replays RecomputeHook: the same recomputations, and about the same memory."""

import tracemalloc

import pytest

chainer = pytest.importorskip("chainer")

import lowerset  # noqa: E402
from chainer_ext import RecomputeHook, trace  # noqa: E402
from examples._measure import BoundaryRecorder, boundary_sampling  # noqa: E402

from chainer_ext_nets import NETS, clone, make, step  # noqa: E402


def _strategies(g):
    return {"V": lowerset.CanonicalStrategy(g, [set(g.labels)]),
            "chen": lowerset.baselines.chen_sqrtn(g),
            "time": lowerset.solve(g, mode="time"),
            "memory": lowerset.solve(g, mode="memory"),
            "liveness": lowerset.solve_liveness(g, "approx", n_budgets=6)}


@pytest.mark.parametrize("name", sorted(NETS))
def test_simulation_matches_the_hook(name):
    batch = 256 if name in ("mlp", "dropout", "split") else 64
    model, x, t, lossfn = make(name, batch=batch)
    with chainer.using_config("train", True):
        g = trace(lambda: lossfn(model, x, t))
    lm = lowerset.LivenessModel(g)
    for key, s in _strategies(g).items():
        sim = lowerset.simulate(s, lm)
        hook = RecomputeHook(s)
        m = clone(model)
        rec = BoundaryRecorder("cpu", list(m.params()))
        tracemalloc.start()
        try:
            step(m, x, t, lossfn, boundary_sampling(rec, [hook]))
        finally:
            tracemalloc.stop()
        # nothing but the losses is left after the backward pass
        sinks = [i for i in range(g.n) if g.succs(i).size == 0]
        assert sim.final == int(lm.value_bytes[sinks].sum()), key
        # the same values recomputed, in the same order
        assert hook.last_iteration["recomputed"] == sim.recomputed, key
        # the measured boundary peak (numpy buffers plus a few KB of Python objects per function)
        # is the simulated one up to gradients the simulation counts as full arrays while
        # Chainer's backward returns views (broadcast, split), and workspace kept across a step
        measured = rec.peak_nonparam
        assert abs(measured - sim.boundary_peak) <= 0.25 * sim.boundary_peak + (256 << 10), \
            (key, measured, sim.boundary_peak)
