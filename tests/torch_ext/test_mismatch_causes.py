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
    """(model, x, plan keeping everything) traced in `training` mode, under CPU autocast to
    bfloat16 inside the step when `autocast`."""
    torch.manual_seed(0)
    model = Net().train(training)
    x = torch.randn(8, 16)
    graph = torch_ext.trace(lambda: _loss(model, x, autocast), model=model)
    return model, x, lowerset.CanonicalStrategy(graph, [set(graph.labels)], method="none")


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
        loaded = lowerset.CanonicalStrategy(graph, [set(graph.labels)], method="none")
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
    plan = lowerset.CanonicalStrategy(graph, [set(graph.labels)], method="none")
    with pytest.raises(StrategyMismatchError, match=r"aten.ones.default\) returned") as e:
        with RecomputeContext(plan):
            step(5).backward()
    assert e.value.__context__ is None
