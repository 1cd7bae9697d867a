"""DistributedDataParallel: a trace before DDP's steady state (its first iterations skip the
buffers' broadcast and rebuild the gradient buckets) is refused with what to do; a trace after
it runs on two gloo processes bitwise as a plain DDP step, at the predicted peak. A model with
FSDP1 is refused, pointing to FSDP2 (FSDP2 itself: test_fsdp2.py)."""

import json

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("needs torch.distributed with gloo", allow_module_level=True)

import torch.multiprocessing as mp  # noqa: E402
import torch.nn as nn  # noqa: E402

import lowerset  # noqa: E402
import torch_ext  # noqa: E402

#: Bytes the measured peak may differ from the prediction by (the issue's 256 KiB).
SLACK = 256 << 10


def _net():
    """Convolutions with BatchNorm (buffers DDP broadcasts) and a residual connection."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                         nn.Conv2d(16, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                         nn.Flatten(), nn.Linear(16 * 8 * 8, 10))


def _batch(rank):
    gen = torch.Generator().manual_seed(rank)
    return torch.randn(8, 3, 8, 8, generator=gen), torch.randint(0, 10, (8,), generator=gen)


def _run_rank(rank, world, store, out):
    """One process: two warm-up steps, a trace, the least-peak plan, verify and a measured
    step; the figures written to `out`.<rank>."""
    from torch_ext.measure import MemoryMeter

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        ddp = nn.parallel.DistributedDataParallel(_net())
        x, t = _batch(rank)

        def step():
            return nn.functional.cross_entropy(ddp(x), t)
        for _ in range(2):
            step().backward()
        ddp.zero_grad(set_to_none=True)
        graph = torch_ext.trace(step, model=ddp)
        plan = lowerset.min_peak(graph, time_limit=None)
        report = torch_ext.verify(step, plan, model=ddp)
        ddp.zero_grad(set_to_none=True)
        with MemoryMeter("cpu") as meter:
            with torch_ext.RecomputeContext(plan, model=ddp):
                step().backward()
        result = {"ok": report.ok, "first_mismatch": report.first_mismatch,
                  "mismatches": list(report.mismatches), "diff": report.max_abs_diff,
                  "recomputed": len(plan.schedule.recomputed), "measured": meter.result.peak,
                  "predicted": plan.schedule.peak - graph.facts.resident}
    except Exception as e:   # reported to the test, whose process sees no traceback here
        result = {"error": f"{type(e).__name__}: {e}"}
    finally:
        dist.destroy_process_group()
    with open(f"{out}.{rank}", "w") as f:
        json.dump(result, f)


def test_two_processes_run_the_plan_bitwise_at_the_predicted_peak(tmp_path):
    out = tmp_path / "result"
    mp.start_processes(_run_rank, args=(2, tmp_path / "store", out), nprocs=2, join=True,
                       start_method="spawn")
    for rank in range(2):
        r = json.loads((tmp_path / f"result.{rank}").read_text())
        assert "error" not in r, r
        assert r["ok"], r
        assert r["recomputed"], "the plan recomputes nothing: a weak test"
        assert abs(r["measured"] - r["predicted"]) <= SLACK, r


@pytest.fixture
def one_process(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    yield
    dist.destroy_process_group()


@pytest.mark.parametrize("warmup", [0, 1])
def test_a_trace_before_the_steady_state_is_refused(one_process, warmup):
    ddp = nn.parallel.DistributedDataParallel(_net())
    x, t = _batch(0)

    def step():
        return nn.functional.cross_entropy(ddp(x), t)
    for _ in range(warmup):
        step().backward()
    with pytest.raises(torch_ext.TraceError, match="DistributedDataParallel.*two steps"):
        torch_ext.trace(step, model=ddp)


@pytest.mark.filterwarnings("ignore:FSDP is switching to use `NO_SHARD`:UserWarning")
def test_fsdp1_is_refused_naming_fsdp2(one_process):
    from torch.distributed.fsdp import FullyShardedDataParallel

    model = nn.Sequential(nn.Linear(8, 8), nn.Tanh(),
                          FullyShardedDataParallel(nn.Linear(8, 2), use_orig_params=True,
                                                   device_id=torch.device("cpu")))
    x = torch.randn(4, 8)
    with pytest.raises(torch_ext.TraceError, match="FSDP1.*fully_shard"):
        torch_ext.trace(lambda: model(x).sum(), model=model)


def test_ddp_traces_without_a_warning(one_process):
    ddp = nn.parallel.DistributedDataParallel(_net())
    x, t = _batch(0)

    def step():
        return nn.functional.cross_entropy(ddp(x), t)
    for _ in range(2):
        step().backward()
    torch_ext.trace(step, model=ddp)   # warnings are errors in the tests
