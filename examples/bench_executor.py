"""Benchmark the Chainer executor: iteration time and measured peak memory per strategy.

For each network: a plain Chainer step, liveness analysis only (the hook running the schedule of
the one-segment strategy [V]: it recomputes nothing and frees each value at its last use), and
the paper's strategies (``lowerset.solve(..., model="paper")``, exact/approx x time/memory at
the minimal eq. (2) budget). Times are medians over
``--repeats`` steps, taken round-robin over the configurations so that machine drift hits all of
them alike; peak memory is measured in separate runs (tracemalloc slows Python code down), and
each configuration's loss and parameter gradients are compared bitwise with the plain step's.

Times are shared-machine sensitive: the minimum over repeats is reported beside the median.

Target: time with the hook <= (1 + recomputed cost / T(V)) x plain time + 5%, and liveness
analysis alone <= 5% over plain. The "bound" column is (1 + recomputed / T(V)) * 1.05.

Writes JSON and a markdown table to ``--out`` (default ``results/bench_executor.{json,md}``).

Example (the CPU preset, a few minutes on 2 cores)::

    .venv/bin/python examples/bench_executor.py --nets resnet50 unet
"""

import argparse
import json
import os
import pathlib
import statistics
import sys
import time
import warnings

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import chainer

import numpy as np  # noqa: E402

import lowerset  # noqa: E402
from chainer_ext import LivenessHook, RecomputeHook, peak_memory, trace  # noqa: E402
from examples import _machine  # noqa: E402
from examples.models import NETWORKS  # noqa: E402

# CPU preset: small inputs so that one step takes about a second on a laptop-class CPU
CPU_PRESET = {"resnet50": {"batch": 2, "size": (112, 112)},
              "unet": {"batch": 1, "size": (252, 252)}}


def machine_info():
    info = _machine.machine_info()
    info["omp_num_threads"] = os.environ.get("OMP_NUM_THREADS")
    info["lowerset"] = lowerset.__version__
    return info


def make_step(net, model, x, t, hook):
    def step():
        model.cleargrads()
        np.random.seed(0)
        with chainer.using_config("train", True):
            if hook is None:
                loss = net.loss(model, x, t)
                loss.backward()
            else:
                with hook:
                    loss = net.loss(model, x, t)
                    loss.backward()
        return loss
    return step


def plan(g, method, mode, time_limit):
    t0 = time.perf_counter()
    try:
        s = lowerset.solve(g, mode=mode, method=method, model="paper", time_limit=time_limit)
    except lowerset.SearchLimitError as e:
        return None, f"{e}"
    return s, time.perf_counter() - t0


def bench(name, batch, size, repeats, methods, time_limit):
    net = NETWORKS[name]
    np.random.seed(0)
    model = net.build(size)
    x, t = net.make_batch(batch, size)
    with chainer.using_config("train", True):
        g = trace(lambda: net.loss(model, x, t))
    TV = g.total_cost()
    configs = [("plain", None, None),
               ("liveness only", LivenessHook(g), None)]
    notes = []
    for method in methods:
        for mode in ("time", "memory"):
            s, info = plan(g, method, mode, time_limit)
            if s is None:
                notes.append(f"{method}/{mode}: {info}")
                continue
            configs.append((f"{method} {mode}-centric, min budget", RecomputeHook(s), s))
    steps = [make_step(net, model, x, t, h) for _, h, _ in configs]
    for st in steps:  # warm up (allocator, im2col buffers, numba)
        st()
    times = [[] for _ in configs]
    for _ in range(repeats):
        for i, st in enumerate(steps):
            t0 = time.perf_counter()
            st()
            times[i].append(time.perf_counter() - t0)
    rows = []
    plain_t = statistics.median(times[0])
    plain_min = min(times[0])
    ref = None
    for i, (label, hook, s) in enumerate(configs):
        rep = peak_memory(steps[i], params=model)
        # bitwise check against the plain step (same parameters, same seed)
        loss = steps[i]().array.copy()
        grads = [p.grad.copy() for p in model.params()]
        if ref is None:
            ref = (loss, grads)
        equal = (loss.tobytes() == ref[0].tobytes()
                 and all(a.tobytes() == b.tobytes() for a, b in zip(grads, ref[1])))
        med = statistics.median(times[i])
        row = {"config": label, "time_s": med, "time_ratio": med / plain_t, "equal": equal,
               "time_min_s": min(times[i]), "time_min_ratio": min(times[i]) / plain_min,
               "peak_bytes": rep.peak, "peak_without_grads": rep.peak_without_grads,
               "param_bytes": rep.param_bytes, "param_grad_bytes": rep.param_grad_bytes}
        if s is not None:
            row.update({"recompute_cost": s.schedule.recompute_cost, "T(V)": TV,
                        "bound": (1 + s.schedule.recompute_cost / TV) * 1.05,
                        "planned_peak": s.peak_memory, "segments": len(s),
                        "recomputed": len(hook.last_iteration["recomputed"]),
                        "planned_recomputed": len(s.recomputed)})
        elif i > 0:
            row["bound"] = 1.05
        rows.append(row)
    return {"network": name, "batch": batch, "size": list(size), "nodes": g.n,
            "M(V)": g.total_memory(), "T(V)": TV, "param_bytes": g.param_bytes,
            "rows": rows, "notes": notes}


def markdown(results, info):
    lines = [f"Machine: {info['cpu']}, {info['logical_cores']} cores; numpy {info['numpy']}, "
             f"chainer {info['chainer']}, numba {info['numba']}, cupy {info['cupy']}.", ""]
    for r in results:
        lines.append(f"### {r['network']} (batch {r['batch']}, {r['size'][0]}x{r['size'][1]}, "
                     f"#V={r['nodes']}, params {r['param_bytes'] / 2**20:.1f} MiB)")
        lines.append("")
        lines.append("| configuration | time/iter median (s) | x plain | min (s) | x plain | "
                     "bound | peak (MiB) | "
                     "peak w/o new grads (MiB) | planned peak (MiB) | recomputed / planned | "
                     "bitwise equal |")
        lines.append("|---|---|---|---|---|---|---|---|---|---|---|")
        for row in r["rows"]:
            bound = f"{row['bound']:.3f}" if "bound" in row else ""
            pp = f"{row['planned_peak'] / 2**20:.1f}" if "planned_peak" in row else ""
            rc = (f"{row['recomputed']} / {row['planned_recomputed']}"
                  if "recomputed" in row else "")
            lines.append(f"| {row['config']} | {row['time_s']:.3f} | {row['time_ratio']:.3f} | "
                         f"{row['time_min_s']:.3f} | {row['time_min_ratio']:.3f} | "
                         f"{bound} | {row['peak_bytes'] / 2**20:.1f} | "
                         f"{row['peak_without_grads'] / 2**20:.1f} | {pp} | {rc} | "
                         f"{'yes' if row['equal'] else 'NO'} |")
        for n in r["notes"]:
            lines.append(f"\nNot planned: {n}")
        lines.append("")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nets", nargs="+", default=["resnet50", "unet"], choices=sorted(NETWORKS))
    p.add_argument("--batch", type=int, default=None, help="default: the CPU preset")
    p.add_argument("--size", type=int, default=None, help="input side; default: CPU preset")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--methods", nargs="+", default=["exact", "approx"],
                   choices=["exact", "approx"])
    p.add_argument("--time-limit", type=float, default=120.0,
                   help="seconds per planner call (exact DP may be too large)")
    p.add_argument("--out", default=str(ROOT / "results" / "bench_executor"))
    a = p.parse_args(argv)
    info = machine_info()
    results = []
    for name in a.nets:
        pre = CPU_PRESET.get(name, {"batch": 1, "size": NETWORKS[name].input_size})
        batch = a.batch or pre["batch"]
        size = (a.size, a.size) if a.size else pre["size"]
        results.append(bench(name, batch, size, a.repeats, a.methods, a.time_limit))
    out = pathlib.Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps({"machine": info, "results": results},
                                                   indent=1))
    md = markdown(results, info)
    out.with_suffix(".md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
