"""examples/train_distributed.py under torchrun, two gloo processes on the CPU: with DDP every
rank runs rank 0's plan bitwise at its predicted peak; with FSDP2 every rank runs rank 0's
lower sets on its own graph, bitwise, at its predicted peak (the trace measures what FSDP2
holds outside the graph), and per-block checkpoint is measured beside plans at the least peak
and three budgets."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("needs torch.distributed with gloo", allow_module_level=True)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_distributed.py"
#: Bytes the measured peak may differ from the prediction by (issue 47's 256 KiB).
SLACK = 256 << 10


def _run(tmp_path, *args):
    out = tmp_path / "rows.json"
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
         str(EXAMPLE), "--steps", "2", "--json", str(out), *args],
        capture_output=True, text=True, timeout=600, env={**_env(), "KINETO_LOG_LEVEL": "5"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads(out.read_text()), proc.stdout + proc.stderr


def _env():
    import os

    return dict(os.environ)


def test_ddp_runs_rank_zeros_plan_bitwise_at_the_predicted_peak(tmp_path):
    rows, _ = _run(tmp_path, "--wrapper", "ddp")
    assert sorted((r["rank"], r["step"]) for r in rows) == [(0, 1), (0, 2), (1, 1), (1, 2)]
    for r in rows:
        assert r["verified"], r
        assert r["recomputed"] > 0, r   # the least peak recomputes
        assert abs(r["measured"] - r["predicted"]) <= SLACK, r
    # the ranks train on different batches under the same plan
    assert rows[0]["loss"] != [r for r in rows if r["rank"] == 1][0]["loss"]


def test_fsdp2_runs_rank_zeros_lower_sets_bitwise_at_the_predicted_peaks(tmp_path):
    rows, output = _run(tmp_path, "--wrapper", "fsdp2", "--compare")
    assert len(rows) == 4 and all(r["verified"] for r in rows), rows
    # rank 0's lower sets on each rank's own graph: each schedule recomputes
    assert all(r["recomputed"] > 0 for r in rows), rows
    assert "UnmodeledMemoryWarning" not in output   # the trace measures FSDP2's bytes
    # gloo sometimes frees a gathered block's all-gather output on its worker thread after the
    # next allocation: a step's peak is then that many bytes higher (on every method)
    race = 2 * _block_bytes()
    for r in rows:
        assert abs(r["measured"] - r["predicted"]) <= SLACK + race, r
    # side by side under FSDP2 (the last step of each rank): per-block checkpoint and the
    # plans at the least peak and three budgets, each bitwise, at its predicted peak
    for r in (r for r in rows if r["step"] == 2):
        by = {}
        for c in r["compare"]:
            by.setdefault(c["method"], []).append(c)
            if c["predicted"] is not None:
                assert abs(c["peak"] - c["predicted"]) <= SLACK + race, c
        (plain,), (ckpt,), plans = by["plain"], by["checkpoint per block"], by["plan"]
        assert plain["recomputed_flops"] == 0 and ckpt["recomputed_flops"] > 0
        assert len(plans) == 4 and all(c["bitwise"] for c in plans), plans
        assert plans[0]["budget"] is None and plans[0]["recomputed_flops"] > 0
        assert [c["budget"] for c in plans[1:]] == sorted(c["budget"] for c in plans[1:])
        assert plans[0]["peak"] < plain["peak"]
    assert "checkpoint per block: peak measured" in output


def _block_bytes():
    """Parameter bytes of one block of the example's model (its defaults)."""
    sys.path.insert(0, str(EXAMPLE.parent))
    from torch_models import GPTStack

    block = GPTStack(vocab=256, dim=64, layers=1, heads=4, context=32).blocks[0]
    return sum(p.numel() * p.element_size() for p in block.parameters())
