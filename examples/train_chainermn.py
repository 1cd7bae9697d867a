"""Data-parallel training with ChainerMN and a RecomputeHook in every worker.

Run it with MPI, one process per worker (``./scripts/venv.sh`` installs mpi4py and MPICH from
PyPI into ``.venv``)::

    .venv/bin/mpiexec -n 2 .venv/bin/python examples/train_chainermn.py
    .venv/bin/mpiexec -n 2 .venv/bin/python examples/train_chainermn.py --check --json out.json

Each of the N workers holds a replica of the network and trains it on its own slice of every
global batch (``--batch`` examples per worker, N x ``--batch`` per step).
``chainermn.create_multi_node_optimizer`` averages the gradients of all workers with an MPI
all-reduce before each update, so every worker applies the same update. The first ``update()``
of a ChainerMN optimizer only broadcasts rank 0's parameters; the script makes that call before
training.

The plan is made once. Rank 0 traces one training step on its local batch
(:func:`chainer_ext.trace`), plans it (``--strategy``: the approximate memory-centric DP by
default, or Chen's sqrt(n)) and broadcasts the plan as JSON
(:meth:`lowerset.CanonicalStrategy.to_dict`). Every worker traces its own step (one forward pass,
no planning) and binds the plan to its graph with ``CanonicalStrategy.from_dict(plan,
graph=graph)``, which raises if the graphs differ: every worker must run the same network on the
same local batch shape. Then every step runs under ``RecomputeHook(strategy)``.

The network is a small VGG-like ConvNet without BatchNormalization (whose statistics over a
worker's slice would make data-parallel training differ from one process on the whole batch).

``--check`` verifies, at every step, and exits with status 1 naming what failed:

- after the update, all workers hold bitwise identical parameters (SHA-256 over all of them);
- the averaged gradient equals the gradient of one process on the concatenated global batch
  (plain Chainer, same parameters) up to summation order (:data:`TOLERANCES`; ``--check``
  computes in float64 unless ``--dtype float32`` is given); the gradient of one worker's slice
  alone differs from it by more than 100 times that tolerance;
- before training, on every worker, the measured peak memory (tracemalloc) of a step under the
  hook is below a plain step's, and the hook saves the same fraction as in a single-process run
  on the same local batch (no all-reduce), within 0.05.

Raises
------
SystemExit
    Status 1 on rank 0 with ``--check`` if a check fails (the message names it); status 2 if
    ``--batch`` or ``--steps`` is below 1.
lowerset.StrategyError
    On a worker whose traced graph differs from rank 0's (another network or local batch shape).
"""

import argparse
import copy
import hashlib
import json
import os
import sys
import time

import chainer
import chainer.functions as F
import chainer.links as L
import chainermn
import numpy as np

import chainer_ext  # noqa: F401  (first: its NumPy fixes for Chainer)
import lowerset
from chainer_ext import RecomputeHook, peak_memory, trace

#: Tolerances of the comparison with one process on the whole batch, by dtype: ``(rtol, atol)``,
#: ``atol`` relative to the largest gradient element of each parameter (for elements that cancel
#: to near zero). Both sides compute the same sums in different orders. In the backward pass, one
#: process sums all N*B examples inside one GEMM, while the workers sum B each and the all-reduce
#: adds the N partial sums (with N and B powers of two, 1/B, 1/N and 1/(N*B) scale exactly).
#: In the forward pass, BLAS blocks a GEMM by its number of rows, so a worker's slice and the same
#: rows of the whole batch differ in the last bits too. Reordering a sum of K terms changes it by
#: at most about 2*K*u*sum(|terms|) (Higham, Accuracy and Stability of Numerical Algorithms, 2nd
#: ed., eq. 4.4), typically by about sqrt(K)*u*sum(|terms|) for rounding errors of random sign;
#: the largest sums at the defaults have K = 16 * 32 * 32 = 16384 terms (the first
#: convolution's weight gradient: 2 x 8 examples at 32x32), so with u = 2**-53 (float64) the
#: typical relative difference is about 1.4e-14 and the worst 3.6e-12, and with u = 2**-24
#: (float32) 7.6e-6 and 2e-3. The tolerances sit between the two. Past rounding, ReLU and max
#: pooling turn a difference into a different gradient where a value lies within rounding of a
#: kink (a pre-activation at 0, a tie in a pooling window). In float32 that happens (seen once
#: in three steps at 64x64 with two convolutions per stage); in float64 the chance is about
#: 1e-16 per value, so ``--check`` compares in float64 by default.
TOLERANCES = {"float64": (1e-12, 1e-13), "float32": (1e-4, 1e-5)}


class ConvNet(chainer.Chain):
    """VGG-like: ``stages`` stages of ``convs`` 3x3 conv-ReLU and a 2x2 max pooling, then linear.

    Parameters
    ----------
    width : int
        Channels of the first stage (doubled at each stage).
    stages, convs : int
    n_class : int
    """

    def __init__(self, width=16, stages=3, convs=2, n_class=10):
        super().__init__()
        self.stages = stages
        self.convs = convs
        with self.init_scope():
            layers = []
            c_in = 3
            for s in range(stages):
                for _ in range(convs):
                    layers.append(L.Convolution2D(c_in, width << s, 3, pad=1))
                    c_in = width << s
            self.convs_ = chainer.ChainList(*layers)
            self.fc = L.Linear(None, n_class)

    def forward(self, x):
        h = x
        it = iter(self.convs_)
        for _ in range(self.stages):
            for _ in range(self.convs):
                h = F.relu(next(it)(h))
            h = F.max_pooling_2d(h, 2)
        return self.fc(h)


def loss_fn(model, x, t):
    """Mean softmax cross entropy over the batch."""
    return F.softmax_cross_entropy(model(x), t)


def global_batch(step, n_workers, batch, size, seed, dtype=np.float32):
    """The whole batch of `step`: ``n_workers * batch`` images and labels, the same on all ranks.

    Returns
    -------
    x : ndarray of `dtype`, shape (n_workers * batch, 3, size, size)
    t : ndarray of int32, shape (n_workers * batch,)
    """
    rng = np.random.RandomState(seed * 1000 + step)
    n = n_workers * batch
    x = rng.uniform(-1, 1, (n, 3, size, size)).astype(dtype)
    t = rng.randint(0, 10, n).astype(np.int32)
    return x, t


def local_slice(arrays, rank, batch):
    return tuple(a[rank * batch:(rank + 1) * batch] for a in arrays)


def params_digest(model):
    """SHA-256 of all parameters' bytes, in name order."""
    h = hashlib.sha256()
    for name, p in sorted(model.namedparams()):
        h.update(name.encode())
        h.update(np.ascontiguousarray(chainer.backend.CpuDevice().send(p.array)).tobytes())
    return h.hexdigest()


def grads_of(model):
    return {name: chainer.backend.CpuDevice().send(p.grad).copy()
            for name, p in sorted(model.namedparams())}


def compare(got, ref, rtol, atol):
    """Largest ``|got - ref| / (atol * max|ref| + rtol * |ref|)`` over all parameters.

    Returns
    -------
    ratio : float
        <= 1 where every element is within the tolerance (``numpy.allclose`` per parameter
        with ``atol * max|ref|`` as its absolute tolerance).
    max_abs : float
        Largest absolute difference.
    """
    ratio = 0.0
    max_abs = 0.0
    for name, r in ref.items():
        d = np.abs(got[name].astype(np.float64) - r)
        scale = atol * np.abs(r).max() + rtol * np.abs(r)
        with np.errstate(divide="ignore", invalid="ignore"):
            q = np.where(d == 0, 0.0, d / scale)
        ratio = max(ratio, float(q.max()))
        max_abs = max(max_abs, float(d.max()))
    return ratio, max_abs


def make_strategy(graph, name):
    if name == "chen":
        return lowerset.baselines.chen_sqrtn(graph)
    return lowerset.min_peak(graph, "approx")


def run_step(model, x, t, hook=None):
    """Forward and backward of one local step (under `hook` if given); returns the loss."""
    model.cleargrads()
    with chainer.using_config("train", True):
        if hook is None:
            loss = loss_fn(model, x, t)
            loss.backward()
        else:
            with hook:
                loss = loss_fn(model, x, t)
                loss.backward()
    return float(loss.array)


def measure_peaks(comm, model, x, t, strategy, device):
    """Peak bytes of a plain and of a hooked step, with and without the gradient all-reduce.

    The step with all-reduce is what a worker runs (forward, backward, ChainerMN's averaging of
    the gradients); the step without it is a single-process run on the same local batch. Every
    rank calls this (the all-reduce is collective).
    """
    out = {}
    for label, allreduce in (("worker", True), ("single", False)):
        for kind in ("plain", "hooked"):
            m = copy.deepcopy(model)
            hook = RecomputeHook(strategy) if kind == "hooked" else None

            def step():
                run_step(m, x, t, hook)
                if allreduce:
                    comm.multi_node_mean_grad(m)

            out[f"{label}_{kind}"] = peak_memory(step, params=m, device=device).peak
    return out


def versions():
    import mpi4py
    from mpi4py import MPI
    return {"python": sys.version.split()[0], "numpy": np.__version__,
            "chainer": chainer.__version__, "mpi4py": mpi4py.__version__,
            "mpi": MPI.Get_library_version().splitlines()[0].strip()}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--batch", type=int, default=8, help="examples per worker and step")
    p.add_argument("--size", type=int, default=32, help="image height and width")
    p.add_argument("--width", type=int, default=16, help="channels of the first stage")
    p.add_argument("--convs", type=int, default=4, help="convolutions per stage (3 stages)")
    p.add_argument("--strategy", choices=["min-peak", "chen"], default="min-peak")
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--communicator", default="naive",
                   help="ChainerMN communicator; 'naive' runs on CPUs (default), GPUs need "
                        "'pure_nccl' (NCCL)")
    p.add_argument("--device", choices=["cpu", "gpu"], default="cpu",
                   help="gpu: worker i uses GPU intra_rank i (not run by this project's tests)")
    p.add_argument("--dtype", choices=["float32", "float64"],
                   help="parameters and data (default: float32; float64 with --check)")
    p.add_argument("--check", action="store_true", help="verify (see the module docstring)")
    p.add_argument("--json", help="rank 0 writes the results here")
    a = p.parse_args(argv)
    if a.batch < 1 or a.steps < 1:
        p.error("--batch and --steps must be at least 1")
    a.dtype = a.dtype or ("float64" if a.check else "float32")
    dtype = np.dtype(a.dtype)
    chainer.global_config.dtype = dtype  # initializers of the links
    rtol, atol = TOLERANCES[a.dtype]

    comm = chainermn.create_communicator(a.communicator)
    rank, n = comm.rank, comm.size
    device = chainer.get_device("@numpy" if a.device == "cpu" else f"@cupy:{comm.intra_rank}")
    device.use()
    xp = device.xp

    np.random.seed(a.seed)  # the same initial parameters everywhere (rank 0's are broadcast too)
    model = ConvNet(width=a.width, convs=a.convs)
    x0, t0 = global_batch(0, n, a.batch, a.size, a.seed, dtype)
    with chainer.using_config("train", False), chainer.no_backprop_mode():
        model(x0[:1])  # shape the lazy Linear before copies and the broadcast
    model.to_device(device)
    reference = copy.deepcopy(model) if (a.check and rank == 0) else None

    # -- the plan: rank 0 plans, every worker binds it to its own trace --------------------------
    xl, tl = (xp.asarray(v) for v in local_slice((x0, t0), rank, a.batch))
    t_plan = time.perf_counter()
    with chainer.using_config("train", True):
        graph = trace(lambda: loss_fn(model, xl, tl))
    plan = json.dumps(make_strategy(graph, a.strategy).to_dict()) if rank == 0 else None
    plan = comm.bcast_obj(plan)
    strategy = lowerset.CanonicalStrategy.from_dict(json.loads(plan), graph=graph)
    t_plan = time.perf_counter() - t_plan
    hook = RecomputeHook(strategy)

    peaks = measure_peaks(comm, model, xl, tl, strategy, a.device)

    optimizer = chainermn.create_multi_node_optimizer(
        chainer.optimizers.MomentumSGD(lr=a.lr), comm)
    optimizer.setup(model)
    optimizer.update()  # the first update() only broadcasts rank 0's parameters

    steps = []
    for s in range(a.steps):
        xg, tg = global_batch(s, n, a.batch, a.size, a.seed, dtype)
        xl, tl = (xp.asarray(v) for v in local_slice((xg, tg), rank, a.batch))
        if reference is not None:
            reference.copyparams(model)
        t0_ = time.perf_counter()
        loss = run_step(model, xl, tl, hook)
        local = grads_of(model) if a.check else None
        optimizer.update()  # all-reduce (mean) of the gradients, then MomentumSGD
        seconds = time.perf_counter() - t0_
        mean_loss = comm.allreduce_obj(loss) / n
        digests = comm.gather_obj(params_digest(model))
        grad_digests = comm.gather_obj(hashlib.sha256(b"".join(
            g.tobytes() for g in grads_of(model).values())).hexdigest())
        rec = {"step": s, "mean_loss": mean_loss, "seconds": seconds,
               "recomputed": len(hook.last_iteration["recomputed"])}
        if rank == 0:
            rec["param_digests"] = digests
            rec["grad_digests"] = grad_digests
            if reference is not None:
                ref_loss = run_step(reference, xp.asarray(xg), xp.asarray(tg))
                ref = grads_of(reference)
                rec["single_loss"] = ref_loss
                rec["grad_vs_single"], rec["grad_vs_single_max_abs"] = compare(
                    grads_of(model), ref, rtol, atol)
                rec["local_vs_single"], _ = compare(local, ref, rtol, atol)
        steps.append(rec)

    peaks = comm.gather_obj(peaks)
    if rank != 0:
        return 0
    result = {"workers": n, "batch_per_worker": a.batch, "size": a.size, "dtype": a.dtype,
              "steps": steps,
              "strategy": {"name": a.strategy, "lower_sets": len(strategy.lower_sets),
                           "overhead": strategy.overhead, "nodes": graph.n,
                           "plan_json_bytes": len(plan), "plan_seconds": t_plan},
              "peaks": peaks, "rtol": rtol, "atol": atol, "versions": versions()}
    failures = check(result) if a.check else []
    result["failures"] = failures
    if a.json:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as f:
            json.dump(result, f, indent=1)
    report(result)
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures), file=sys.stderr)
        return 1
    return 0


def check(result):
    """Return the list of failed checks (empty if all pass); see the module docstring."""
    bad = []
    for rec in result["steps"]:
        s = rec["step"]
        if len(set(rec["param_digests"])) != 1:
            bad.append(f"step {s}: workers hold different parameters {rec['param_digests']}")
        if len(set(rec["grad_digests"])) != 1:
            bad.append(f"step {s}: workers hold different averaged gradients")
        if not rec["grad_vs_single"] <= 1.0:
            bad.append(f"step {s}: averaged gradient differs from one process on the whole "
                       f"batch by {rec['grad_vs_single']:.3g} x tolerance")
        if not rec["local_vs_single"] > 100.0:
            bad.append(f"step {s}: one worker's gradient is within 100 x tolerance of the "
                       f"whole batch's ({rec['local_vs_single']:.3g}): the check cannot tell")
        if rec["recomputed"] == 0:
            bad.append(f"step {s}: the hook recomputed nothing")
    for r, pk in enumerate(result["peaks"]):
        if not pk["worker_hooked"] < pk["worker_plain"]:
            bad.append(f"rank {r}: peak with the hook {pk['worker_hooked']} B is not below "
                       f"plain {pk['worker_plain']} B")
        worker = pk["worker_hooked"] / pk["worker_plain"]
        single = pk["single_hooked"] / pk["single_plain"]
        if abs(worker - single) > 0.05:
            bad.append(f"rank {r}: the hook keeps {worker:.3f} of the plain peak in a worker "
                       f"but {single:.3f} in a single-process run")
    return bad


def report(result):
    mib = 1 / 2 ** 20
    print(f"{result['workers']} workers x {result['batch_per_worker']} examples, "
          f"{result['size']}x{result['size']}, {result['dtype']}; "
          f"plan: {result['strategy']['name']}, "
          f"{result['strategy']['lower_sets']} segments over {result['strategy']['nodes']} "
          f"nodes, {result['strategy']['plan_json_bytes']} B of JSON broadcast")
    for r, pk in enumerate(result["peaks"]):
        print(f"rank {r}: peak plain {pk['worker_plain'] * mib:.2f} MiB, with the hook "
              f"{pk['worker_hooked'] * mib:.2f} MiB "
              f"({100 * (1 - pk['worker_hooked'] / pk['worker_plain']):.0f}% less; "
              f"single process: {100 * (1 - pk['single_hooked'] / pk['single_plain']):.0f}% less)")
    for rec in result["steps"]:
        line = (f"step {rec['step']}: loss {rec['mean_loss']:.5f}, {rec['seconds']:.2f} s, "
                f"{rec['recomputed']} recomputed")
        if "grad_vs_single" in rec:
            line += (f"; identical parameters: {len(set(rec['param_digests'])) == 1}; "
                     f"gradient vs one process: {rec['grad_vs_single']:.2g} x tolerance "
                     f"(max abs {rec['grad_vs_single_max_abs']:.2e}); one worker's slice "
                     f"alone: {rec['local_vs_single']:.2g} x")
        print(line)


def main_or_abort():
    """Run :func:`main`; an exception on one worker aborts every worker.

    Without the abort the other workers wait forever in the next collective call.
    """
    try:
        return main()
    except BaseException:
        import traceback

        from mpi4py import MPI
        traceback.print_exc()
        sys.stderr.flush()
        MPI.COMM_WORLD.Abort(1)


if __name__ == "__main__":
    sys.exit(main_or_abort())
