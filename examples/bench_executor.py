"""Benchmark the Chainer executor: iteration time and measured peak memory per strategy.

For each network: a plain Chainer step, liveness analysis only (the hook running the schedule of
the one-segment strategy [V]: it recomputes nothing and frees each value at its last use), and
the paper's strategies (``lowerset.solve(..., model="paper")``, exact/approx x time/memory at
the minimal eq. (2) budget). Steps run round-robin over the configurations, ``--repeats``
rounds, so that drift (another job on the machine) hits all of them alike; a configuration's
ratio is the median over rounds of its step time over the plain step time of the same round,
in wall seconds and in process CPU seconds (``time.process_time``: what the step computes,
without the time the OS gives to other jobs; with one BLAS thread, the step's own time). Peak
memory is measured in separate runs (tracemalloc slows Python code down), and each
configuration's loss and parameter gradients are compared bitwise with the plain step's.

Recomputed share, in time: the forward seconds of the functions the schedule recomputes over
the forward seconds of all functions, both from a second trace of the same step with
``cost_model="profile"`` (each function's median forward time over 5 runs, in microseconds).
The planned share in the paper's cost units (T_v = 10 for a convolution, 1 otherwise) is
printed beside it.

Target: hooked time <= plain time x (1 + recomputed share in time + 0.05); for liveness
analysis alone (share 0), <= 1.05 x plain. "beyond recomputation" is the CPU ratio minus 1
minus the recomputed forward seconds over the plain step's CPU seconds: what the hook costs
besides running the forwards again (its Python callbacks, and the frees and allocations it
moves). Each network's heading gives the load average and the CPU time the hypervisor took
(steal) around the timed steps.

Writes JSON (with every step time) and markdown to ``--out`` (default
``results/bench_executor.{json,md}``) and prints the markdown.

Example (the CPU preset of two networks, about four minutes on 2 cores; one BLAS thread is
as fast as two at these sizes and is not slowed down by another job on the other core)::

    OPENBLAS_NUM_THREADS=1 .venv/bin/python examples/bench_executor.py --nets resnet50 unet
"""

import argparse
import gc
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
    # chainer_ext first: it applies its fixes for NumPy 2 / Python 3.12 before importing Chainer
    import chainer_ext  # noqa: F401

    # isort: split
    import chainer

import numpy as np  # noqa: E402

import lowerset  # noqa: E402
from chainer_ext import LivenessHook, RecomputeHook, peak_memory, trace  # noqa: E402
from examples import _machine  # noqa: E402
from examples.models import NETWORKS  # noqa: E402

# CPU preset: inputs at which one plain step takes about 0.2-2.5 s on 2 cores
CPU_PRESET = {"resnet50": {"batch": 2, "size": (112, 112)},
              "resnet152": {"batch": 1, "size": (112, 112)},
              "vgg19": {"batch": 1, "size": (224, 224)},
              "googlenet": {"batch": 1, "size": (224, 224)},
              "densenet161": {"batch": 1, "size": (112, 112)},
              "unet": {"batch": 1, "size": (188, 188)},
              "pspnet": {"batch": 1, "size": (121, 121)}}

#: Slack of the target, as a share of the plain step time.
SLACK = 0.05


def machine_info():
    info = _machine.machine_info()
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        info[var.lower()] = os.environ.get(var)
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


def forward_seconds(net, model, x, t, g):
    """Measured forward seconds of each node of `g` (index order): the median of 5 runs per
    function, from ``trace(cost_model="profile")`` of the same step."""
    with chainer.using_config("train", True):
        gp = trace(lambda: net.loss(model, x, t), cost_model="profile", time_unit=1e-6,
                   measure_memory=False)
    if gp.n != g.n or any(gp.attrs[v]["function"] != g.attrs[v]["function"] for v in g.labels):
        raise RuntimeError("the profiled trace differs from the planned one")
    return np.array([gp.cost[gp.index[v]] for v in g.labels], dtype=np.float64) * 1e-6


def round_robin(steps, repeats):
    """Wall and process CPU seconds of each step, `repeats` rounds over all steps: one
    ``(wall, cpu)`` pair of lists per step."""
    for st in steps:  # warm up (allocator, im2col buffers, numba)
        st()
    gc.collect()      # garbage of tracing and planning is not collected during a timed step
    times = [([], []) for _ in steps]
    for _ in range(repeats):
        for i, st in enumerate(steps):
            t0, c0 = time.perf_counter(), time.process_time()
            st()
            times[i][1].append(time.process_time() - c0)
            times[i][0].append(time.perf_counter() - t0)
    return times


def steal_seconds():
    """Seconds the hypervisor gave this machine's CPUs to others since boot (the ``steal``
    column of /proc/stat), or None where there is none."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        return int(fields[8]) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def configurations(g, methods, time_limit):
    """[(label, hook, strategy)] and notes on strategies not planned."""
    configs = [("plain", None, None), ("liveness only", LivenessHook(g), None)]
    notes = []
    for method in methods:
        for mode in ("time", "memory"):
            s, info = plan(g, method, mode, time_limit)
            if s is None:
                notes.append(f"{method}/{mode}: {info}")
                continue
            configs.append((f"{method} {mode}-centric, min budget", RecomputeHook(s), s))
    return configs, notes


def _ratio(times, plain):
    """Median over rounds of a step's seconds over the plain step's of the same round."""
    return statistics.median(a / b for a, b in zip(times, plain))


def time_row(times, plain, s, g, fwd_s):
    """Timing columns of one configuration: `times` and `plain` are its and the plain step's
    ``(wall, cpu)`` seconds per round; `fwd_s` the forward seconds per node."""
    (wall, cpu), (pwall, pcpu) = times, plain
    row = {"time_s": statistics.median(wall), "plain_s": statistics.median(pwall),
           "cpu_s": statistics.median(cpu), "plain_cpu_s": statistics.median(pcpu),
           "ratio": _ratio(wall, pwall), "cpu_ratio": _ratio(cpu, pcpu),
           "min_ratio": min(wall) / min(pwall), "times_s": wall, "cpu_times_s": cpu}
    recomputed = s.schedule.recomputed if s is not None else []
    rec_s = float(sum(fwd_s[g.index[v]] for v in recomputed))
    row["recompute_forward_s"] = rec_s
    row["share_time"] = rec_s / float(fwd_s.sum())
    row["share_cost"] = (s.schedule.recompute_cost / g.total_cost()) if s is not None else 0.0
    row["bound"] = 1 + row["share_time"] + SLACK
    row["met"] = row["ratio"] <= row["bound"]
    row["cpu_met"] = row["cpu_ratio"] <= row["bound"]
    row["beyond_recompute"] = row["cpu_ratio"] - 1 - rec_s / row["plain_cpu_s"]
    return row


def memory_row(step, model, ref, hook, s):
    """Peak memory columns and the bitwise check of one configuration."""
    rep = peak_memory(step, params=model)
    loss = step().array.copy()
    grads = [p.grad.copy() for p in model.params()]
    ref = ref or (loss, grads)
    equal = (loss.tobytes() == ref[0].tobytes()
             and all(a.tobytes() == b.tobytes() for a, b in zip(grads, ref[1])))
    row = {"equal": equal, "peak_bytes": rep.peak, "peak_without_grads": rep.peak_without_grads,
           "param_bytes": rep.param_bytes, "param_grad_bytes": rep.param_grad_bytes}
    if s is not None:
        row.update({"planned_peak": s.peak_memory, "segments": len(s),
                    "recomputed": len(hook.last_iteration["recomputed"]),
                    "planned_recomputed": len(s.recomputed)})
    return row, ref


def bench(name, batch, size, repeats, methods, time_limit):
    net = NETWORKS[name]
    model, x, t, g = net.traced(batch, size)
    fwd_s = forward_seconds(net, model, x, t, g)
    configs, notes = configurations(g, methods, time_limit)
    steps = [make_step(net, model, x, t, h) for _, h, _ in configs]
    load, steal = [os.getloadavg()[0]], steal_seconds()
    times = round_robin(steps, repeats)
    load.append(os.getloadavg()[0])
    steal = steal_seconds() - steal if steal is not None else None
    rows, ref = [], None
    for i, (label, hook, s) in enumerate(configs):
        row = {"config": label, **time_row(times[i], times[0], s, g, fwd_s)}
        mem, ref = memory_row(steps[i], model, ref, hook, s)
        rows.append({**row, **mem})
    return {"network": name, "batch": batch, "size": list(size), "nodes": g.n,
            "M(V)": g.total_memory(), "T(V)": g.total_cost(), "forward_s": float(fwd_s.sum()),
            "param_bytes": g.param_bytes, "load_before_after": load, "steal_s": steal,
            "timed_s": sum(sum(w) for w, _ in times), "rows": rows, "notes": notes}


def _yes(ok):
    return "yes" if ok else "NO"


def _time_table(r):
    lines = [("| configuration | plain (s) | hooked (s) | planned share (cost units) | "
              "recomputed share (time) | bound | x plain (wall) | met | x plain (CPU) | met | "
              "beyond recomputation (CPU) |"),
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in r["rows"][1:]:
        lines.append(f"| {row['config']} | {row['plain_s']:.3f} | {row['time_s']:.3f} | "
                     f"{row['share_cost']:.3f} | {row['share_time']:.3f} | "
                     f"{row['bound']:.3f} | {row['ratio']:.3f} | {_yes(row['met'])} | "
                     f"{row['cpu_ratio']:.3f} | {_yes(row['cpu_met'])} | "
                     f"{100 * row['beyond_recompute']:+.1f}% |")
    return lines


def _memory_table(r):
    lines = [("| configuration | peak (MiB) | peak w/o new grads (MiB) | planned peak (MiB) | "
              "recomputed / planned | bitwise equal |"),
             "|---|---|---|---|---|---|"]
    for row in r["rows"]:
        pp = f"{row['planned_peak'] / 2**20:.1f}" if "planned_peak" in row else ""
        rc = (f"{row['recomputed']} / {row['planned_recomputed']}"
              if "recomputed" in row else "")
        lines.append(f"| {row['config']} | {row['peak_bytes'] / 2**20:.1f} | "
                     f"{row['peak_without_grads'] / 2**20:.1f} | {pp} | {rc} | "
                     f"{_yes(row['equal'])} |")
    return lines


def markdown(results, info, repeats):
    """The Markdown of a run: the machine line, then per network its time and memory tables.

    Parameters
    ----------
    results : list of dict
        What :func:`bench` returns, one per network.
    info : dict
        The machine, as :func:`main` records it.
    repeats : int or None
        Rounds of the round robin; None (a JSON of a run that did not record them) reads
        "Rounds of the round robin not recorded".

    Returns
    -------
    str
        The page's Markdown.
    """
    threads = ", ".join(f"{k.upper()}={info[k]}" for k in ("omp_num_threads",
                                                           "openblas_num_threads") if info[k])
    rounds = ("Rounds of the round robin not recorded" if repeats is None
              else f"{repeats} rounds round-robin per network")
    lines = [(f"Machine: {_machine.machine_line(info)}; GPU: {info.get('gpu') or 'none'}"
              f"{'; ' + threads if threads else ''}; "
              f"{info.get('allocator') or 'system allocator'}. {rounds}; times "
              "are medians."), ""]
    for r in results:
        lb, la = r["load_before_after"]
        steal = f", steal {r['steal_s']:.1f} s" if r["steal_s"] is not None else ""
        lines += [(f"### {r['network']} (batch {r['batch']}, {r['size'][0]}x{r['size'][1]}, "
                   f"#V={r['nodes']}, params {r['param_bytes'] / 2**20:.1f} MiB, "
                   f"forward {r['forward_s']:.3f} s measured per function; "
                   f"{r['timed_s']:.0f} s timed, load average {lb:.1f} -> {la:.1f}{steal})"),
                  ""]
        lines += _time_table(r) + [""] + _memory_table(r)
        lines += [f"\nNot planned: {n}" for n in r["notes"]] + [""]
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nets", nargs="+", default=["resnet50", "unet"], choices=sorted(NETWORKS))
    p.add_argument("--batch", type=int, default=None, help="default: the CPU preset")
    p.add_argument("--size", type=int, default=None, help="input side; default: CPU preset")
    p.add_argument("--repeats", type=int, default=5, help="rounds of the round robin")
    p.add_argument("--methods", nargs="+", default=["exact", "approx"],
                   choices=["exact", "approx"])
    p.add_argument("--time-limit", type=float, default=120.0,
                   help="seconds per planner call (exact DP may be too large)")
    p.add_argument("--out", default=str(ROOT / "results" / "bench_executor"))
    a = p.parse_args(argv)
    info = machine_info()
    info["allocator"] = _machine.reuse_freed_memory()
    results = []
    for name in a.nets:
        pre = CPU_PRESET[name]
        batch = a.batch or pre["batch"]
        size = (a.size, a.size) if a.size else pre["size"]
        results.append(bench(name, batch, size, a.repeats, a.methods, a.time_limit))
    out = pathlib.Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(
        {"machine": info, "repeats": a.repeats, "results": results}, indent=1))
    md = markdown(results, info, a.repeats)
    out.with_suffix(".md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
