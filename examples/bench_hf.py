"""Hugging Face models under lowerset's plans beside their own per-layer checkpointing: for
GPT-2, LLaMA, BERT and T5 (``examples/hf_models.py``, eager and sdpa attention), the plain
step, ``gradient_checkpointing_enable()`` (non-reentrant), our least peak (``min_peak``) and
our plan at the peak HF's checkpointing measures (``solve``): the whole-step peak measured
(bytes; the resident parameters and batch added to what the meter sees), the recomputed FLOPs
(HF's: FlopCounterMode's count of the step minus the plain step's; ours: the FLOPs the trace
recorded for the operations the schedule recomputes) and the step time over the plain step's
(median over ``--rounds`` rounds, each running every configuration once in a rotated order).
Default arguments everywhere (the planner's default time limit).

Usage::

    python examples/bench_hf.py [--size cpu] [--models gpt2 t5] [--rounds 7]
        [--out results/bench_hf] [--from-json results/bench_hf.json]

writes ``<out>.json`` and ``<out>.md`` and prints the Markdown.
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import torch  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

import hf_models  # noqa: E402
import lowerset  # noqa: E402
import torch_ext  # noqa: E402
from bench_torch import machine_info, machine_line, planned_flops  # noqa: E402
from torch_ext.measure import MemoryMeter  # noqa: E402


def _run(model, step, ctx=None):
    model.zero_grad(set_to_none=True)
    if ctx is None:
        step().backward()
    else:
        with ctx:
            step().backward()


def _measure(model, step, ctx_factory):
    """(peak above the start in bytes, FLOPs) of one step."""
    ctx = ctx_factory()
    model.zero_grad(set_to_none=True)
    with MemoryMeter("cpu") as meter:
        _run(model, step, ctx)
    counter = FlopCounterMode(display=False)
    with counter:
        _run(model, step, ctx_factory() if ctx is not None else None)
    model.zero_grad(set_to_none=True)
    return meter.result.peak, counter.get_total_flops()


def bench(name, attention, size, rounds):
    model, step = hf_models.build(name, attention, size)
    graph = torch_ext.trace(step, model=model)
    resident = graph.facts.resident
    plain_peak, plain_flops = _measure(model, step, lambda: None)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    hf_peak, hf_flops = _measure(model, step, lambda: None)
    model.gradient_checkpointing_disable()
    hf_peak += resident
    least = lowerset.min_peak(graph)
    try:
        at_hf = lowerset.solve(graph, hf_peak)
    except lowerset.InfeasibleBudgetError:
        at_hf = None
    configs = {"plain": None, "hf": "hf", "least": least}
    if at_hf is not None:
        configs["at_hf"] = at_hf
    row = {"model": name, "attention": attention, "nodes": graph.n,
           "resident": int(resident), "plain": {"peak": int(plain_peak + resident)},
           "hf": {"peak": int(hf_peak), "recomputed_flops": int(hf_flops - plain_flops)}}
    for key, plan in (("least", least), ("at_hf", at_hf)):
        if plan is None:
            continue
        peak, _ = _measure(model, step, lambda p=plan: torch_ext.RecomputeContext(p))
        row[key] = {"peak": int(peak + resident), "predicted": int(plan.schedule.peak),
                    "recomputed_flops": int(planned_flops(graph, plan)[0]),
                    "bitwise": bool(torch_ext.verify(step, plan, model=model).ok)}
    times = {k: [] for k in configs}
    order = list(configs)
    for r in range(rounds):
        for key in order[r % len(order):] + order[:r % len(order)]:
            plan = configs[key]
            if key == "hf":
                model.gradient_checkpointing_enable(
                    gradient_checkpointing_kwargs={"use_reentrant": False})
            start = time.perf_counter()
            _run(model, step, torch_ext.RecomputeContext(plan) if plan not in (None, "hf")
                 else None)
            times[key].append(time.perf_counter() - start)
            if key == "hf":
                model.gradient_checkpointing_disable()
    for key in configs:
        row.setdefault(key, {})["time_ratio"] = statistics.median(
            t / p for t, p in zip(times[key], times["plain"]))
    return row


def _mb(b):
    return f"{b / 2**20:,.1f}"


def markdown(rows, machine, size, rounds):
    lines = [f"Machine: {machine}; size {size!r} ({hf_models.SIZES[size]}); one thread; step "
             f"times over the plain step's, median of {rounds} rotated rounds.", "",
             "| model | attention | plain peak (MB) | HF checkpointing: peak, recomputed GFLOP, "
             "time | ours, least peak: peak (predicted), GFLOP, time | ours at HF's peak: peak, "
             "GFLOP, time | least peak below HF's |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        h, lst, at = r["hf"], r.get("least"), r.get("at_hf")

        def ours(x):
            if x is None:
                return "infeasible"
            ok = "" if x["bitwise"] else " **not bitwise**"
            return (f"{_mb(x['peak'])} ({_mb(x['predicted'])}), "
                    f"{x['recomputed_flops'] / 1e9:.3f}, {x['time_ratio']:.2f}x{ok}")
        below = (h["peak"] - lst["peak"]) / h["peak"]
        lines.append(f"| {r['model']} | {r['attention']} | {_mb(r['plain']['peak'])} | "
                     f"{_mb(h['peak'])}, {h['recomputed_flops'] / 1e9:.3f}, "
                     f"{h['time_ratio']:.2f}x | {ours(lst)} | {ours(at)} | {100 * below:.1f}% |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="cpu", choices=sorted(hf_models.SIZES))
    ap.add_argument("--models", nargs="*", default=list(hf_models.MODELS),
                    choices=hf_models.MODELS)
    ap.add_argument("--attention", nargs="*", default=list(hf_models.ATTENTIONS),
                    choices=hf_models.ATTENTIONS)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", type=Path, default=HERE.parent / "results" / "bench_hf")
    ap.add_argument("--from-json", type=Path, default=None)
    args = ap.parse_args(argv)
    if args.from_json:
        data = json.loads(args.from_json.read_text())
        text = markdown(data["rows"], machine_line(data["machine"]), data["size"],
                        data["rounds"])
        print(text)
        args.out.with_suffix(".md").write_text(text)
        return 0
    torch.set_num_threads(1)
    info = machine_info(torch.device("cpu"))
    rows = []
    for name in args.models:
        for attention in args.attention:
            rows.append(bench(name, attention, args.size, args.rounds))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(
        {"machine": info, "size": args.size, "rounds": args.rounds, "rows": rows}, indent=1))
    text = markdown(rows, machine_line(info), args.size, args.rounds)
    print(text)
    args.out.with_suffix(".md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
