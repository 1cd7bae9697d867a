"""trace(): the recorded graph G = (V, E), its T_v and M_v, and side-effect freedom."""

import pytest

chainer = pytest.importorskip("chainer")

import chainer.functions as F  # noqa: E402
import numpy as np  # noqa: E402

import lowerset  # noqa: E402
from chainer_ext import TraceError, TracedGraph, trace  # noqa: E402

from chainer_ext_nets import NETS, make, persistents  # noqa: E402


def _trace(name, **kw):
    model, x, t, lossfn = make(name)
    with chainer.using_config("train", True):
        g = trace(lambda: lossfn(model, x, t), **kw)
    return g, model, x, t, lossfn


def _by_function(g, name):
    return [v for v in g.labels if g.attrs[v]["function"] == name]


def test_mlp_nodes_edges_and_bytes():
    g, model, x, t, _ = _trace("mlp")
    assert isinstance(g, TracedGraph)
    # 6 x (Linear, ReLU), output Linear, softmax cross entropy
    assert g.n == 14
    assert [g.attrs[v]["function"] for v in range(g.n)] == (
        ["LinearFunction", "ReLU"] * 6 + ["LinearFunction", "SoftmaxCrossEntropy"])
    assert set(g.edges) == {(i, i + 1) for i in range(13)}
    assert g.param_bytes == sum(p.array.nbytes for p in model.params())
    assert g.input_bytes == x.nbytes + t.nbytes
    for v in _by_function(g, "ReLU"):
        assert g.memory[g.index[v]] == x.shape[0] * 256 * 4
    assert g.outputs == (13,)
    assert all(g.attrs[v]["backward"] for v in g.labels)


def test_retained_values_and_state():
    g, *_ = _trace("unet")
    relu = _by_function(g, "ReLU")[0]
    assert g.attrs[relu]["retained_outputs"] == [0]
    assert g.attrs[relu]["retained_inputs"] == []
    for name in ("Concat",):
        for v in _by_function(g, name):
            assert g.attrs[v]["retained_inputs"] == [] and g.attrs[v]["retained_outputs"] == []
    conv = _by_function(g, "Convolution2DFunction")[0]
    assert g.attrs[conv]["retained_inputs"] == [0, 1]
    pool = _by_function(g, "MaxPoolingND")[0]
    # max pooling keeps its argmax indexes for backward: counted in M_v
    assert g.attrs[pool]["state_bytes"] > 0
    assert g.memory[g.index[pool]] == g.attrs[pool]["output_bytes"] + g.attrs[pool]["state_bytes"]
    g1, *_ = _trace("unet", count_state=False)
    assert g1.memory[g1.index[pool]] == g1.attrs[pool]["output_bytes"]
    g2, *_ = _trace("resnet")
    add = _by_function(g2, "Add")[0]
    assert g2.attrs[add]["retained_inputs"] == [] and g2.attrs[add]["state_bytes"] == 0


def test_multi_output_function_is_one_node():
    g, *_ = _trace("split")
    splits = _by_function(g, "SplitAxis")
    assert len(splits) == 2
    for v in splits:
        a = g.attrs[v]
        assert len(a["outputs"]) == 2
        assert g.memory[g.index[v]] == a["output_bytes"]
        assert a["output_bytes"] == sum(int(np.prod(s)) * 4 for s, _ in a["outputs"])
        consumers = [w for (u, w) in g.edges if u == v]
        assert len(consumers) >= 2
        outs = {tuple(x[1:]) for w in consumers for x in g.attrs[w]["inputs"]
                if x[0] == "node" and x[1] == v}
        assert outs == {(v, 0), (v, 1)}


def test_two_summed_losses():
    g, *_ = _trace("twoheads")
    assert len(_by_function(g, "SoftmaxCrossEntropy")) == 2
    assert len(g.outputs) == 1
    assert all(g.attrs[v]["backward"] for v in g.labels)


def test_preset_cost_rule():
    g, *_ = _trace("unet")
    for v in g.labels:
        # the planner's rule (lowerset.paper_cost): names starting with "Conv"; the U-Net-like
        # test net's up-sampling Deconvolution2DFunction counts 1, as in the authors' cg files
        expected = 10 if g.attrs[v]["function"].startswith("Conv") else 1
        assert g.cost[g.index[v]] == expected
    assert g.cost_model == "preset" and g.time_unit is None


def test_profile_cost_model():
    g, *_ = _trace("resnet", cost_model="profile", repeats=3, time_unit=1e-6)
    assert g.cost_model == "profile"
    assert g.cost.dtype == np.int64 and (g.cost >= 1).all()
    conv = _by_function(g, "Convolution2DFunction")
    relu = _by_function(g, "ReLU")
    assert np.median(g.cost[[g.index[v] for v in conv]]) > np.median(
        g.cost[[g.index[v] for v in relu]])


def test_tracing_leaves_model_and_rng_unchanged():
    for name in ("resnet", "dropout"):
        model, x, t, lossfn = make(name)
        params = {k: p.array.copy() for k, p in model.namedparams()}
        grads = {k: None if p.grad is None else p.grad.copy() for k, p in model.namedparams()}
        stats = persistents(model)
        state = np.random.get_state()
        for cost_model in ("preset", "profile"):
            with chainer.using_config("train", True):
                trace(lambda: lossfn(model, x, t), cost_model=cost_model)
        for k, p in model.namedparams():
            assert p.array.tobytes() == params[k].tobytes()
            assert (p.grad is None) == (grads[k] is None)
            assert p.grad is None or p.grad.tobytes() == grads[k].tobytes()
        for k, v in persistents(model).items():
            assert v.tobytes() == stats[k].tobytes(), k
        after = np.random.get_state()
        assert after[0] == state[0] and (after[1] == state[1]).all() and after[2:] == state[2:]


def test_graph_is_plannable():
    for name in NETS:
        g, *_ = _trace(name)
        s = lowerset.solve(g, mode="memory")
        assert s.peak_memory <= lowerset.CanonicalStrategy(g, [set(g.labels)]).peak_memory


def test_no_backprop_functions_are_not_nodes():
    model, x, t, lossfn = make("mlp")

    def fn():
        with chainer.no_backprop_mode():
            x2 = F.identity(x)
        return lossfn(model, x2.array, t)
    g = trace(fn)
    assert g.n == 14


class TestErrors:
    def test_bad_arguments(self):
        with pytest.raises(ValueError, match="cost_model"):
            trace(lambda: None, cost_model="measured")
        with pytest.raises(ValueError, match="repeats"):
            trace(lambda: None, repeats=0)
        with pytest.raises(ValueError, match="time_unit"):
            trace(lambda: None, time_unit=0)

    def test_bad_return_value(self):
        model, x, t, lossfn = make("mlp")
        with pytest.raises(TraceError, match="must return a chainer.Variable"):
            trace(lambda: lossfn(model, x, t).array)

    def test_no_function(self):
        with pytest.raises(TraceError, match="applied no function"):
            trace(lambda: chainer.Variable(np.zeros(3, np.float32)))

    def test_output_not_computed_inside(self):
        v = chainer.Variable(np.ones(3, np.float32))
        with pytest.raises(TraceError, match="no function inside"):
            trace(lambda: (F.relu(v), v))
