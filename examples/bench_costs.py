"""Plans that minimise FLOPs against plans that minimise measured time, at equal byte budgets.

For each network of :mod:`examples.torch_models` at a preset of ``examples/bench_torch.py``,
the step is traced twice, once per cost model of ``torch_ext.trace``: ``"flops"`` (T_v from
``torch.utils.flop_counter``'s formulas, else one per output element: the default) and
``"profile"`` (T_v from each operation's measured time, the median of ``REPEATS`` calls, in a
trace without the memory profiler, put on the first graph). The two graphs have the same
operations and facts; only the costs differ. At each byte budget (our least
peak, taking the larger of the two least peaks, and ``BUDGET_SHARES`` of the way from it to the
plain step's predicted peak) each graph is planned with ``lowerset.solve`` and the plan run
under ``torch_ext.RecomputeContext``:

- recomputed FLOPs (the trace's rule, ``bench_torch.planned_flops``) and recomputed seconds as
  the profile predicts them (the profiled T_v of the recomputed operations times its unit):
  what each plan optimises, side by side;
- a third cost model, ``"profile+op"``: the profiled seconds plus the executor's own seconds per
  recomputed operation (dispatch, checks, hooks), calibrated per network by timing the flops
  graph's least-peak plan against the plain step (:func:`_per_op_seconds`);
- the measured peak, and the step's time over the plain step's (median of ``--rounds`` rounds,
  every configuration once per round in a rotated order, :func:`bench_torch.time_rounds`), and
  from it the measured recompute time: the step's median seconds less the plain step's.

Writes ``bench_costs.json`` and ``.md`` to ``--out`` (default ``results/``)::

    KINETO_LOG_LEVEL=5 .venv-torch/bin/python examples/bench_costs.py --threads 1
"""

import pathlib
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import bench_torch  # noqa: E402
import lowerset  # noqa: E402
import torch_ext  # noqa: E402
from torch_ext.trace import TracedGraph  # noqa: E402

COST_MODELS = ("flops", "profile", "profile+op")
#: budgets at these shares of the way from the least peak to the plain step's
BUDGET_SHARES = (0.0, 0.25, 0.5)
#: calls per operation the profile takes the median of
REPEATS = 5


def _traces(case):
    """Per cost model, the step's graph. The profile is traced with ``measure_memory=False``
    (the memory profiler's bookkeeping on every allocation would time itself) and its costs
    put on the flops trace's graph, whose facts hold the measured workspace."""
    case.reset()
    flops = torch_ext.trace(lambda: case.loss(), model=case.model)
    case.reset()
    timed = torch_ext.trace(lambda: case.loss(), model=case.model, cost_model="profile",
                            repeats=REPEATS, measure_memory=False)
    ops = [[g.attrs[v]["op"] for v in g.labels] for g in (flops, timed)]
    if ops[0] != ops[1]:
        raise RuntimeError("the two traces recorded different operations")
    profile = TracedGraph(flops.labels, flops.edges, dict(zip(timed.labels, timed.cost)),
                          dict(zip(flops.labels, flops.memory)), flops.attrs,
                          facts=flops.facts, cost_model="profile", flop_unit=None,
                          time_unit=timed.time_unit, device=flops.device)
    return {"flops": flops, "profile": profile}


def _seconds(profiled, plan):
    """Seconds the profile predicts for the operations `plan` recomputes (node ids are the
    same in both traces of the step)."""
    cost = profiled.cost
    return sum(int(cost[v]) for v in plan.schedule.recomputed) * profiled.time_unit


def _per_op_seconds(case, graphs, rounds):
    """The executor's seconds per recomputed operation beyond the operation's profiled time:
    the least-peak plan of the flops graph timed against the plain step (medians of `rounds`
    rotated rounds), less its profiled seconds, over its recomputed operations."""
    plan = lowerset.min_peak(graphs["flops"])
    ctx = torch_ext.RecomputeContext(plan, model=case.model)
    configs = [bench_torch.Config("plain", None, case.step),
               bench_torch.Config("calibration", None,
                                  bench_torch._with(bench_torch._entered, ctx, case.step))]
    times = bench_torch.time_rounds(case, configs, rounds)
    extra = (statistics.median(times[("calibration", None)])
             - statistics.median(times[("plain", None)]) - _seconds(graphs["profile"], plan))
    return max(0.0, extra / max(1, len(plan.schedule.recomputed)))


def _with_per_op(profile, seconds):
    """`profile` with `seconds` added to every operation's cost."""
    add = round(seconds / profile.time_unit)
    return TracedGraph(profile.labels, profile.edges,
                       {v: int(c) + add for v, c in zip(profile.labels, profile.cost)},
                       dict(zip(profile.labels, profile.memory)), profile.attrs,
                       facts=profile.facts, cost_model="profile", flop_unit=None,
                       time_unit=profile.time_unit, device=profile.device)


def bench_network(name, preset, rounds):
    """Trace, plan and run network `name`; return its result (a dict, bytes and seconds)."""
    case = bench_torch.Case(name, preset)
    graphs = _traces(case)
    per_op = _per_op_seconds(case, graphs, rounds)
    graphs["profile+op"] = _with_per_op(graphs["profile"], per_op)
    resident = graphs["flops"].facts.resident
    plain = lowerset.schedule(graphs["flops"]).peak
    least = max(lowerset.min_peak(g).schedule.peak for g in graphs.values())
    budgets = sorted({int(least + f * (plain - least)) for f in BUDGET_SHARES})
    configs = [bench_torch.Config("plain", None, case.step)]
    rows = []
    for b in budgets:
        for cost_model, g in graphs.items():
            t = time.perf_counter()
            plan = lowerset.solve(g, b)
            plan_s = time.perf_counter() - t
            ctx = torch_ext.RecomputeContext(plan, model=case.model)
            configs.append(bench_torch.Config(
                cost_model, b, bench_torch._with(bench_torch._entered, ctx, case.step)))
            flops, _, _ = bench_torch.planned_flops(graphs["flops"], plan)
            rows.append({"budget": b, "cost_model": cost_model, "plan_seconds": plan_s,
                         "recomputed_ops": len(plan.schedule.recomputed),
                         "recomputed_flops": flops,
                         "profiled_seconds": _seconds(graphs["profile"], plan),
                         "predicted": plan.schedule.peak})
    for row, cfg in zip(rows, configs[1:]):
        row["peak"] = bench_torch.measure(case, cfg, resident)[0]["peak"]
    times = bench_torch.time_rounds(case, configs, rounds)
    plain_times = times[("plain", None)]
    for row, cfg in zip(rows, configs[1:]):
        row["time_ratio"] = bench_torch.time_ratio(times[cfg.key], plain_times)
        row["recompute_seconds"] = (statistics.median(times[cfg.key])
                                    - statistics.median(plain_times))
    return {"network": name, "sizes": case.sizes, "batch": case.batch_size,
            "nodes": graphs["flops"].n, "plain_predicted": plain, "per_op_seconds": per_op,
            "plain_seconds": statistics.median(plain_times), "rows": rows}


def _gf(f):
    return f"{f / 1e9:.2f}" if f >= 1e7 else f"{f / 1e9:.4f}"


def markdown(data):
    """The run's tables (Markdown) from its JSON `data`."""
    lines = [bench_torch.machine_line(data["machine"]) + f". Preset `{data['preset']}`, "
             f"{data['rounds']} timing rounds. MB = 1e6 bytes; GFLOP = 1e9 FLOPs; profiled: the "
             "recomputed operations' seconds as the profile trace measured them; measured: the "
             "step's median seconds less the plain step's.", "",
             "| network | budget (MB) | cost model | peak (MB) | recomputed ops | recomputed "
             "GFLOP | profiled recompute (ms) | measured recompute (ms) | step x plain |",
             "|---|---|---|---|---|---|---|---|---|"]
    notes = []
    for net in data["rows"]:
        notes.append(f"{net['network']} {1e3 * net['per_op_seconds']:.3f} ms")
        for r in net["rows"]:
            lines.append(
                f"| {net['network']} | {r['budget'] / 1e6:.1f} | {r['cost_model']} | "
                f"{r['peak'] / 1e6:.1f} | {r['recomputed_ops']} | {_gf(r['recomputed_flops'])} "
                f"| {1e3 * r['profiled_seconds']:.1f} | {1e3 * r['recompute_seconds']:.1f} | "
                f"{r['time_ratio']:.2f} |")
    lines += ["", "profile+op: the profiled seconds plus the executor's own seconds per "
              "recomputed operation, calibrated on the flops graph's least-peak plan: "
              + ", ".join(notes) + "."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = bench_torch.network_parser(__doc__)
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args(argv)
    bench_torch.write_run(args, "bench_costs",
                          lambda name: bench_network(name, args.preset, args.rounds),
                          rounds=args.rounds, markdown=markdown)


if __name__ == "__main__":
    main()
