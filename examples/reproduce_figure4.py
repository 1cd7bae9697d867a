"""Reproduce Figure 4 of Kusumoto et al. (NeurIPS 2019): time per iteration against batch size,
each method up to the largest batch it can run under a memory cap.

For each network the script finds the largest batch under the cap (``chainer_ext.max_batch_size``:
traced at batch 2 and 4, predicted by the schedule, confirmed by real steps at the answer and the
next batch) for four methods:

- **Vanilla**: plain Chainer, no recomputation;
- **Chen's sqrt(n)** (``lowerset.baselines.chen_sqrtn``), run with liveness analysis;
- **Paper ExactDP+TC**: the paper's time-centric exact DP (eq. 2) at the eq. (2) budget left by
  the cap after parameters, inputs and parameter gradients (``cap - resident - parameter
  bytes``);
- **Ours**: ``lowerset.solve(graph, budget=cap)``, the least recomputation whose whole-step
  schedule fits the cap.

It then times training iterations (the median of ``--repeat``, after a warm-up on the GPU; in
rounds that run every point once, so that the machine's drift falls on all methods alike) of
every method at the batch sizes of the plot, up to its largest: Vanilla at its largest (GPU
preset: six points up to it); the recomputation methods above Vanilla's largest batch, at each
method's largest batch that does not exceed their own (GPU preset: and six points across their
range). Outputs (``--out``, default ``results/``): ``figure4.png`` (one panel per network in the
paper's layout: runtime per iteration against batch size, Vanilla's largest batch
as a dashed line and its per-sample time times the batch dotted), ``figure4.md`` and
``figure4.json``.

What "fits" means: on a GPU, CuPy's memory pool is limited to the cap and a step fits if it does
not raise ``cupy.cuda.memory.OutOfMemoryError``; on the CPU nothing enforces a cap, and a step
fits if its measured whole-step peak (tracemalloc peak above the start + parameters and inputs)
is at most the cap. Chainer's CPU convolutions allocate an im2col buffer of kh*kw times their
input inside each forward and backward; it counts in the CPU peak (it is real memory) and no
recomputation removes it, so on conv-heavy, high-resolution networks (VGG19, U-Net) the CPU ratio
of largest batches is well below the GPU's.

Presets
-------
``cpu`` (default; 648 s on 2 idle cores): reduced resolutions and one cap per network.
ResNet50, ResNet152 and DenseNet161 end in global average pooling and run at 64x64; GoogLeNet (7x7
average pooling) and VGG19 (fully connected 7x7x512 head) need 224x224; PSPNet runs at 97x97, whose
13x13 feature map still pools to 6/3/2/1; U-Net at 188x188, its smallest valid input. Each cap is
the network's parameters, parameter gradients and measured workspace floor plus the plain step's
activations of about 2.5 samples at that resolution (from traces at batch 2 and 4 on the CI machine
kind), so Vanilla's largest batch is 2, as PSPNet's in the paper, with half a sample of slack
against measurement noise. PSPNet is the exception: a plain step takes about 2 s per sample on 2
cores, and a cap of 2.5 samples would time it at batches near 10; its cap holds about 1.5 samples
(Vanilla's largest batch is 1). The caps range from 226 MB (ResNet50) to 2.02 GB (VGG19, whose
parameters and their gradients alone take 1.15 GB). A larger cap gives larger batches and longer
iterations; this one keeps every network's iterations under a few seconds on 2 cores. ``--cap``
overrides it. On the CPU the timed iterations have no warm-up: the first hooked or plain step at a
batch size takes no longer than the next ones (nothing is compiled or cached between steps).

``gpu``: the paper's 11.4 GB cap (K40c), inputs (224x224, 572x572 U-Net, 713x713 PSPNet) and
timing points spread over each method's whole range, 4 repeats as in the paper.

Targets (from the issue): our largest batch is at least the paper's ratio to Vanilla's, and at
Chen's largest batch our time per iteration is at most Chen's.

Examples
--------
::

    .venv/bin/python examples/reproduce_figure4.py                       # CPU preset, 7 networks
    .venv/bin/python examples/reproduce_figure4.py --networks resnet50 --repeat 1
    .venv/bin/python examples/reproduce_figure4.py --preset gpu --device gpu
"""

import argparse
import contextlib
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
    from chainer_ext import RecomputeHook, extrapolate, max_batch_size  # noqa: F401

    # isort: split
    import chainer

import numpy as np  # noqa: E402

import lowerset  # noqa: E402
from examples._machine import machine_info, machine_line, reuse_freed_memory  # noqa: E402
from examples.models import NETWORKS  # noqa: E402

MB = 10**6

#: The methods, in plot order: key -> (label, colour).
METHODS = {
    "vanilla": ("Vanilla", "#1f77b4"),
    "chen": ("Chen's sqrt(n)", "#2ca02c"),
    "paper": ("Paper ExactDP+TC (eq. 2)", "#d62728"),
    "ours": ("Ours (lowerset.solve)", "#ff7f0e"),
}

#: Figure 4 of the paper and the authors' poster (pfnet-research/recompute, poster/poster.pptx,
#: the same three panels): Vanilla's largest batch and the DP's (ApproxDP+MC, the larger of the
#: paper's two curves) on a K40c with 11.4 GB. ResNet152's and DenseNet's DP curves reach the
#: plot's right edge, so their ratios are lower bounds. The paper has no panel for the other
#: four networks; their "ratio" is Table 1's Vanilla peak over the best DP peak at the same
#: batch (a proxy, parameters included), marked as such.
PAPER = {
    "pspnet": {"vanilla": 2, "dp": 8, "ratio": 4.0, "source": "Fig. 4 and Sec. 5.2 (2 -> 8)"},
    "resnet152": {"vanilla": 60, "dp": 258, "ratio": 258 / 60,
                  "source": "Fig. 4 (60 -> >= 258, the axis end)"},
    "densenet161": {"vanilla": 42, "dp": 196, "ratio": 196 / 42,
                    "source": "Fig. 4 (42 -> >= 196, the axis end)"},
    "resnet50": {"ratio": 8.9 / 3.4, "source": "Table 1 proxy (8.9 / 3.4 GB)"},
    "vgg19": {"ratio": 7.0 / 4.5, "source": "Table 1 proxy (7.0 / 4.5 GB)"},
    "googlenet": {"ratio": 8.5 / 5.2, "source": "Table 1 proxy (8.5 / 5.2 GB)"},
    "unet": {"ratio": 9.1 / 4.7, "source": "Table 1 proxy (9.1 / 4.7 GB)"},
}

#: Presets: network -> (input side, cap in bytes); plus timing and planner settings.
PRESETS = {
    "cpu": {
        "networks": {"pspnet": (97, 718 * MB), "unet": (188, 812 * MB),
                     "resnet50": (64, 226 * MB), "resnet152": (64, 522 * MB),
                     "vgg19": (224, 2_020 * MB), "densenet161": (64, 290 * MB),
                     "googlenet": (224, 261 * MB)},
        "repeat": 3, "warmup": 0, "points": "few", "ours_method": "exact", "max_batch": 512,
    },
    "gpu": {
        "networks": {name: (net.input_size[0], 11_400 * MB) for name, net in NETWORKS.items()},
        "repeat": 4, "warmup": 1, "points": "range", "ours_method": "exact", "max_batch": 1024,
    },
}


def paper_exact_tc(graph, cap):
    """The paper's time-centric exact DP (eq. 2) at the eq. (2) budget the cap leaves after the
    resident arrays (parameters, inputs) and the parameters' gradients."""
    eq2 = cap - graph.facts.resident - sum(b for k, b in graph.facts.externals if k == "param")
    if eq2 <= 0:
        raise lowerset.InfeasibleBudgetError(max(eq2, 0), None)
    return lowerset.solve(graph, eq2, model="paper", mode="time", method="exact")


def planner_of(key, ours_method):
    """(planner argument of max_batch_size, method) of a method key."""
    return {"vanilla": (None, "exact"), "chen": ("chen", "exact"),
            "paper": (paper_exact_tc, "exact"), "ours": ("lowerset", ours_method)}[key]


def plan_at(key, graph, cap, ours_method):
    """The strategy a method runs at one batch size (None for Vanilla): for ours, the plan that
    ``max_batch_size`` tries first there (``lowerset.batching.predict``), so a batch that real
    runs confirmed above the predicted largest (where the cap is below the predicted least
    peak) runs the least-peak plan, as in the search."""
    if key == "vanilla":
        return None
    if key == "chen":
        return lowerset.baselines.chen_sqrtn(graph)
    if key == "paper":
        return paper_exact_tc(graph, cap)
    plans, _ = lowerset.batching.predict(graph, cap, "lowerset", ours_method)
    return plans[0][1]


def _sync(device):
    if device == "gpu":  # pragma: no cover - GPU
        import cupy

        cupy.cuda.get_current_stream().synchronize()


def time_points(model, loss_fn, points, repeat, device, warmup=1):
    """Median seconds of `repeat` training iterations at each point ``(batch, strategy)``,
    after `warmup` untimed ones. The points are timed in rounds, one iteration of each per
    round, so that a drift of the machine's speed falls on all of them alike. Returns a list
    of (median, times) in the order of `points`."""
    def step(b, strategy):
        model.cleargrads()
        hook = contextlib.nullcontext() if strategy is None else RecomputeHook(strategy)
        with hook:
            loss_fn(b).backward()
    for b, s in points:
        for _ in range(warmup):
            step(b, s)
    times = [[] for _ in points]
    for _ in range(repeat):
        for (b, s), out in zip(points, times):
            gc.collect()
            _sync(device)
            t0 = time.perf_counter()
            step(b, s)
            _sync(device)
            out.append(time.perf_counter() - t0)
    model.cleargrads()
    return [(statistics.median(t), t) for t in times]


def timing_points(largest, key, preset):
    """Batch sizes at which method `key` is timed (see the module docstring)."""
    bv = largest["vanilla"]
    top = largest[key]
    if key == "vanilla":
        if preset["points"] == "range":
            return sorted({max(1, round(top * i / 6)) for i in range(1, 7)})
        return [top]
    pts = {b for b in largest.values() if bv < b <= top} | {top}
    if preset["points"] == "range":
        pts |= {bv + max(1, round((top - bv) * i / 6)) for i in range(1, 7) if top > bv}
    return sorted(p for p in pts if p <= top)


def run_network(name, size, cap, keys, preset, device, repeat, progress):
    """Search the largest batch of each method and time the iterations of one network."""
    start = time.perf_counter()
    net = NETWORKS[name]
    np.random.seed(0)
    model = net.build((size, size))
    xp = np
    if device == "gpu":  # pragma: no cover - GPU
        model.to_device("@cupy:0")
        import cupy as xp
    host = {}  # one random batch on the host, grown on demand; slices of it feed every step

    def batch(b):
        if host.get("n", 0) < b:
            # on the CPU a batch made inside a measured step would count in its peak: start
            # with 64 samples, more than any CPU preset's batch
            host["n"] = max(b, 2 * host.get("n", 0), 64 if device == "cpu" else 8)
            host["x"], host["t"] = net.make_batch(host["n"], (size, size))
        x, t = host["x"][:b], host["t"][:b]
        if device == "gpu":  # pragma: no cover - GPU: copied to the device inside the step
            return xp.asarray(x), xp.asarray(t)
        return x, t

    def loss_fn(b):
        x, t = batch(b)
        with chainer.using_config("train", True):
            return net.loss(model, x, t)

    out = {"network": name, "size": size, "cap": cap, "methods": {}, "timings": {}}
    traced = None
    largest = {}
    for key in keys:
        progress(f"{name}: largest batch, {METHODS[key][0]}")
        planner, method = planner_of(key, preset["ours_method"])
        t0 = time.perf_counter()
        try:
            r = max_batch_size(loss_fn, cap, planner, method=method, traced=traced,
                               max_batch=preset["max_batch"] if device == "cpu" else 4096)
        except lowerset.InfeasibleBudgetError as e:
            out["methods"][key] = {"error": str(e)}
            continue
        traced = r.traced
        largest[key] = r.batch_size
        out["methods"][key] = {
            "largest_batch": r.batch_size, "predicted_batch": r.predicted_batch_size,
            "measured_peak": r.measured_peak, "predicted_peak": r.predicted_peak,
            "confirmed": r.confirmed, "search_s": time.perf_counter() - t0,
            "next": None if r.next_trial is None else vars(r.next_trial),
            "trials": [vars(t) for t in r.trials],
            "recompute_cost": None if r.strategy is None else r.strategy.schedule.recompute_cost,
            "total_cost": int(r.graph.total_cost()),
            "strategy": r.strategy}
    if traced is not None:
        out["resident"] = int(traced[min(traced)].facts.resident)
        out["param_bytes"] = int(traced[min(traced)].param_bytes)
        out["nodes"] = traced[min(traced)].n
    points = []  # (key, batch, strategy)
    for key in keys:
        for b in timing_points(largest, key, preset) if key in largest else []:
            if b == largest[key]:
                s = out["methods"][key]["strategy"]
            else:
                s = plan_at(key, extrapolate(traced, b), cap, preset["ours_method"])
            points.append((key, b, s))
    progress(f"{name}: timing {len(points)} points, {repeat} rounds")
    timed = time_points(model, loss_fn, [(b, s) for _, b, s in points], repeat, device,
                        preset["warmup"])
    for (key, b, s), (med, times) in zip(points, timed):
        out["timings"].setdefault(key, []).append({
            "batch": b, "time_s": med, "times_s": times, "per_sample_ms": 1000 * med / b,
            "recompute_cost": None if s is None else s.schedule.recompute_cost})
    for m in out["methods"].values():
        m.pop("strategy", None)
    out["elapsed_s"] = time.perf_counter() - start
    out["checks"] = check_targets(out)
    return out


def _time_at(out, key, b):
    return next((r["time_s"] for r in out["timings"].get(key, []) if r["batch"] == b), None)


def check_targets(out):
    """The issue's two targets for one network."""
    m = out["methods"]
    bv = m.get("vanilla", {}).get("largest_batch")
    bo = m.get("ours", {}).get("largest_batch")
    bc = m.get("chen", {}).get("largest_batch")
    paper = PAPER[out["network"]]
    res = {"paper_ratio": paper["ratio"], "paper_source": paper["source"]}
    if bv and bo:
        res["ratio"] = bo / bv
        res["ratio_ok"] = bo / bv >= paper["ratio"] - 1e-9
    if bc and bo and bo >= bc:
        tc, to = _time_at(out, "chen", bc), _time_at(out, "ours", bc)
        if tc is not None and to is not None:
            res.update({"at_chen_batch": bc, "chen_s": tc, "ours_s": to,
                        "speedup": tc / to, "time_ok": to <= tc})
        tp = _time_at(out, "paper", bc)
        if tp is not None:
            res["paper_s"] = tp
    return res


def plot(results, path, title):
    """The paper's layout: one panel per network, runtime per iteration against batch size."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    n = len(results)
    cols = min(n, 4)
    rows = (n + cols - 1) // cols
    fig = Figure(figsize=(4.4 * cols, 3.7 * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax, res in zip(axes.flat, results):
        bv = res["methods"].get("vanilla", {}).get("largest_batch")
        top = max([r["batch"] for rows_ in res["timings"].values() for r in rows_] or [1])
        for key, (label, color) in METHODS.items():
            rows_ = res["timings"].get(key)
            if not rows_:
                continue
            xs = [r["batch"] for r in rows_]
            ys = [r["time_s"] for r in rows_]
            big = res["methods"][key]["largest_batch"]
            ax.plot(xs, ys, "o-", color=color, ms=4, label=f"{label} (max {big})")
            if key == "vanilla" and top > xs[-1]:
                per = ys[-1] / xs[-1]  # per-sample time at its largest batch, times the batch
                ax.plot([xs[-1], top], [ys[-1], per * top], ":", color=color,
                        label="Vanilla extrapolated (per-sample time x batch)")
        if bv:
            ax.axvline(bv, color=METHODS["vanilla"][1], ls="--", lw=1)
        ax.set_title(f"{res['network']} ({res['size']}x{res['size']}, cap "
                     f"{res['cap'] / 1e9:.3g} GB)", fontsize=9)
        ax.set_xlabel("batch size")
        ax.set_ylabel("time per iteration (s)")
        ax.set_xlim(0, top * 1.05 + 0.5)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.suptitle(title, fontsize=10)
    fig.savefig(path, dpi=110)


def markdown(results):
    """The table of largest batches, ratios and times at Chen's largest batch."""
    head = ["Network", "Input", "Cap", "Largest batch: Vanilla / Chen / Paper DP / Ours",
            "Ours / Vanilla", "Paper's ratio", "Ratio target",
            "Time/iter at Chen's largest (s): Chen / Paper DP / Ours", "Ours vs Chen",
            "Per sample at own largest (ms): Vanilla / Chen / Paper DP / Ours",
            "Measured peak at own largest (MB): Vanilla / Chen / Paper DP / Ours"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for res in results:
        m, c = res["methods"], res["checks"]

        def cell(key, f):
            v = m.get(key, {})
            return "-" if "largest_batch" not in v else f(v)

        largest = " / ".join(cell(k, lambda v: str(v["largest_batch"])) for k in METHODS)
        peaks = " / ".join(cell(k, lambda v: f"{v['measured_peak'] / MB:.0f}") for k in METHODS)
        per = []
        for k in METHODS:
            b = m.get(k, {}).get("largest_batch")
            t = None if b is None else _time_at(res, k, b)
            per.append("-" if t is None else f"{1000 * t / b:.0f}")
        at = "-"
        if "chen_s" in c:
            at = (f"{c['chen_s']:.2f} / {c.get('paper_s', float('nan')):.2f} / "
                  f"{c['ours_s']:.2f} (batch {c['at_chen_batch']})")
        lines.append("| " + " | ".join([
            res["network"], f"{res['size']}x{res['size']}", f"{res['cap'] / MB:.0f} MB",
            largest, f"{c['ratio']:.2f}" if "ratio" in c else "-",
            f"{c['paper_ratio']:.2f} ({c['paper_source']})",
            "met" if c.get("ratio_ok") else "NOT met" if "ratio_ok" in c else "-", at,
            ("-" if "speedup" not in c else
             f"{c['speedup']:.2f}x {'(met)' if c['time_ok'] else '(NOT met)'}"),
            " / ".join(per), peaks]) + " |")
    return "\n".join(lines)


def _device(data):
    """The device of a run's JSON; runs that did not record it name it in their command."""
    return data.get("device") or ("gpu" if "--device gpu" in data["command"] else "cpu")


def picture_title(data):
    """The title of the picture of a run's JSON (``figure4.json``)."""
    return f"Figure 4 ({data['preset']} preset, {_device(data)})"


def page_markdown(data):
    """The Markdown of a run's JSON (``figure4.json``): the machine, the load, the command,
    :func:`markdown`'s table and the wall time per network."""
    info, (load0, load1), results = data["machine"], data["loadavg"], data["results"]
    warmup = data.get("warmup", PRESETS[data["preset"]]["warmup"])
    times = ", ".join(f"{r['network']} {r['elapsed_s']:.0f} s" for r in results)
    return (f"# Figure 4 reproduction ({data['preset']} preset, {_device(data)})\n\n"
            f"Machine: {machine_line(info)}; {info.get('allocator') or 'system allocator'}; "
            f"load average {load0[0]:.1f} at the start, {load1[0]:.1f} at the end.\n\n"
            f"Command: `{data['command']}`; total {data['elapsed_s']:.0f} s; "
            f"medians of {data['repeat']} iterations{' after a warm-up' if warmup else ''}."
            f"\n\n{markdown(results)}\n\nWall time per network: {times}.\n")


def parse_args(argv=None):
    """Parse the command line (see ``--help``)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", choices=sorted(PRESETS), default="cpu")
    p.add_argument("--networks", nargs="+", choices=list(NETWORKS),
                   default=["pspnet", "resnet152", "densenet161", "resnet50", "vgg19",
                            "googlenet", "unet"], metavar="NET")
    p.add_argument("--methods", nargs="+", choices=list(METHODS), default=list(METHODS),
                   metavar="METHOD", help="of: " + " ".join(METHODS))
    p.add_argument("--cap", help="memory cap for every network (bytes or e.g. 400MB), instead "
                                 "of the preset's")
    p.add_argument("--size", type=int, help="input side instead of the preset's")
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--repeat", type=int, help="timed iterations per point (median)")
    p.add_argument("--out", default=str(ROOT / "results"))
    a = p.parse_args(argv)
    if a.device == "gpu":
        try:
            import cupy  # noqa: F401
        except ImportError:
            p.error("--device gpu needs CuPy")
    if a.cap is not None:
        from lowerset.units import parse_size

        try:
            a.cap = parse_size(a.cap)
        except ValueError as e:
            p.error(str(e))
    if "vanilla" not in a.methods:
        a.methods = ["vanilla"] + a.methods
    return a


def main(argv=None):
    """Run the benchmark; write figure4.{png,md,json} into ``--out``; return the results."""
    a = parse_args(argv)
    preset = PRESETS[a.preset]
    repeat = a.repeat or preset["repeat"]
    keys = [k for k in METHODS if k in a.methods]
    info = machine_info()
    info["allocator"] = reuse_freed_memory()
    load0 = os.getloadavg()
    t0 = time.perf_counter()

    def progress(msg):
        print(f"[{time.perf_counter() - t0:6.0f} s] {msg}", file=sys.stderr, flush=True)

    results = []
    for name in a.networks:
        size, cap = preset["networks"][name]
        results.append(run_network(name, a.size or size, a.cap or cap, keys, preset, a.device,
                                   repeat, progress))
        r = results[-1]
        progress(f"{name} done in {r['elapsed_s']:.0f} s: largest batches "
                 + ", ".join(f"{k} {v.get('largest_batch')}" for k, v in r["methods"].items()))
    elapsed = time.perf_counter() - t0
    load1 = os.getloadavg()
    command = "examples/reproduce_figure4.py " + " ".join(sys.argv[1:] if argv is None else argv)
    data = {"machine": info, "loadavg": [load0, load1], "command": command, "preset": a.preset,
            "device": a.device, "repeat": repeat, "warmup": preset["warmup"],
            "elapsed_s": elapsed, "paper": PAPER, "results": results}
    md = page_markdown(data)
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "figure4.md").write_text(md)
    (out / "figure4.json").write_text(json.dumps(data, indent=1, default=str))
    plot(results, out / "figure4.png", picture_title(data))
    print(md)
    print(f"Wrote {out / 'figure4.md'}, {out / 'figure4.json'}, {out / 'figure4.png'}")
    return {"results": results, "elapsed_s": elapsed}


if __name__ == "__main__":
    main()
