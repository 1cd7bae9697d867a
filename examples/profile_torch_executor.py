"""Where the time of a step under ``torch_ext.RecomputeContext`` goes (PyTorch front end).

For each Hugging Face model of :mod:`hf_models` (built from a config, random weights), three
configurations of one training step (forward and backward, no optimizer):

- ``plain``: no context;
- ``nothing dropped``: the context with the strategy [V] (no value dropped or recomputed),
  which runs the step as it is (no dispatch mode, no hooks): it should cost nothing;
- ``least peak``: the context with ``lowerset.min_peak``'s plan.

Wall time: the median over ``--rounds`` rounds, each running the three once in a rotated
order, as a ratio to the plain step. Then one step of each context configuration under
:mod:`cProfile`: the seconds spent in the executor's own functions (``tottime``, the time in
the function itself, so that nothing is counted twice), grouped by what they do:

- ``dispatch``: the dispatch mode's per-operation work (``__torch_dispatch__``, the checks of
  each operation against the trace, the branch narrowing, capturing a call to recompute, the
  outputs' sizes);
- ``saved tensors``: the ``saved_tensors_hooks`` that hand autograd a handle and take it back;
- ``autograd hooks``: the pre- and post-hooks on autograd nodes, hooking them, walking the
  schedule's events (drops, frees);
- ``recompute``: running operations again (the operations themselves included);
- ``other``: the rest of torch_ext and lowerset during the step.

cProfile slows Python code more than PyTorch's kernels, so the groups are read as shares of
the executor's own time, and the wall-time ratios come from the unprofiled rounds. Writes
``results/profile_torch_executor.json`` and ``.md`` (``--out``)::

    KINETO_LOG_LEVEL=5 .venv-torch/bin/python examples/profile_torch_executor.py --threads 1
"""

import argparse
import cProfile
import functools
import json
import os
import pathlib
import pstats
import statistics
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "examples")]

#: The executor's functions (``co_name`` in executor.py) per group; the per-operation helpers
#: of ``_replay.py``, ``_branches.py`` and ``_ops.py`` count as "dispatch" (but a rerun, as
#: "recompute"); the rest of torch_ext and lowerset is "other".
GROUPS = {
    "dispatch": {"__torch_dispatch__", "_dispatch", "_forward", "_check", "_cursor"},
    "saved tensors": {"_pack", "_unpack"},
    "autograd hooks": {"pre", "post", "_hook_pending", "_run_own_events", "_run_events",
                       "_free", "_start_backward", "_finish_step", "_publish", "_weak"},
    "recompute": {"_recompute", "rerun", "unflatten_call"},
}
_DISPATCH_FILES = {"_replay.py", "_branches.py", "_ops.py", "_compat.py"}


def _group(filename, name):
    path = pathlib.Path(filename)
    if "torch_ext" not in path.parts and "lowerset" not in path.parts:
        return None
    for group, names in GROUPS.items():
        if name in names:
            return group
    return "dispatch" if path.name in _DISPATCH_FILES else "other"


def _setup(name, attention, size):
    import hf_models
    import lowerset
    import torch_ext

    model, step = hf_models.build(name, attention, size=size)
    graph = torch_ext.trace(step, model=model)
    plans = {"nothing dropped": lowerset.CanonicalStrategy(graph, [set(graph.labels)],
                                                           method="none"),
             "least peak": lowerset.min_peak(graph)}
    return model, step, graph, plans


def _runner(model, step, plan):
    """One step of `model` (gradients None first), under `plan`'s context where given."""
    import torch_ext
    from bench_torch import run_step

    ctx = None if plan is None else torch_ext.RecomputeContext(plan, model=model)
    return functools.partial(run_step, model, step, ctx)


def _times(runners, rounds):
    """Median seconds per configuration over `rounds` rotated rounds."""
    from bench_torch import rotated_times

    return {n: statistics.median(s) for n, s in rotated_times(runners, rounds).items()}


def _profile(run):
    """Seconds of the executor's own functions per group in one step, and the step's seconds
    under the profiler."""
    prof = cProfile.Profile()
    start = time.perf_counter()
    prof.runcall(run)
    wall = time.perf_counter() - start
    groups, other = dict.fromkeys([*GROUPS, "other"], 0.0), []
    for (filename, _, name), (_, _, tottime, _, _) in pstats.Stats(prof).stats.items():
        group = _group(filename, name)
        if group is not None:
            groups[group] += tottime
        if group == "other":
            other.append((tottime, f"{pathlib.Path(filename).name}:{name}"))
    top = [f"{where} {t * 1e3:.1f} ms" for t, where in sorted(other, reverse=True)[:8]]
    return {"profiled_seconds": wall, "groups": groups, "other_top": top}


def profile_model(name, attention, size, rounds):
    model, step, graph, plans = _setup(name, attention, size)
    runners = {"plain": _runner(model, step, None)}
    runners.update({k: _runner(model, step, p) for k, p in plans.items()})
    for run in runners.values():   # warm-up
        run()
    seconds = _times(runners, rounds)
    return {
        "model": f"{name} {attention}", "nodes": graph.n,
        "operations": sum(1 + len(graph.attrs[v]["absorbed"])
                          + len(graph.attrs[v].get("absorbed_after", ()))
                          for v in range(graph.n)),
        "seconds": seconds,
        "ratio": {k: s / seconds["plain"] for k, s in seconds.items()},
        "recomputed": {k: len(p.schedule.recomputed) for k, p in plans.items()},
        "profile": {k: _profile(runners[k]) for k in plans},
    }


def render(result):
    """The Markdown of a run's JSON: per model the wall-time ratios, then the least-peak
    step's own profiled time per operation (recomputation left out) and its shares."""
    lines = [result["machine"], "",
             "| model | operations | nothing dropped x plain | least peak x plain | "
             "least peak: own profiled µs per operation, recomputation left out | dispatch | "
             "saved tensors | autograd hooks | recompute | other |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in result["models"]:
        g = r["profile"]["least peak"]["groups"]
        total = sum(g.values()) or 1.0
        own = total - g["recompute"]
        cells = [f"{g[k] / total:.0%}" for k in (*GROUPS, "other")]
        lines.append(f"| {r['model']} | {r['operations']} | {r['ratio']['nothing dropped']:.2f}x "
                     f"| {r['ratio']['least peak']:.2f}x ({r['recomputed']['least peak']} "
                     f"recomputed) | {1e6 * own / r['operations']:.0f} | "
                     + " | ".join(cells) + " |")
    lines += ["", "Shares of the least-peak step's own profiled time (cProfile slows Python "
              "more than kernels: shares, not seconds). Wall times: median of "
              f"{result['rounds']} rotated rounds; {result['seconds']:.0f} s in all."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=["gpt2", "llama", "bert", "t5"])
    ap.add_argument("--attention", default="sdpa")
    ap.add_argument("--size", default="cpu")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", default=str(ROOT / "results" / "profile_torch_executor"))
    args = ap.parse_args(argv)
    import torch

    from _machine import machine_line

    if args.threads:
        torch.set_num_threads(args.threads)
    start = time.perf_counter()
    models = [profile_model(m, args.attention, args.size, args.rounds) for m in args.models]
    machine = (f"{machine_line()}, torch {torch.__version__} ({torch.get_num_threads()} "
               f"threads), load average {os.getloadavg()[0]:.1f} at the end")
    result = {"machine": machine, "rounds": args.rounds, "size": args.size,
              "models": models, "seconds": time.perf_counter() - start}
    out = pathlib.Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.with_suffix(".json").write_text(json.dumps(result, indent=1))
    out.with_suffix(".md").write_text(render(result))
    print(render(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
