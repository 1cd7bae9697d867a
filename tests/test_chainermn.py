"""``examples/train_chainermn.py`` under ``mpiexec -n 2`` on loopback (ChainerMN over MPICH).

The example trains a ConvNet data-parallel with ``chainermn.create_multi_node_optimizer`` and a
``RecomputeHook`` in each worker, with the plan made by rank 0 and broadcast as JSON. This test
reads the JSON it writes and checks, independently of the example's own ``--check``: identical
parameters on both workers after every step, the averaged gradient against one process on the
concatenated batch (float64, the example's tolerance, justified in its ``TOLERANCES``), that a
worker's own gradient would fail that comparison, and each worker's measured peak memory.
"""

import json
import os
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.mpi

pytest.importorskip("chainer")
pytest.importorskip("chainermn")
pytest.importorskip("mpi4py")  # the mpi extra (./scripts/venv.sh installs it with MPICH)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKERS, STEPS = 2, 3


def _mpiexec():
    """The mpiexec next to this Python (pip's mpich installs one there), else one on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    found = here if os.access(here, os.X_OK) else shutil.which("mpiexec")
    if found is None:
        pytest.fail("mpi4py is installed but no mpiexec was found: pip install mpich "
                    "(or install 'lowerset[mpi]', which ./scripts/venv.sh does)")
    return found


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    out = tmp_path_factory.mktemp("chainermn") / "result.json"
    cmd = [_mpiexec(), "-n", str(WORKERS), sys.executable,
           os.path.join(ROOT, "examples", "train_chainermn.py"),
           "--check", "--steps", str(STEPS), "--json", str(out)]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"{' '.join(cmd)} failed:\n{r.stdout}\n{r.stderr}"
    with open(out) as f:
        data = json.load(f)
    data["stdout"] = r.stdout
    return data


def test_runs_on_two_workers(result):
    assert result["workers"] == WORKERS
    assert result["dtype"] == "float64"
    assert len(result["steps"]) == STEPS
    assert result["failures"] == []
    assert result["strategy"]["plan_json_bytes"] > 0
    assert result["strategy"]["lower_sets"] >= 2


def test_identical_parameters_after_every_step(result):
    for rec in result["steps"]:
        assert len(rec["param_digests"]) == WORKERS
        assert len(set(rec["param_digests"])) == 1, rec
        assert len(set(rec["grad_digests"])) == 1, rec
    # training moves the parameters: the digests change from step to step
    assert len({rec["param_digests"][0] for rec in result["steps"]}) == STEPS


def test_gradient_matches_single_process_on_whole_batch(result):
    for rec in result["steps"]:
        assert rec["grad_vs_single"] <= 1.0, rec
        # without the all-reduce a worker's gradient is far outside the tolerance
        assert rec["local_vs_single"] > 1e3, rec
        assert abs(rec["mean_loss"] - rec["single_loss"]) <= 1e-12 * abs(rec["single_loss"])


def test_each_worker_peak_reduced_as_in_single_process(result):
    assert len(result["peaks"]) == WORKERS
    for pk in result["peaks"]:
        assert pk["worker_hooked"] < pk["worker_plain"], pk
        worker = pk["worker_hooked"] / pk["worker_plain"]
        single = pk["single_hooked"] / pk["single_plain"]
        assert abs(worker - single) <= 0.05, pk
    for rec in result["steps"]:
        assert rec["recomputed"] > 0
