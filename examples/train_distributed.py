r"""Train a GPT-like stack data-parallel under one recomputation plan on every rank.

Launched by torchrun, one process per rank (gloo on the CPU, NCCL on GPUs)::

    .venv-torch/bin/torchrun --standalone --nproc-per-node 2 examples/train_distributed.py
    .venv-torch/bin/torchrun --standalone --nproc-per-node 2 examples/train_distributed.py \\
        --wrapper fsdp2
    torchrun --standalone --nproc-per-node 2 examples/train_distributed.py --device cuda

Each rank builds the same model (``examples/torch_models.py``'s GPTStack, small), wraps it in
DistributedDataParallel (``--wrapper ddp``) or shards each block and the root with FSDP2's
``fully_shard`` (``--wrapper fsdp2``), and runs two steps: DDP's first two steps run other
operations than the steps after (its buffer broadcast, its bucket rebuild), so a plan is traced
after them. Every rank then traces one step on its own batch; rank 0 plans it (the least peak,
or ``--budget`` bytes of the whole step) and broadcasts the plan, and every rank binds it to
its own trace (:func:`shared_plan`), so all ranks drop and recompute the same operations; the
trace pins every collective, so none is recomputed. ``torch_ext.verify`` checks the first
step against a plain one, bitwise; then each training step is measured with
``torch_ext.peak_memory`` beside the schedule's prediction.

Under FSDP2 the trace measures what FSDP2 holds outside the traced operations (the parameters
it gathers and frees around each block in the forward and backward passes, its gradient
buffers) and every plan's schedule adds those bytes at the same positions
(``ExecutionFacts.outside_forward``, ``outside_backward``).

With ``--compare``, each rank then measures one step at a time side by side under the same
wrapper: plain, per-block activation checkpointing (each block run by non-reentrant
``torch.utils.checkpoint``, what FSDP2 users apply today), and rank 0's plans at the least
peak and at ``BUDGET_SHARES`` of the way from it to the plain step's predicted peak: the peak
above the step's start (bytes) beside the schedule's prediction, the FLOPs recomputed
(``FlopCounterMode``'s count of the step minus the plain step's; matrix products and
attention, as its formulas count) and, for each plan, whether ``torch_ext.verify`` finds its
loss and gradients bitwise equal to a plain step's.
"""

import argparse
import gc
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("KINETO_LOG_LEVEL", "5")   # the profiler of peak_memory, quiet

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import lowerset  # noqa: E402
import torch_ext  # noqa: E402
from torch_models import GPTStack  # noqa: E402

WRAPPERS = ("ddp", "fsdp2")
#: --compare plans at these shares of the way from the least peak to the plain step's
BUDGET_SHARES = (0.25, 0.5, 0.75)


def parse(argv=None):
    """The command line's options."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wrapper", choices=WRAPPERS, default="ddp")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--steps", type=int, default=3, help="training steps under the plan")
    ap.add_argument("--budget", type=float, default=None,
                    help="whole-step bytes per rank (default: the planner's least peak)")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--batch", type=int, default=4, help="sequences per rank")
    ap.add_argument("--compare", action="store_true",
                    help="also measure a plain step and per-block checkpoint beside the plan")
    ap.add_argument("--json", type=Path, default=None,
                    help="also write every rank's rows to this file (rank 0)")
    return ap.parse_args(argv)


def wrap(model, wrapper, device):
    """`model` in DistributedDataParallel, or with FSDP2 on each block and on the root."""
    if wrapper == "ddp":
        ids = [device.index] if device.type == "cuda" else None
        return torch.nn.parallel.DistributedDataParallel(model, device_ids=ids)
    from torch.distributed.fsdp import fully_shard

    for block in model.blocks:
        fully_shard(block)
    return fully_shard(model)


def local_batch(args, rank, device, vocab):
    """Token ids and next-token labels of this rank's batch, shapes (batch, tokens)."""
    gen = torch.Generator().manual_seed(1000 + rank)
    ids = torch.randint(0, vocab, (args.batch, args.tokens + 1), generator=gen)
    return ids[:, :-1].to(device), ids[:, 1:].to(device)


def plan_of(graph, budget):
    """The least-peak plan of `graph`, or its plan within `budget` bytes."""
    if budget is None:
        return lowerset.min_peak(graph)
    return lowerset.solve(graph, budget=int(budget))


def shared_plan(graph, budget, rank, wrapper):
    """Rank 0's plan of `graph` (its least peak, or `budget` bytes), the one every rank runs.

    DDP: broadcast as JSON and bound to each rank's own `graph` (``from_dict`` checks that
    the graphs are equal). FSDP2: each rank's graph records which parameter shard its gathered
    parameters came from, so the graphs differ in those external arrays while their operations
    and edges are the same; rank 0's lower sets are broadcast and each rank builds the
    strategy on its own graph (the constructor checks that each is a lower set there), so
    every rank drops and recomputes the same operations, each with its own schedule."""
    payload = [None]
    if rank == 0:
        plan = plan_of(graph, budget)
        payload = [json.dumps(plan.to_dict()) if wrapper == "ddp"
                   else [sorted(s) for s in plan.lower_sets]]
    dist.broadcast_object_list(payload, src=0)
    if wrapper == "ddp":
        return lowerset.CanonicalStrategy.from_dict(json.loads(payload[0]), graph=graph)
    return lowerset.CanonicalStrategy(graph, [set(s) for s in payload[0]])


def main(argv=None):
    """Train; rank 0 prints each rank's predicted and measured peaks."""
    args = parse(argv)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if args.device == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(1)
    dist.init_process_group("nccl" if args.device == "cuda" else "gloo")
    try:
        rows = train(args, rank, device)
        gathered = [None] * world
        dist.all_gather_object(gathered, rows)
        # FSDP2's modules and states form reference cycles: collect them (and the collective
        # work they hold) while the process group still lives, not during interpreter exit.
        gc.collect()
        dist.barrier()
    finally:
        dist.destroy_process_group()
    if rank == 0:
        report(args, world, gathered)
        if args.json is not None:
            args.json.write_text(json.dumps([r for rows in gathered for r in rows], indent=1))


def train(args, rank, device):
    """The run of rank `rank`: warm-up, trace, shared plan, verify, training steps measured."""
    torch.manual_seed(0)   # the same initial weights on every rank
    vocab = 256
    model = GPTStack(vocab=vocab, dim=args.dim, layers=args.layers, heads=4,
                     context=args.tokens, dropout=0.1).to(device).train()
    wrapped = wrap(model, args.wrapper, device)
    optimizer = torch.optim.SGD(wrapped.parameters(), lr=1e-3)
    ids, labels = local_batch(args, rank, device, vocab)

    def step():
        return F.cross_entropy(wrapped(ids).flatten(0, 1), labels.flatten())

    for _ in range(2):   # DDP's first two steps differ from the steady ones
        step().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    graph = torch_ext.trace(step, model=wrapped)
    plan = shared_plan(graph, args.budget, rank, args.wrapper)
    predicted = plan.schedule.peak - graph.facts.resident
    checked = torch_ext.verify(step, plan, model=wrapped)
    optimizer.zero_grad(set_to_none=True)
    context = torch_ext.RecomputeContext(plan, model=wrapped)
    rows = []
    for i in range(args.steps):
        losses = []

        def planned_step():
            with context:
                loss = step()
                loss.backward()
            losses.append(loss.item())

        measured = torch_ext.peak_memory(planned_step, params=wrapped, device=device)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        rows.append({"rank": rank, "step": i + 1, "loss": losses[0], "measured": measured.peak,
                     "predicted": predicted, "verified": checked.ok,
                     "recomputed": len(plan.schedule.recomputed)})
    if args.compare:
        rows[-1]["compare"] = compare(model, wrapped, step, graph, rank, args.wrapper, device)
    return rows


def compare(model, wrapped, step, graph, rank, wrapper, device):
    """One step of this rank per method: plain, per-block checkpoint (bench_torch's
    :class:`Checkpointed` around each block, which under FSDP2 stays the sharded module, its
    hooks unchanged) and rank 0's plans at the least peak and at each of :data:`BUDGET_SHARES`:
    a list of rows with the measured peak above the step's start and the prediction (bytes),
    the FLOPs recomputed and, for the plans, whether they are bitwise."""
    from bench_torch import Checkpointed, run_step

    def measured(ctx):
        def run():
            run_step(wrapped, step, ctx)
        peak = torch_ext.peak_memory(run, params=wrapped, device=device).peak
        counter = FlopCounterMode(display=False)
        with counter:
            run()
        wrapped.zero_grad(set_to_none=True)
        return peak, counter.get_total_flops()

    resident = graph.facts.resident
    plain = measured(None)
    rows = [{"method": "plain", "budget": None, "peak": plain[0], "recomputed_flops": 0,
             "predicted": _kept_all(graph).schedule.peak - resident}]
    blocks = list(model.blocks)
    for i, block in enumerate(blocks):
        model.blocks[i] = Checkpointed(block)
    try:
        peak, flops = measured(None)
    finally:
        for i, block in enumerate(blocks):
            model.blocks[i] = block
    rows.append({"method": "checkpoint per block", "budget": None, "peak": peak,
                 "recomputed_flops": flops - plain[1], "predicted": None})
    for budget in [None] + shared_budgets(graph, rank):
        plan = shared_plan(graph, budget, rank, wrapper)
        bitwise = torch_ext.verify(step, plan, model=wrapped).ok
        wrapped.zero_grad(set_to_none=True)
        peak, flops = measured(torch_ext.RecomputeContext(plan, model=wrapped))
        rows.append({"method": "plan", "budget": budget, "peak": peak,
                     "recomputed_flops": flops - plain[1],
                     "predicted": plan.schedule.peak - resident, "bitwise": bitwise})
    return rows


def _kept_all(graph):
    """The plan that drops nothing: the plain step as the executor runs it (under FSDP2 the
    trace measures the bytes outside the graph against its schedule, see
    ``torch_ext._outside``)."""
    return lowerset.CanonicalStrategy(graph, [set(graph.labels)])


def shared_budgets(graph, rank):
    """Rank 0's byte budgets (whole step) at :data:`BUDGET_SHARES` of the way from its least
    peak to the predicted peak of its plan that drops nothing, broadcast to every rank."""
    payload = [None]
    if rank == 0:
        least = lowerset.min_peak(graph).schedule.peak
        plain = _kept_all(graph).schedule.peak
        payload = [[int(least + f * (plain - least)) for f in BUDGET_SHARES]]
    dist.broadcast_object_list(payload, src=0)
    return payload[0]


def report(args, world, gathered):
    """Print one line per rank and step: loss, measured and predicted peak above the start of
    the step (bytes)."""
    print(f"{args.wrapper} on {world} ranks ({args.device}); plan: "
          + ("least peak" if args.budget is None else f"budget {int(args.budget):,} bytes"))
    for rows in gathered:
        for r in rows:
            diff = (r["measured"] - r["predicted"]) / max(1, r["predicted"])
            print(f"rank {r['rank']} step {r['step']}: loss {r['loss']:.4f}, "
                  f"verified {'bitwise' if r['verified'] else 'NOT bitwise'}, "
                  f"{r['recomputed']} nodes recomputed, peak measured {r['measured']:,} B, "
                  f"predicted {r['predicted']:,} B ({diff:+.1%})")
            for c in r.get("compare", ()):
                print(f"  rank {r['rank']}, {_label(c)}: peak measured {c['peak']:,} B"
                      + ("" if c["predicted"] is None else f", predicted {c['predicted']:,} B "
                         f"({_error(c):+.1%})")
                      + f", {c['recomputed_flops'] / 1e6:,.1f} MFLOP recomputed"
                      + ("" if c.get("bitwise", True) else ", NOT bitwise"))


def _label(c):
    if c["method"] != "plan":
        return c["method"]
    return "plan, least peak" if c["budget"] is None else f"plan, budget {c['budget']:,} B"


def _error(c):
    """The measured peak's distance from the prediction, over the prediction."""
    return (c["peak"] - c["predicted"]) / max(1, c["predicted"])


def compare_markdown(rows):
    """The side-by-side table of a ``--compare`` run's rows (its ``--json``): per rank and
    method of its last step, the measured and predicted peak above the step's start, the
    FLOPs recomputed and whether the plan is bitwise."""
    lines = ["| rank | method | measured peak (B) | predicted (B) | measured - predicted | "
             "recomputed MFLOP | bitwise |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        for c in r.get("compare", ()):
            pred = "-" if c["predicted"] is None else f"{c['predicted']:,}"
            err = "-" if c["predicted"] is None else f"{_error(c):+.2%}"
            bit = {True: "yes", False: "**no**", None: "-"}[c.get("bitwise")]
            lines.append(f"| {r['rank']} | {_label(c)} | {c['peak']:,} | {pred} | {err} | "
                         f"{c['recomputed_flops'] / 1e6:,.1f} | {bit} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
    # Every result is printed and written. The exit skips the interpreter's teardown: on one
    # CI machine gloo and the profiler's C++ threads aborted there under FSDP2 ("terminate
    # called without an active exception", SIGABRT) after a run that had finished and passed.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
