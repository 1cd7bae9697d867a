"""RecomputeHook: bitwise equality with a plain run on CPU, errors, reuse after failures."""

import pytest

chainer = pytest.importorskip("chainer")

import chainer.functions as F  # noqa: E402
import numpy as np  # noqa: E402

import lowerset  # noqa: E402
from chainer_ext import HookUsageError, LivenessHook, RecomputeHook, StrategyMismatchError, trace  # noqa: E402
from chainer_ext_nets import NETS, assert_same, clone, make, persistents, step  # noqa: E402


def _trace(model, x, t, lossfn):
    with chainer.using_config("train", True):
        return trace(lambda: lossfn(model, x, t))


def _strategies(g):
    """exact/approx x time/memory, at the minimal and at a middle budget."""
    top = lowerset.CanonicalStrategy(g, [set(g.labels)]).peak_memory
    out = []
    for method in ("exact", "approx"):
        bmin = lowerset.min_budget(g, method=method)
        for budget in (bmin, (bmin + top) // 2):
            for mode in ("time", "memory"):
                out.append(lowerset.solve(g, budget=budget, mode=mode, method=method,
                                          model="paper"))
    return out


def _check_log(hook, s):
    log = hook.last_iteration
    rec = log["recomputed"]
    assert len(rec) == len(set(rec)), "a value was recomputed twice"
    assert set(rec) <= set(s.recomputed)
    assert set(log["discarded"]) <= set(s.recomputed)


# a function of each network that the strategies below must recompute at least once: Dropout
# (reuses its mask), BatchNormalization (no second update of running statistics), max pooling
# (argmax indexes), a multi-output function, a concatenation of skips
MUST_RECOMPUTE = {"mlp": "ReLU", "resnet": "BatchNormalization", "unet": "Concat",
                  "inception": "MaxPoolingND", "dropout": "Dropout", "split": "SplitAxis",
                  "twoheads": "BatchNormalization"}


@pytest.mark.parametrize("name", sorted(NETS))
def test_bitwise_equal_to_plain_run(name):
    model, x, t, lossfn = make(name)
    g = _trace(model, x, t, lossfn)
    ref = step(clone(model), x, t, lossfn)
    strategies = _strategies(g)
    recomputed = set()
    for s in strategies:
        hook = RecomputeHook(s)
        got = step(clone(model), x, t, lossfn, hook)
        assert_same(ref, got)
        _check_log(hook, s)
        recomputed |= {g.attrs[v]["function"] for v in hook.last_iteration["recomputed"]}
    assert MUST_RECOMPUTE[name] in recomputed, recomputed
    assert_same(ref, step(clone(model), x, t, lossfn, LivenessHook(g)))


@pytest.mark.parametrize("name", ["resnet", "dropout", "twoheads"])
def test_ten_optimizer_steps(name):
    model, x, t, lossfn = make(name)
    g = _trace(model, x, t, lossfn)
    hook = RecomputeHook(lowerset.solve(g, model="paper", mode="memory"))
    runs = []
    for h in (None, hook):
        m = clone(model)
        opt = chainer.optimizers.MomentumSGD(lr=0.01)
        opt.setup(m)
        for i in range(10):
            step(m, x, t, lossfn, h, seed=i)
            opt.update()
        runs.append({k: p.array.copy() for k, p in m.namedparams()})
        runs[-1].update(persistents(m))
    for k in runs[0]:
        assert runs[0][k].tobytes() == runs[1][k].tobytes(), k


def test_one_node_per_segment_and_single_segment():
    model, x, t, lossfn = make("resnet")
    g = _trace(model, x, t, lossfn)
    ref = step(clone(model), x, t, lossfn)
    # every node its own segment: nothing is dropped that would need recomputation twice
    chain = lowerset.CanonicalStrategy(g, [set(g.labels[:i + 1]) for i in range(g.n)])
    assert_same(ref, step(clone(model), x, t, lossfn, RecomputeHook(chain)))
    # the one-segment strategy [V] recomputes nothing
    hook = RecomputeHook(lowerset.CanonicalStrategy(g, [set(g.labels)]))
    assert_same(ref, step(clone(model), x, t, lossfn, hook))
    assert hook.last_iteration["recomputed"] == []


def test_liveness_frees_values_during_backward():
    model, x, t, lossfn = make("mlp")
    g = _trace(model, x, t, lossfn)
    hook = LivenessHook(g)
    step(clone(model), x, t, lossfn, hook)
    assert hook.last_iteration["freed"]
    assert hook.last_iteration["recomputed"] == []


class TestErrors:
    def _setup(self):
        model, x, t, lossfn = make("resnet")
        g = _trace(model, x, t, lossfn)
        return model, x, t, lossfn, lowerset.solve(g, model="paper", mode="memory")

    def test_other_batch_size(self):
        model, x, t, lossfn, s = self._setup()
        hook = RecomputeHook(s)
        with pytest.raises(StrategyMismatchError, match=r"function 0 .*batch size") as e:
            step(model, x[:4], t[:4], lossfn, hook)
        assert e.value.position == 0
        assert hook.last_iteration["discarded"] == []

    def test_other_model(self):
        model, x, t, lossfn, s = self._setup()
        other, x2, t2, lossfn2 = make("unet")
        with pytest.raises(StrategyMismatchError, match="function 0"):
            step(other, x2, t2, lossfn2, RecomputeHook(s))

    def test_forward_changes_between_iterations(self):
        model, x, t, lossfn, s = self._setup()
        hook = RecomputeHook(s)

        def changed(m, x, t):
            return F.softmax_cross_entropy(m(x) * 2, t)
        with pytest.raises(StrategyMismatchError, match="MulConstant|beyond|Softmax") as e:
            step(model, x, t, changed, hook)
        assert e.value.position is not None
        # the hook and the model are still usable
        ref = step(clone(model), x, t, lossfn)
        assert_same(ref, step(model, x, t, lossfn, hook))

    def test_exception_inside_forward_leaves_hook_reusable(self):
        model, x, t, lossfn, s = self._setup()
        hook = RecomputeHook(s)
        ref = step(clone(model), x, t, lossfn)
        m = clone(model)

        def failing(m, x, t):
            m(x)
            raise KeyError("boom")
        with pytest.raises(KeyError, match="boom"):
            step(m, x, t, failing, hook)
        assert chainer.get_function_hooks() == {}
        # the failed forward updated BN statistics as a plain failed forward would; compare
        # against a plain model that went through the same failure
        m_ref = clone(model)
        with pytest.raises(KeyError):
            step(m_ref, x, t, failing)
        assert_same(step(m_ref, x, t, lossfn), step(m, x, t, lossfn, hook))
        del ref

    def test_nested_hooks(self):
        model, x, t, lossfn, s = self._setup()
        h1, h2 = RecomputeHook(s), RecomputeHook(s, name="other")
        with h1:
            with pytest.raises(HookUsageError, match="nested"):
                with h2:
                    pass
        assert chainer.get_function_hooks() == {}

    def test_strategy_not_from_trace(self):
        g = lowerset.Graph.chain(3)
        with pytest.raises(StrategyMismatchError, match="not recorded by chainer_ext.trace"):
            RecomputeHook(lowerset.solve(g, model="paper"))
        with pytest.raises(TypeError, match="CanonicalStrategy"):
            RecomputeHook("plan")
        with pytest.raises(TypeError, match="graph="):
            RecomputeHook(None)

    def test_strategy_from_json_needs_traced_graph(self):
        model, x, t, lossfn, s = self._setup()
        loaded = lowerset.CanonicalStrategy.from_dict(s.to_dict())
        with pytest.raises(StrategyMismatchError):
            RecomputeHook(loaded)
        again = lowerset.CanonicalStrategy.from_dict(s.to_dict(), graph=s.graph)
        ref = step(clone(model), x, t, lossfn)
        assert_same(ref, step(clone(model), x, t, lossfn, RecomputeHook(again)))

    def test_local_registration_rejected(self):
        model, x, t, lossfn, s = self._setup()
        f = F.ReLU() if hasattr(F, "ReLU") else chainer.functions.activation.relu.ReLU()
        with pytest.raises(HookUsageError, match="globally"):
            f.add_hook(RecomputeHook(s))


def test_backward_outside_the_block_still_works():
    model, x, t, lossfn = make("resnet")
    g = _trace(model, x, t, lossfn)
    ref = step(clone(model), x, t, lossfn)
    m = clone(model)
    m.cleargrads()
    np.random.seed(123)
    hook = RecomputeHook(lowerset.solve(g, model="paper", mode="memory"))
    with chainer.using_config("train", True):
        with hook:
            loss = lossfn(m, x, t)
        loss.backward()
    assert hook.last_iteration["discarded"]
    assert loss.array.tobytes() == ref[0].tobytes()
    for k, p in m.namedparams():
        assert p.grad.tobytes() == ref[1][k].tobytes(), k


def test_partly_no_backprop_forward():
    model, x, t, lossfn = make("mlp")

    def partly(m, x, t):
        with chainer.no_backprop_mode():
            x2 = F.tanh(x)
        return lossfn(m, x2.array * 1, t)
    g = _trace(model, x, t, partly)
    assert g.n == 14
    ref = step(clone(model), x, t, partly)
    for mode in ("time", "memory"):
        hook = RecomputeHook(lowerset.solve(g, model="paper", mode=mode))
        assert_same(ref, step(clone(model), x, t, partly, hook))
        assert hook.last_iteration["recomputed"]


def test_hook_state_is_released_after_the_block():
    model, x, t, lossfn = make("resnet")
    g = _trace(model, x, t, lossfn)
    hook = RecomputeHook(lowerset.solve(g, model="paper", mode="memory"))
    step(clone(model), x, t, lossfn, hook)
    # no per-iteration reference (function nodes, cached boundary values, inputs) survives
    assert all(f is None for f in hook._funcs)
    assert hook._held == {} and hook._ext == {} and hook._func_pos == {}
