"""FSDP2 (``fully_shard``) in the schedule: the trace measures what FSDP2 holds outside the
traced operations (ExecutionFacts.outside_forward, outside_backward), and every plan's
prediction then meets its measured peak, in one gloo process (world size 1: FSDP2 gathers and
reduces by copies, so nothing depends on a collective's timing; two processes:
test_train_distributed.py)."""

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("needs torch.distributed with gloo", allow_module_level=True)

import dataclasses  # noqa: E402

import torch.nn.functional as F  # noqa: E402

import lowerset  # noqa: E402
import torch_ext  # noqa: E402
from examples.torch_models import GPTStack  # noqa: E402

#: Bytes the measured peak may differ from the prediction by: 16 KiB or 1%, the larger, well
#: inside the issue's 3% or 256 KiB (in one process nothing depends on a collective's timing,
#: and the runs here meet the prediction to the byte).
SLACK, SHARE = 16 << 10, 0.01


@pytest.fixture
def fsdp2_step(tmp_path):
    from torch.distributed.fsdp import fully_shard

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    torch.manual_seed(0)
    model = GPTStack(vocab=256, dim=64, layers=2, heads=4, context=32, dropout=0.1).train()
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 256, (4, 33), generator=gen)

    def step():
        return F.cross_entropy(model(ids[:, :-1]).flatten(0, 1), ids[:, 1:].flatten())
    for _ in range(2):
        step().backward()
        model.zero_grad(set_to_none=True)
    yield model, step
    dist.destroy_process_group()


def _measured(model, step, plan):
    def run():
        with torch_ext.RecomputeContext(plan, model=model):
            step().backward()
    model.zero_grad(set_to_none=True)
    peak = torch_ext.peak_memory(run, params=model).peak
    model.zero_grad(set_to_none=True)
    return peak


def _plans(graph):
    least = lowerset.min_peak(graph, time_limit=None)
    plain = lowerset.schedule(graph).peak
    budgets = [least.schedule.peak + f * (plain - least.schedule.peak) for f in (0.25, 0.5, 0.75)]
    return [lowerset.CanonicalStrategy(graph, [set(range(graph.n))]), least] + [
        lowerset.solve(graph, b, time_limit=None) for b in budgets]


def test_every_plan_meets_its_prediction_and_runs_bitwise(fsdp2_step):
    model, step = fsdp2_step
    graph = torch_ext.trace(step, model=model)
    facts = graph.facts
    assert max(facts.outside_forward) > 0 and max(facts.outside_backward) > 0
    resident = facts.resident
    for plan in _plans(graph):
        predicted = plan.schedule.peak - resident
        measured = _measured(model, step, plan)
        assert abs(measured - predicted) <= max(SLACK, SHARE * predicted), (
            len(plan.schedule.recomputed), measured, predicted)
    least = _plans(graph)[1]
    assert least.schedule.recomputed and torch_ext.verify(step, least, model=model).ok


def test_without_the_outside_bytes_the_prediction_misses(fsdp2_step):
    """The planted fault: the same trace with FSDP2's bytes left out of the schedule."""
    model, step = fsdp2_step
    graph = torch_ext.trace(step, model=model)
    bare = graph.with_facts(dataclasses.replace(graph.facts, outside_forward=(),
                                                outside_backward=()))
    least = lowerset.min_peak(bare, time_limit=None)
    measured = _measured(model, step, least)
    predicted = least.schedule.peak - graph.facts.resident
    assert measured - predicted > max(SLACK, SHARE * predicted), (measured, predicted)


def test_without_a_measurement_trace_warns(fsdp2_step):
    model, step = fsdp2_step
    with pytest.warns(lowerset.UnmodeledMemoryWarning, match="measure_memory=False"):
        graph = torch_ext.trace(step, model=model, measure_memory=False)
    assert not graph.facts.outside_forward
