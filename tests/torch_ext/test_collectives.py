"""Collectives are never recomputed: a recomputation on one rank alone would wait forever for
the others. A step with functional all-reduces between layers (a one-process gloo group),
whose plans recompute them where the trace does not pin them."""

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("needs torch.distributed with gloo", allow_module_level=True)

import torch.distributed._functional_collectives as funcol  # noqa: E402
import torch.nn as nn  # noqa: E402

import lowerset  # noqa: E402
import torch_ext  # noqa: E402


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    store = tmp_path_factory.mktemp("gloo") / "store"
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    yield dist.group.WORLD
    dist.destroy_process_group()


def _step(group):
    """Four layers, each scaled by an all-reduce of a function of its output (the collective's
    output as large as the layer's, cheap to recompute but for the other ranks)."""
    torch.manual_seed(0)
    layers = nn.ModuleList(nn.Linear(128, 128) for _ in range(4))
    x = torch.randn(64, 128)

    def step():
        h = x
        for layer in layers:
            h = layer(h)
            h = torch.tanh(h) * funcol.all_reduce(torch.sigmoid(h.detach()), "sum", group)
        return h.square().mean()
    return layers, step


def test_no_plan_recomputes_a_collective(group):
    layers, step = _step(group)
    graph = torch_ext.trace(step, model=layers)
    collectives = {v for v in range(graph.n) if graph.attrs[v]["op"].startswith("_c10d")}
    assert len(collectives) >= 4
    for v in collectives:
        assert "a collective" in graph.attrs[v]["pinned"]
    plans = lowerset.pareto(graph, time_limit=None)
    assert any(p.schedule.recomputed for p in plans), "no plan recomputes: a weak test"
    for plan in plans:
        assert not set(plan.schedule.recomputed) & collectives


def test_the_least_peak_runs_bitwise(group):
    layers, step = _step(group)
    plan = lowerset.min_peak(torch_ext.trace(step, model=layers), time_limit=None)
    report = torch_ext.verify(step, plan, model=layers)
    assert report.ok, (report.first_mismatch, report.max_abs_diff, report.events_equal)
