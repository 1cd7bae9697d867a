"""How far below per-block checkpoint any recomputation plan can go, on the traced networks.

For each network of :mod:`examples.torch_models` at a preset of ``examples/bench_torch.py``
(the same batch and sizes), one training step is traced and measured four ways:

- ``plain``: the step as it is (measured peak);
- ``checkpoint``: each block under non-reentrant ``torch.utils.checkpoint`` (measured peak;
  ``bench_torch.block_replacements``);
- ``lowerset``: ``lowerset.min_peak`` of the trace, run under ``torch_ext.RecomputeContext``
  (predicted and measured peak, gradients compared with the plain step's);
- ``bound``: ``lowerset.optimum(graph, model="general")``, Checkmate's MILP over every
  general recomputation schedule of the same step (any value recomputed any number of times,
  at any step of the forward or backward pass), solved by HiGHS: a lower bound on the whole-step
  peak of every such plan, in the bytes the schedule counts (the fine model where it is small
  enough, else its coarse relaxation, a weaker bound; ``status`` says which).

Peaks are whole-step bytes (``torch_ext.measure.MemoryMeter`` plus the resident parameters and
inputs, ``graph.facts.resident``), as in ``bench_torch``. From them, per network:

- margin: how far our least peak lies below per-block checkpoint's, ``1 - ours / checkpoint``;
- reachable: the most any general plan could lie below it, ``1 - bound / checkpoint``;
- activations' share: what of the plain step's peak is not parameters, inputs or parameter
  gradients, ``1 - (resident + gradient bytes) / plain``.

Target (issue 51's): where activations are half the plain peak or more, our least peak lies at
least ``MARGIN`` (5%) below per-block checkpoint's. Where even the bound does not lie that far
below, no plan of the general model meets it, and the table says "unreachable" instead of
"missed".

Writes ``bench_floor.json`` and ``.md`` to ``--out`` (default ``results/``). Needs the
``torch``, ``examples`` and ``optimum`` extras (``.venv-torch``)::

    KINETO_LOG_LEVEL=5 .venv-torch/bin/python examples/bench_floor.py --threads 1
"""

import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import bench_torch  # noqa: E402
import lowerset  # noqa: E402
import torch_ext  # noqa: E402

#: how far below per-block checkpoint the least peak must lie (issue 51)
MARGIN = 0.05
#: the activations' share of the plain peak from which the margin is asked
ACTIVATIONS_SHARE = 0.5
#: seconds for each network's MILP
TIME_LIMIT = 300.0


def _gradient_bytes(model):
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


def _measured(case, run, resident, ref=None):
    """(measured whole-step peak in bytes, snapshot of the step, whether its loss and gradients
    are bitwise those of snapshot `ref`)."""
    row, loss = bench_torch.measure(case, bench_torch.Config("m", None, run), resident)
    same = None if ref is None else case.compare(ref, loss)[0]
    return row["peak"], case.snapshot(loss), same


def bench_network(name, preset, time_limit):
    """Trace, plan and measure network `name`; return its row (a dict, bytes and seconds)."""
    case = bench_torch.Case(name, preset)
    case.reset()
    graph = torch_ext.trace(lambda: case.loss(), model=case.model)
    resident = graph.facts.resident
    t = time.perf_counter()
    plan = lowerset.min_peak(graph)
    plan_s = time.perf_counter() - t
    plain, ref, _ = _measured(case, case.step, resident)
    blocks = bench_torch.block_replacements(case)
    ckpt, _, ckpt_same = _measured(
        case, bench_torch._with(bench_torch.swapped, blocks, case.step), resident, ref)
    ctx = torch_ext.RecomputeContext(plan, model=case.model)
    ours, _, ours_same = _measured(
        case, bench_torch._with(bench_torch._entered, ctx, case.step), resident, ref)
    t = time.perf_counter()
    opt = lowerset.optimum(graph, model="general", time_limit=time_limit)
    return {"network": name, "sizes": case.sizes, "batch": case.batch_size, "nodes": graph.n,
            "resident": resident, "gradient_bytes": _gradient_bytes(case.model),
            "plain": plain, "checkpoint": ckpt, "checkpoint_bitwise": ckpt_same,
            "ours_predicted": plan.schedule.peak, "ours": ours, "ours_bitwise": ours_same,
            "plan_seconds": plan_s,
            "bound": opt.lower_bound, "bound_status": opt.status, "coarse": opt.coarse,
            "bound_seconds": time.perf_counter() - t}


def derive(row):
    """The row's margin, reachable margin, activations' share and verdict."""
    ck = row["checkpoint"]
    share = 1 - (row["resident"] + row["gradient_bytes"]) / row["plain"]
    margin = 1 - row["ours"] / ck
    reachable = None if row["bound"] is None else 1 - row["bound"] / ck
    if share < ACTIVATIONS_SHARE or margin >= MARGIN:
        verdict = "met"
    elif reachable is not None and reachable < MARGIN:
        verdict = "unreachable"
    else:
        verdict = "missed"
    return {"share": share, "margin": margin, "reachable": reachable, "verdict": verdict}


def _mb(b):
    return "-" if b is None else f"{b / 1e6:.1f}"


def _pct(x):
    return "-" if x is None else f"{100 * x:.1f}%"


def markdown(data):
    """The run's table (Markdown) from its JSON `data`."""
    lines = [bench_torch.machine_line(data["machine"]) + f". Preset `{data['preset']}`; "
             f"MILP time limit {data['time_limit']:g} s per network. MB = 1e6 bytes.", "",
             f"Target: where activations are {ACTIVATIONS_SHARE:.0%} of the plain peak or more, "
             f"our least peak at least {MARGIN:.0%} below per-block checkpoint's; "
             "\"unreachable\" where the general model's lower bound is not that far below it "
             "either.", "",
             "| network | nodes | plain (MB) | activations' share | checkpoint (MB) | ours "
             "measured / predicted (MB) | lower bound, any plan (MB) | ours below checkpoint "
             "| the most any plan can be | target |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in data["rows"]:
        d = derive(row)
        kind = "coarse" if row["coarse"] else "fine"
        bound = (f"{_mb(row['bound'])} ({kind}, {row['bound_status']}, "
                 f"{row['bound_seconds']:.0f} s)")
        bit = "" if row["ours_bitwise"] else " (gradients not bitwise)"
        lines.append(
            f"| {row['network']} | {row['nodes']} | {_mb(row['plain'])} | {_pct(d['share'])} | "
            f"{_mb(row['checkpoint'])} | {_mb(row['ours'])} / {_mb(row['ours_predicted'])}"
            f"{bit} | {bound} | {_pct(d['margin'])} | {_pct(d['reachable'])} | "
            f"{d['verdict']} |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = bench_torch.network_parser(__doc__)
    ap.add_argument("--time-limit", type=float, default=TIME_LIMIT,
                    help="seconds for each network's MILP")
    args = ap.parse_args(argv)
    bench_torch.write_run(args, "bench_floor",
                          lambda name: bench_network(name, args.preset, args.time_limit),
                          time_limit=args.time_limit, markdown=markdown)


if __name__ == "__main__":
    main()
