"""Reproduce Table 1 of Kusumoto et al. (NeurIPS 2019): measured peak memory per strategy.

For each network this script traces the training step once (``chainer_ext.trace``), plans
Chen's sqrt(n) strategy and our strategies on that graph: ApproxDP/ExactDP x memory-/time-centric,
each at the minimal feasible eq. (2) budget of its method (the paper's four), "Min peak"
(approximate and exact), the plan with the least whole-step peak the planner finds
(``lowerset.min_peak``), and "Min activations", the plan with the least activation peak, the
paper's memory (``lowerset.min_peak(graph, measure="activations")``). It then *measures* one
real training iteration (``model.cleargrads(); loss = ...; loss.backward()``) per strategy:

- **Vanilla** is plain Chainer without any recomputation hook;
- every other strategy runs under ``chainer_ext.RecomputeHook``, which executes the strategy's
  schedule (``lowerset.schedule``) with liveness analysis (Chen's too, as in the paper).

Beside each measured peak, "Predicted" is the schedule's whole-step peak
(``lowerset.schedule(plan).peak``: parameters, inputs, activations, gradients and workspace).

Each strategy gets one warm-up iteration, ``--repeat`` timed iterations (without memory tracing,
which slows Python down; the median is reported) and one iteration measured by
``chainer_ext.peak_memory`` with the strategy's hook passed as ``hooks=``. Four peaks are
reported (``MemoryReport.table1_columns``), all including the input batch:

- *peak*: the highest memory in use, parameters included (the paper's figure);
- *non-param peak*: peak minus parameters and all their gradients (a lower bound of the
  non-parameter memory at the peak; its reduction does not depend on the batch size, so a small
  CPU run can be compared with the paper's GPU run);
- *boundary peak*: the highest memory in use at function boundaries (sampled in every pre- and
  post-process of forward and backward). It leaves out the temporaries that live inside one
  function, such as the im2col buffer of Chainer's CPU convolutions (kh*kw times their input),
  which the paper's cuDNN runs did not pay and which no strategy can remove. Compare this one
  with the paper;
- *non-param boundary peak*: the boundary peak minus parameters and the gradients that exist at
  each sampled moment.

Outputs (folder ``--out``, default ``results/``): ``table1.md`` (machine, Markdown table, target
check), ``table1.json`` (raw figures) and ``table1.png`` (bar chart). The table is also printed.

Examples
--------
The CPU preset, all seven networks (about 12 minutes on 2 cores)::

    .venv/bin/python examples/reproduce_table1.py --preset cpu

Six networks, all but PSPNet (about 7.5 minutes)::

    .venv/bin/python examples/reproduce_table1.py --networks unet resnet50 resnet152 vgg19 \
        densenet161 googlenet

A quick run::

    .venv/bin/python examples/reproduce_table1.py --networks resnet50 --batch 1 --size 64

The paper's batch sizes on a GPU (needs CuPy)::

    .venv/bin/python examples/reproduce_table1.py --preset paper --device gpu
"""

import argparse
import contextlib
import gc
import json
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
    from chainer_ext import RecomputeHook, peak_memory, trace

    # isort: split
    import chainer

import numpy as np  # noqa: E402

import lowerset  # noqa: E402
from examples._machine import machine_info, machine_line  # noqa: E402
from examples.models import NETWORKS  # noqa: E402

GiB = 2 ** 30

#: Table 1 of the paper: peak memory incl. parameters (GB) and reduction against vanilla (%).
PAPER = {
    "pspnet": {"approx-mc": (2.7, 71), "approx-tc": (3.1, 67), "exact-mc": (2.8, 70),
               "exact-tc": (3.2, 66), "chen": (4.0, 58), "vanilla": (9.4, 0),
               "nodes": 385, "batch": 2},
    "unet": {"approx-mc": (5.0, 45), "approx-tc": (6.7, 26), "exact-mc": (4.7, 48),
             "exact-tc": (5.3, 42), "chen": (7.4, 18), "vanilla": (9.1, 0),
             "nodes": 60, "batch": 8},
    "resnet50": {"approx-mc": (3.4, 62), "approx-tc": (4.4, 51), "exact-mc": (3.4, 62),
                 "exact-tc": (4.3, 51), "chen": (3.7, 59), "vanilla": (8.9, 0),
                 "nodes": 176, "batch": 96},
    "resnet152": {"approx-mc": (2.3, 75), "approx-tc": (2.5, 73), "exact-mc": (2.3, 75),
                  "exact-tc": (2.5, 73), "chen": (2.4, 74), "vanilla": (9.2, 0),
                  "nodes": 516, "batch": 48},
    "vgg19": {"approx-mc": (4.5, 36), "approx-tc": (5.5, 22), "exact-mc": (4.5, 36),
              "exact-tc": (5.5, 22), "chen": (4.7, 34), "vanilla": (7.0, 0),
              "nodes": 46, "batch": 64},
    "densenet161": {"approx-mc": (1.6, 81), "approx-tc": (1.9, 78), "exact-mc": (1.7, 80),
                    "exact-tc": (1.8, 78), "chen": (1.8, 79), "vanilla": (8.5, 0),
                    "nodes": 568, "batch": 32},
    "googlenet": {"approx-mc": (5.2, 39), "approx-tc": (5.5, 36), "exact-mc": (5.2, 39),
                  "exact-tc": (5.9, 31), "chen": (6.5, 24), "vanilla": (8.5, 0),
                  "nodes": 134, "batch": 256},
}

#: Strategies in table order: key -> (label, planner). Planner ``None`` is plain Chainer.
STRATEGIES = {
    "vanilla": ("Vanilla", None),
    "chen": ("Chen's", ("chen-sqrtn", None)),
    "approx-mc": ("ApproxDP+MC", ("approx", "memory")),
    "approx-tc": ("ApproxDP+TC", ("approx", "time")),
    "exact-mc": ("ExactDP+MC", ("exact", "memory")),
    "exact-tc": ("ExactDP+TC", ("exact", "time")),
    "approx-mp": ("Min peak (approx)", ("approx", "min_peak")),
    "exact-mp": ("Min peak (exact)", ("exact", "min_peak")),
    "exact-ma": ("Min activations (exact)", ("exact", "min_activations")),
}
OURS = ("approx-mc", "approx-tc", "exact-mc", "exact-tc", "approx-mp", "exact-mp", "exact-ma")

#: Presets: network -> (batch, (H, W)). "paper" is Table 1 (for a GPU); "cpu" runs all seven
#: networks in about 12 minutes on 2 cores. PSPNet runs at 241x241, its smallest input whose
#: feature map still pools to 6/3/2/1; the classifiers whose heads allow it at 112x112 (VGG19's
#: fully connected layers and GoogLeNet's average poolings need 224x224). A smaller resolution
#: changes the graph's bytes, not its structure; for most networks every activation scales with
#: the pixel count, so the reductions do not move. U-Net is the exception: its unpadded
#: convolutions and crops shrink each map by a fixed border, so at small inputs the deep maps
#: weigh more. At 252x252 its best reduction is about 40%, at 380x380 about 53% and at the
#: paper's 572x572 about 52% (non-param boundary peak), so the preset uses 380x380.
PRESETS = {
    "paper": {name: (net.paper_batch, net.input_size) for name, net in NETWORKS.items()},
    "cpu": {"pspnet": (1, (241, 241)), "unet": (1, (380, 380)), "resnet50": (4, (112, 112)),
            "resnet152": (2, (112, 112)), "vgg19": (1, (224, 224)),
            "densenet161": (2, (112, 112)), "googlenet": (4, (224, 224))},
}

#: Slack of the target check, in percentage points.
TARGET_SLACK = 5


def plan(graph, key, time_limit):
    """Plan strategy `key` on `graph`.

    Returns
    -------
    strategy : lowerset.CanonicalStrategy or None
        None for "vanilla" and when the planner hit `time_limit`.
    seconds : float
        Planner wall time.
    note : str or None
        "timeout" when the exact DP exceeded `time_limit`.
    """
    spec = STRATEGIES[key][1]
    if spec is None:
        return None, 0.0, None
    method, mode = spec
    t0 = time.perf_counter()
    limit = time_limit if method == "exact" else None
    if method == "chen-sqrtn":
        s = lowerset.baselines.chen_sqrtn(graph)
    else:
        try:
            if mode in ("min_peak", "min_activations"):
                measure = "step" if mode == "min_peak" else "activations"
                s = lowerset.min_peak(graph, method, measure=measure, time_limit=limit)
            else:
                s = lowerset.solve(graph, mode=mode, method=method, model="paper",
                                   time_limit=limit)
        except lowerset.SearchLimitError:
            return None, time.perf_counter() - t0, "timeout"
    return s, time.perf_counter() - t0, None


def _synchronize(device):
    """Wait for the GPU (no-op on CPU)."""
    if device == "gpu":  # pragma: no cover - GPU
        import cupy

        cupy.cuda.get_current_stream().synchronize()


def make_step(net, model, x, t, hook=None):
    """Return ``step()``: one training iteration, under `hook` (a context manager that registers
    a function hook, entered around the forward and the backward) when it is not None."""
    def step():
        model.cleargrads()
        np.random.seed(0)  # the same Dropout masks for every strategy
        with chainer.using_config("train", True), \
                (contextlib.nullcontext() if hook is None else hook):
            loss = net.loss(model, x, t)
            loss.backward()
    return step


def measure(net, model, x, t, strategy, device, repeat):
    """Run one strategy: warm-up, `repeat` timed iterations, one memory-measured iteration.

    Parameters
    ----------
    strategy : lowerset.CanonicalStrategy or None
        None: plain Chainer (no recomputation hook).

    Returns
    -------
    dict
        ``time_s`` (median), ``times_s``, ``peak`` (bytes above the start of the iteration),
        ``param_grad_bytes``, ``boundary_peak``, ``boundary_peak_nonparam`` (bytes above the
        start), ``samples``, the four columns of ``MemoryReport.table1_columns`` (bytes, input
        batch included) and, with a strategy, ``recomputed`` (values recomputed).
    """
    hook = None if strategy is None else RecomputeHook(strategy)
    plain = make_step(net, model, x, t, hook)
    plain()  # warm-up
    times = []
    for _ in range(repeat):
        gc.collect()
        _synchronize(device)
        t0 = time.perf_counter()
        plain()
        _synchronize(device)
        times.append(time.perf_counter() - t0)
    model.cleargrads()  # on GPU the pool's baseline then holds no gradient of the last step
    gc.collect()
    rep = peak_memory(make_step(net, model, x, t), params=model, device=device,
                      hooks=[] if hook is None else [hook])
    out = {"time_s": statistics.median(times), "times_s": times, "peak": rep.peak,
           "param_grad_bytes": rep.param_grad_bytes, "boundary_peak": rep.boundary_peak,
           "boundary_peak_nonparam": rep.boundary_peak_without_grads,
           "samples": rep.boundary_samples,
           **rep.table1_columns(input_bytes=int(x.nbytes) + int(t.nbytes))}
    if hook is not None:
        out["recomputed"] = len(hook.last_iteration["recomputed"])
    return out


def run_network(name, batch, size, keys, device, repeat, time_limit, progress):
    """Trace, plan and measure every strategy in `keys` for network `name`.

    Returns
    -------
    dict
        Network figures (``nodes``, ``T(V)``, ``M(V)``, ``param_bytes``, ``input_bytes``, ...)
        and ``rows``: one dict per strategy with the planned and measured figures, in bytes.
    """
    start = time.perf_counter()
    net = NETWORKS[name]
    np.random.seed(0)
    model = net.build(size)
    xp = np
    if device == "gpu":  # pragma: no cover - GPU
        import cupy

        model.to_device("@cupy:0")
        xp = cupy
    x, t = net.make_batch(batch, size, xp=xp)
    with chainer.using_config("train", True):
        t0 = time.perf_counter()
        g = trace(lambda: net.loss(model, x, t))
        trace_s = time.perf_counter() - t0
    params = sum(int(p.array.nbytes) for p in model.params())
    inputs = int(x.nbytes) + int(t.nbytes)
    if g.facts.resident != params + inputs:  # pragma: no cover - a trace or model bug
        raise RuntimeError(f"traced resident bytes {g.facts.resident} != parameters and inputs "
                           f"{params + inputs}")
    result = {"network": name, "batch": batch, "size": list(size), "nodes": g.n,
              "paper_nodes": net.paper_nodes, "T(V)": int(g.total_cost()),
              "M(V)": int(g.total_memory()), "param_bytes": params, "input_bytes": inputs,
              "trace_s": trace_s, "rows": []}
    view = g.with_facts(lowerset.activation_facts(g.facts))  # the paper's memory, once
    for key in keys:
        progress.set_postfix_str(f"{name}: {STRATEGIES[key][0]}")
        s, plan_s, note = plan(g, key, time_limit)
        row = {"strategy": key, "label": STRATEGIES[key][0], "planner_s": plan_s, "note": note}
        if s is not None:
            sched = s.schedule
            row.update({"planned_peak": int(s.peak_memory), "overhead": int(s.overhead),
                        "recompute_cost": sched.recompute_cost,
                        "recompute_pct": 100.0 * sched.recompute_cost / g.total_cost(),
                        "segments": len(s), "planned_recomputed": len(sched.recomputed)})
        elif key == "vanilla":
            # eq. (2) of the one-segment strategy [V]: no recomputation, no liveness analysis
            row["planned_peak"] = int(lowerset.CanonicalStrategy(g, [set(g.labels)]).peak_memory)
            sched = lowerset.schedule(g)
        if note is None:
            row["predicted_peak"] = int(sched.peak)
            row["predicted_activation_peak"] = _activation_peak(view, s)
        if note is None:
            row.update(measure(net, model, x, t, s, device, repeat))
        result["rows"].append(row)
        progress.update(1)
    add_reductions(result)
    result["elapsed_s"] = time.perf_counter() - start
    return result


def _activation_peak(view, strategy):
    """The schedule's peak of `strategy` (None: the plain step) on `view`, the traced graph with
    ``lowerset.activation_facts`` (the paper's memory): the prediction of the non-param
    boundary column (input batch included), in bytes."""
    plan = view if strategy is None else lowerset.CanonicalStrategy(view, strategy.lower_sets)
    return int(lowerset.schedule(plan).peak)


MEASURES = ("total_peak", "nonparam_peak", "total_boundary_peak", "nonparam_boundary_peak")


def add_reductions(result):
    """Add ``<measure>_reduction`` (percent saved against vanilla) to each measured row."""
    base = next((r for r in result["rows"] if r["strategy"] == "vanilla" and "peak" in r), None)
    if base is None:
        return
    for r in result["rows"]:
        for m in MEASURES:
            if m in r and base[m] > 0:
                r[m + "_reduction"] = 100.0 * (1 - r[m] / base[m])


def check_targets(result):
    """Target of the issue on the non-parameter boundary peak for one network.

    Our best strategy must save at least the paper's best reduction minus ``TARGET_SLACK``
    points, and at least as much as Chen's.

    Returns
    -------
    dict
        ``target`` (percent), ``best`` (strategy key), ``ours``, ``chen`` (percent or None),
        ``paper_ok``, ``chen_ok`` and ``ok`` (bool or None when not measurable).
    """
    paper = PAPER[result["network"]]
    target = max(paper[k][1] for k in OURS if k in paper) - TARGET_SLACK
    key = "nonparam_boundary_peak_reduction"
    rows = {r["strategy"]: r for r in result["rows"]}
    ours = [(rows[k][key], k) for k in OURS if k in rows and key in rows[k]]
    chen = rows.get("chen", {}).get(key)
    out = {"network": result["network"], "target": target, "ours": None, "best": None,
           "chen": chen, "paper_ok": None, "chen_ok": None, "ok": None}
    if ours:
        out["ours"], out["best"] = max(ours)
        out["paper_ok"] = out["ours"] >= target
        out["chen_ok"] = None if chen is None else out["ours"] >= chen - 1e-9
        out["ok"] = out["paper_ok"] and out["chen_ok"] is not False
    return out


def check_whole_step(result, slack=0.005):
    """Whether the planner's least peak (the "Min peak" rows) is the lowest measured whole-step
    peak of the network's strategies, within `slack` (a fraction; measurement noise).

    Returns
    -------
    dict
        ``network``, ``ours`` and ``others`` (bytes; None when not measured) and ``ok``.
    """
    rows = [r for r in result["rows"] if "total_peak" in r]
    ours = [r["total_peak"] for r in rows if r["strategy"] in ("approx-mp", "exact-mp")]
    others = [r["total_peak"] for r in rows if r["strategy"] not in ("approx-mp", "exact-mp")]
    out = {"network": result["network"], "ours": min(ours, default=None),
           "others": min(others, default=None), "ok": None}
    if ours and others:
        out["ok"] = out["ours"] <= out["others"] * (1 + slack)
    return out


def whole_step_text(checks):
    """Return the per-network lines of :func:`check_whole_step` (Markdown list)."""
    lines = ["Whole-step peak (what a device budget bounds): the planner's least peak is the "
             "lowest measured Peak of all strategies (within 0.5%)."]
    for c in checks:
        if c["ok"] is None:
            lines.append(f"- {c['network']}: not measured")
            continue
        lines.append(f"- {c['network']}: {'OK' if c['ok'] else 'NOT MET'} - min peak "
                     f"{c['ours'] / GiB:.3f} GiB, lowest other {c['others'] / GiB:.3f} GiB")
    return "\n".join(lines)


def _gib(b, red=None):
    if b is None:
        return ""
    s = f"{b / GiB:.3f}"
    return s if red is None or abs(red) < 1e-9 else f"{s} ({-red:+.0f}%)"


def markdown_table(results):
    """Return the Markdown table of `results` (one row per network and strategy)."""
    head = ["Network", "#V (paper)", "Batch", "Input", "Strategy", "Peak GiB",
            "Non-param peak GiB", "Boundary peak GiB", "Non-param boundary GiB",
            "Predicted GiB", "Planned eq.(2) GiB", "Recomputed (% fwd)", "Iter. s", "Planner s",
            "Paper GB (red.)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for res in results:
        paper = PAPER[res["network"]]
        for i, r in enumerate(res["rows"]):
            first = i == 0
            cells = [res["network"] if first else "",
                     f"{res['nodes']} ({res['paper_nodes']})" if first else "",
                     str(res["batch"]) if first else "",
                     f"{res['size'][0]}x{res['size'][1]}" if first else "", r["label"]]
            if r.get("note"):
                cells += [r["note"]] * 4
            elif "error" in r:
                cells += ["error"] * 4
            else:
                cells += [_gib(r[m], r.get(m + "_reduction")) for m in MEASURES]
            cells.append(_gib(r.get("predicted_peak")))
            cells.append(_gib(r.get("planned_peak")))
            cells.append(f"{r['recompute_cost']} ({r['recompute_pct']:.0f}%)"
                         if "recompute_cost" in r else "")
            cells.append(f"{r['time_s']:.2f}" if "time_s" in r else "")
            cells.append(f"{r['planner_s']:.2f}" if r["strategy"] != "vanilla" else "")
            p = paper.get(r["strategy"])
            cells.append("" if p is None else f"{p[0]} (-{p[1]}%)" if p[1] else f"{p[0]}")
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def targets_text(checks):
    """Return the per-network target lines (Markdown list)."""
    lines = [f"Target (non-param boundary peak): our best strategy saves >= paper's best "
             f"reduction - {TARGET_SLACK} points, and >= Chen's."]
    for c in checks:
        if c["ok"] is None:
            lines.append(f"- {c['network']}: not measured")
            continue
        chen = "n/a" if c["chen"] is None else f"{c['chen']:.1f}%"
        lines.append(
            f"- {c['network']}: {'OK' if c['ok'] else 'NOT MET'} - best "
            f"{STRATEGIES[c['best']][0]} {c['ours']:.1f}% (target >= {c['target']}%: "
            f"{'yes' if c['paper_ok'] else 'no'}; Chen's {chen}: "
            f"{'n/a' if c['chen_ok'] is None else 'yes' if c['chen_ok'] else 'no'})")
    return "\n".join(lines)


def bar_chart(results, path):
    """Write a PNG: per network, the measured peaks of each strategy (non-param boundary peak
    labelled with its reduction against Vanilla)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(results)
    cols = min(n, 4)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.6 * rows), squeeze=False)
    for ax, res in zip(axes.flat, results):
        measured = [r for r in res["rows"] if "total_peak" in r]
        pos = np.arange(len(measured))
        w = 0.27
        ax.bar(pos - w, [r["total_peak"] / GiB for r in measured], w, label="peak")
        ax.bar(pos, [r["total_boundary_peak"] / GiB for r in measured], w,
               label="boundary peak")
        nonparam = ax.bar(pos + w, [r["nonparam_boundary_peak"] / GiB for r in measured], w,
                          label="non-param boundary peak")
        ax.bar_label(nonparam, ["" if r["strategy"] == "vanilla" else
                                f"{-r.get('nonparam_boundary_peak_reduction', 0):+.0f}%"
                                for r in measured], fontsize=6)
        ax.axhline(res["param_bytes"] / GiB, color="gray", lw=0.8, ls="--", label="parameters")
        ax.set_xticks(pos)
        ax.set_xticklabels([r["label"] for r in measured], rotation=45, ha="right", fontsize=7)
        ax.set_title(f"{res['network']} (batch {res['batch']}, "
                     f"{res['size'][0]}x{res['size'][1]})", fontsize=9)
        ax.set_ylabel("GiB")
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def parse_args(argv=None):
    """Parse the command line (see ``--help``)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", choices=sorted(PRESETS), default="cpu",
                   help="batch sizes and resolutions: 'paper' (Table 1, for a GPU) or 'cpu' "
                        "(default)")
    p.add_argument("--networks", nargs="+", choices=list(NETWORKS), default=list(PAPER),
                   metavar="NET", help=f"networks to run (default all: {' '.join(PAPER)})")
    p.add_argument("--methods", nargs="+", choices=list(STRATEGIES)[1:],
                   default=list(STRATEGIES)[1:], metavar="STRATEGY",
                   help="strategies besides Vanilla (always run): "
                        + " ".join(list(STRATEGIES)[1:]))
    p.add_argument("--batch", type=int, help="override the preset's batch size")
    p.add_argument("--size", type=int, help="override the preset's input side (H = W)")
    p.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    p.add_argument("--repeat", type=int, default=1, help="timed iterations per strategy")
    p.add_argument("--time-limit", type=float, default=60.0,
                   help="seconds per exact DP call; past it the cell reads 'timeout'")
    p.add_argument("--out", default=str(ROOT / "results"), help="output folder")
    a = p.parse_args(argv)
    if a.repeat < 1:
        p.error("--repeat must be >= 1")
    if a.device == "gpu":
        try:
            import cupy  # noqa: F401
        except ImportError:
            p.error("--device gpu needs CuPy")
    return a


def main(argv=None):
    """Run the benchmark; write ``table1.{md,json,png}`` into ``--out``; return the results."""
    from tqdm import tqdm

    a = parse_args(argv)
    keys = ["vanilla"] + [k for k in STRATEGIES if k in a.methods]
    info = machine_info()
    results = []
    start = time.perf_counter()
    cudnn = chainer.using_config("cudnn_deterministic", True) if a.device == "gpu" \
        else contextlib.nullcontext()
    with cudnn, tqdm(total=len(a.networks) * len(keys), desc="runs", unit="run",
                     file=sys.stderr) as progress:
        for name in a.networks:
            batch, size = PRESETS[a.preset][name]
            batch = a.batch or batch
            size = (a.size, a.size) if a.size else tuple(size)
            results.append(run_network(name, batch, size, keys, a.device, a.repeat,
                                       a.time_limit, progress))
    elapsed = time.perf_counter() - start
    checks = [check_targets(r) for r in results]
    whole = [check_whole_step(r) for r in results]
    command = "examples/reproduce_table1.py " + " ".join(sys.argv[1:] if argv is None else argv)
    data = {"machine": info, "command": command, "args": vars(a), "elapsed_s": elapsed,
            "paper": PAPER, "results": results, "targets": checks, "whole_step": whole}
    md = page_markdown(data)
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "table1.md").write_text(md)
    (out / "table1.json").write_text(json.dumps(data, indent=1))
    bar_chart(results, out / "table1.png")
    print(md)
    print(f"Wrote {out / 'table1.md'}, {out / 'table1.json'}, {out / 'table1.png'}")
    return {"results": results, "targets": checks, "whole_step": whole, "elapsed_s": elapsed}


def page_markdown(data):
    """The Markdown of a run's JSON (``table1.json``): the machine, the command, the table,
    the wall times and the targets."""
    a, results = data["args"], data["results"]
    header = (f"# Table 1 reproduction ({a['preset']} preset, {a['device']})\n\n"
              f"Machine: {machine_line(data['machine'])}\n\nCommand: `{data['command']}`; "
              f"total {data['elapsed_s']:.0f} s.\n\n"
              "Peaks include the input batch; reductions are against Vanilla. 'Boundary' "
              "peaks are sampled at function boundaries and leave out the temporaries inside "
              "one function (im2col). 'Non-param peak' subtracts the parameters and all their "
              "gradients (a lower bound when the peak comes before the last gradients exist); "
              "'non-param boundary' subtracts the parameters and the gradients that exist at "
              "each sampled moment: compare its reduction with the paper's. Predicted is the "
              "schedule's whole-step peak (lowerset.schedule(plan).peak), to compare with "
              "Peak. Planned eq.(2) is the paper's activation peak of the strategy (Vanilla: "
              "the one-segment strategy [V]). Recomputed is the cost of what the schedule "
              "recomputes (eq. (1) without the last segment, which the executor keeps).\n")
    times = ", ".join(f"{r['network']} {r['elapsed_s']:.0f} s" for r in results)
    return (f"{header}\n{markdown_table(results)}\n\nWall time per network: {times}.\n\n"
            f"{targets_text(data['targets'])}\n\n{whole_step_text(data['whole_step'])}\n")


if __name__ == "__main__":
    main()
