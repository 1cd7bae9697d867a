"""StrategyMismatchError names the likely cause of a step that differs from the traced one:
the model's train/eval mode, autocast, the dtype, device or shape of an input."""

import pytest

torch = pytest.importorskip("torch")

import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import lowerset  # noqa: E402
import torch_ext  # noqa: E402
from torch_ext import RecomputeContext, StrategyMismatchError  # noqa: E402


class Net(nn.Module):
    """Linear layers with dropout between them."""

    def __init__(self):
        super().__init__()
        self.l1, self.l2 = nn.Linear(16, 32), nn.Linear(32, 4)
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.l2(self.drop(torch.tanh(self.l1(x))))


def _setup(training=True, autocast=False):
    """(model, x, a plan that drops a value) traced in `training` mode, under CPU autocast to
    bfloat16 inside the step when `autocast`."""
    torch.manual_seed(0)
    model = Net().train(training)
    x = torch.randn(8, 16)
    graph = torch_ext.trace(lambda: _loss(model, x, autocast), model=model)
    return model, x, _dropping(graph)


def _dropping(graph):
    """A strategy that drops a value: the checks guard what a strategy drops (one that drops
    nothing runs the step as it is, unchecked). The first one-cut strategy that drops."""
    order = graph.facts.forward_order
    for c in range(1, graph.n):
        s = lowerset.CanonicalStrategy(graph, [{graph.labels[v] for v in order[:c]},
                                               set(graph.labels)])
        if any(e.kind == "drop" for e in s.schedule.events):
            return s
    raise LookupError("no one-cut strategy drops a value")


def _loss(model, x, autocast=False):
    if not autocast:   # (an autocast block with enabled=False would turn off one around it)
        return model(x).float().square().mean()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return model(x).float().square().mean()


def _run(plan, model, x, autocast=False, with_model=True):
    with RecomputeContext(plan, model=model if with_model else None):
        _loss(model, x, autocast).backward()


class TestMode:
    def test_a_step_in_train_mode_traced_in_eval_mode(self):
        model, x, plan = _setup(training=False)
        model.train()
        with pytest.raises(StrategyMismatchError, match=r"the model is in train mode; it was "
                           r"traced in eval mode: call model\.eval\(\) before the step"):
            _run(plan, model, x)

    def test_a_step_in_eval_mode_traced_in_train_mode(self):
        model, x, plan = _setup(training=True)
        model.eval()
        with pytest.raises(StrategyMismatchError, match=r"in eval mode; it was traced in train "
                           r"mode: call model\.train\(\)"):
            _run(plan, model, x)

    def test_a_submodule_in_another_mode(self):
        model, x, plan = _setup(training=True)
        model.drop.eval()
        with pytest.raises(StrategyMismatchError, match="module 'drop' of the model is in "
                           "another train/eval mode"):
            _run(plan, model, x)

    def test_without_the_model_the_message_lists_the_mode(self):
        model, x, plan = _setup(training=False)
        model.train()
        with pytest.raises(StrategyMismatchError, match=r"its train/eval mode \(pass model= "):
            _run(plan, model, x, with_model=False)

    def test_the_modes_survive_json(self, tmp_path):
        model, x, plan = _setup(training=False)
        assert plan.graph.attrs[0]["step"] == {"training": False, "other_mode": [],
                                               "autocast": None, "device": "cpu"}
        lowerset.save_graph(plan.graph, tmp_path / "g.json")
        graph = lowerset.load_graph(tmp_path / "g.json")
        loaded = _dropping(graph)
        model.train()
        with pytest.raises(StrategyMismatchError, match="in train mode; it was traced in eval"):
            _run(loaded, model, x)


class TestAutocast:
    def test_autocast_inside_the_step_where_the_trace_had_none(self):
        model, x, plan = _setup()
        with pytest.raises(StrategyMismatchError, match="casts to bfloat16 where the traced "
                           "step does not: autocast is on now"):
            _run(plan, model, x, autocast=True)

    def test_autocast_around_the_block_where_the_trace_had_none(self):
        model, x, plan = _setup()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            with pytest.raises(StrategyMismatchError, match=r"autocast is on \(bfloat16\); "
                               "the step was traced with autocast off"):
                _run(plan, model, x)

    def test_no_autocast_where_the_trace_had_it(self):
        model, x, plan = _setup(autocast=True)
        with pytest.raises(StrategyMismatchError, match="the trace ran under torch.autocast "
                           "and this step does not"):
            _run(plan, model, x)

    def test_the_same_autocast_runs(self):
        model, x, plan = _setup(autocast=True)
        _run(plan, model, x, autocast=True)
        assert model.l1.weight.grad is not None


class TestInputs:
    def test_another_dtype(self):
        model, x, plan = _setup()
        with pytest.raises(StrategyMismatchError, match="argument 1 is float64 where the traced "
                           "step had float32"):
            _run(plan, model, x.double())

    def test_another_device(self):
        model, x, plan = _setup()
        with pytest.raises(StrategyMismatchError, match="argument 1 is on meta where the traced "
                           "step had cpu"):
            _run(plan, model, torch.empty_like(x, device="meta"))

    def test_another_batch_shape(self):
        model, x, plan = _setup()
        with pytest.raises(StrategyMismatchError, match=r"argument 1 has shape \(4, 16\) where "
                           r"the traced step had \(8, 16\): another batch shape"):
            _run(plan, model, x[:4])

    def test_a_branch_names_no_cause(self):
        model, x, plan = _setup()
        with pytest.raises(StrategyMismatchError, match="a data-dependent branch took another "
                           "way"):
            with RecomputeContext(plan, model=model):
                F.gelu(model.l1(x)).sum().backward()


def test_the_first_difference_is_the_error_raised():
    """A step that differs inside a profiler's record_function block (DDP's forward runs in
    one): the block's exit, dispatched while the error unwinds, is not checked again, so the
    error names the first differing operation and hides nothing."""
    model = Net().train()

    def step(batch):
        with torch.autograd.profiler.record_function("block"):
            return _loss(model, torch.ones(batch, 16))
    graph = torch_ext.trace(lambda: step(8), model=model)
    plan = _dropping(graph)
    with pytest.raises(StrategyMismatchError, match=r"aten.ones.default\) returned") as e:
        with RecomputeContext(plan):
            step(5).backward()
    assert e.value.__context__ is None


class Branchy(nn.Module):
    """Two linear layers; `relu` picks the activation (a branch in the user's code)."""

    def __init__(self):
        super().__init__()
        self.l1, self.l2 = nn.Linear(16, 32), nn.Linear(32, 4)
        self.relu = False

    def forward(self, x):
        h = self.l1(x)  # line: l1
        h = torch.relu(h) if self.relu else torch.tanh(h)  # line: activation
        return self.l2(h)


def _line(tag):
    """The line of this file that ends with ``# line: tag``."""
    with open(__file__) as f:
        return next(i for i, text in enumerate(f, 1) if text.rstrip().endswith(f"# line: {tag}"))


def _branchy(debug=False, x=None):
    torch.manual_seed(0)
    model = Branchy()
    x = torch.randn(8, 16) if x is None else x
    graph = torch_ext.trace(lambda: model(x).square().mean(), model=model, debug=debug)
    return model, x, _dropping(graph)


def _mismatch(plan, model, step):
    with pytest.raises(StrategyMismatchError) as e:
        with RecomputeContext(plan, model=model):
            step().backward()
    return e.value


F32 = "float32"


def _t(*shape):
    return (shape, F32, "cpu")


class TestContext:
    """The operations around a mismatch: ``traced`` and ``actual`` (OpRecords) and the rows of
    the message, the traced step's above this step's."""

    def test_a_branch_shows_both_activations(self):
        model, x, plan = _branchy()
        model.relu = True
        e = _mismatch(plan, model, lambda: model(x).square().mean())
        assert (e.operation, e.position) == (2, 1)
        # operation 0 is aten.t of l1's weight: not a node, its shapes not traced
        assert [tuple(r) for r in e.traced] == [
            (0, "aten.t.default", None, None, None, None),
            (1, "aten.addmm.default", 0, (_t(32), _t(8, 16), _t(16, 32)), (_t(8, 32),), None),
            (2, "aten.tanh.default", 1, (_t(8, 32),), (_t(8, 32),), None)]
        assert [tuple(r[:5]) for r in e.actual] == [
            (0, "aten.t.default", None, (_t(32, 16),), None),
            (1, "aten.addmm.default", 0, (_t(32), _t(8, 16), _t(16, 32)), (_t(8, 32),)),
            (2, "aten.relu.default", None, (_t(8, 32),), None)]
        assert [r.where for r in e.actual[:2]] == [None, None]
        assert e.actual[2].where == (__file__, _line("activation"), "forward")
        text = str(e)
        assert "\n  >    2  traced  aten.tanh.default(float32[8, 32]) -> float32[8, 32]\n" in text
        assert ("\n          this    aten.relu.default(float32[8, 32])  at "
                f"{__file__}:{_line('activation')} in forward") in text

    def test_at_most_three_operations_before_the_difference(self):
        model, x, plan = _branchy()
        e = _mismatch(plan, model, lambda: model(x).abs().mean())
        assert e.operation == 5
        assert [r.index for r in e.traced] == [r.index for r in e.actual] == [2, 3, 4, 5]
        assert [r.op for r in e.traced] == ["aten.tanh.default", "aten.t.default",
                                            "aten.addmm.default", "aten.pow.Tensor_Scalar"]
        assert [r.op for r in e.actual] == ["aten.tanh.default", "aten.t.default",
                                            "aten.addmm.default", "aten.abs.default"]
        assert e.actual[1].inputs == (_t(4, 32),)   # l2's weight, as this step ran it
        assert e.traced[3][3:5] == ((_t(8, 4),), (_t(8, 4),))
        assert e.actual[3][2:5] == (None, (_t(8, 4),), None)

    def test_another_batch_shape_shows_both_shapes(self):
        model, x, plan = _branchy()
        half = x[:4].clone()
        e = _mismatch(plan, model, lambda: model(half).square().mean())
        assert (e.operation, e.position) == (1, 0)
        assert e.traced[1] == torch_ext.exceptions.OpRecord(
            1, "aten.addmm.default", 0, (_t(32), _t(8, 16), _t(16, 32)), (_t(8, 32),), None)
        assert e.actual[1][:5] == (1, "aten.addmm.default", None,
                                   (_t(32), _t(4, 16), _t(16, 32)), None)
        text = str(e)
        assert ("traced  aten.addmm.default(float32[32], float32[8, 16], float32[16, 32]) -> "
                "float32[8, 32]\n") in text
        assert "this    aten.addmm.default(float32[32], float32[4, 16], float32[16, 32])" in text

    def test_outputs_that_differ(self):
        """Operation 0 makes the batch in the step: its inputs match, its output does not."""
        torch.manual_seed(0)
        model = Branchy()
        graph = torch_ext.trace(lambda: model(torch.ones(8, 16)).sum(), model=model)
        plan = _dropping(graph)
        e = _mismatch(plan, model, lambda: model(torch.ones(5, 16)).sum())
        assert (e.operation, e.position) == (0, 0)
        assert [r.index for r in e.actual] == [r.index for r in e.traced] == [0]
        assert tuple(e.traced[0])[:5] == (0, "aten.ones.default", 0, (), (_t(8, 16),))
        assert tuple(e.actual[0])[:5] == (0, "aten.ones.default", 0, (), (_t(5, 16),))
        assert "this    aten.ones.default() -> float32[5, 16]" in str(e)

    def test_debug_names_the_traced_line(self):
        model, x, plan = _branchy(debug=True)
        model.relu = True
        e = _mismatch(plan, model, lambda: model(x).square().mean())
        l1, act = (__file__, _line("l1"), "forward"), (__file__, _line("activation"), "forward")
        # the innermost frame outside torch: the model's line, not nn.Linear's
        assert [r.where for r in e.traced] == [l1, l1, act]
        assert (f"  >    2  traced  aten.tanh.default(float32[8, 32]) -> float32[8, 32]  at "
                f"{__file__}:{act[1]} in forward\n") in str(e)
        assert plan.graph.attrs[0]["where"] == list(l1)
        assert plan.graph.attrs[0]["absorbed_where"] == [list(l1)]

    def test_debug_lines_survive_json(self, tmp_path):
        model, x, plan = _branchy(debug=True)
        lowerset.save_graph(plan.graph, tmp_path / "g.json")
        graph = lowerset.load_graph(tmp_path / "g.json")
        loaded = _dropping(graph)
        model.relu = True
        e = _mismatch(loaded, model, lambda: model(x).square().mean())
        assert e.traced[2].where == (__file__, _line("activation"), "forward")

    def test_without_debug_no_frame_is_recorded(self):
        model, x, plan = _branchy()
        assert not any(k.endswith("where") for v in plan.graph.labels
                       for k in plan.graph.attrs[v])
        model.relu = True
        e = _mismatch(plan, model, lambda: model(x).square().mean())
        assert [r.where for r in e.traced] == [None, None, None]
        assert str(e).count(f"{__file__}:") == 1   # this step's differing operation only

    def test_the_backward_pass_started_early(self):
        """The pre-hook of an autograd node calls _start_backward where the backward pass
        starts; called before the traced forward pass ended, it shows the traced operations
        that did not run."""
        model, x, plan = _branchy()
        ctx = RecomputeContext(plan, model=model)
        with pytest.raises(StrategyMismatchError, match="the backward pass started after 3 "
                           "of the 5 operations") as e:
            with ctx:
                model(x)
                ctx._start_backward()
        assert e.value.operation == 5
        assert [r.op for r in e.value.traced] == ["aten.tanh.default", "aten.t.default",
                                                  "aten.addmm.default", "aten.pow.Tensor_Scalar"]
        assert [r.index for r in e.value.actual] == [2, 3, 4]
        assert "          this    (the backward pass started)" in str(e.value)

    def test_a_mismatch_in_the_backward_order_has_no_context(self):
        err = StrategyMismatchError("message", position=3)
        assert (err.operation, err.traced, err.actual, str(err)) == (None, (), (), "message")
