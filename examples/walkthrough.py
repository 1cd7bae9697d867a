"""Train a batch that does not fit: the README's walkthrough, as a script that runs on the CPU.

A small convolutional network and a memory cap (bytes of the whole training step: parameters,
inputs, activations, gradients, workspace). The script

1. traces one step at the batch size the user wants and predicts the plain step's peak
   (``lowerset.schedule(graph).peak``), which is above the cap;
2. plans to the cap (``lowerset.solve``), runs the step under ``RecomputeHook`` and measures it
   (``chainer_ext.peak_memory``; on the CPU the resident parameters and inputs are added);
3. saves the traced graph, plans it again with the command line (``python -m lowerset plan``) and
   loads that plan for the same step;
4. finds the largest batch under the cap without and with recomputation
   (``chainer_ext.max_batch_size``).

Usage::

    python examples/walkthrough.py [--cap 200MB] [--batch 48] [--out DIR]

It exits with status 1 if a step planned to the cap measures above it (3% tolerance).
"""

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import chainer
import chainer.functions as F
import chainer.links as L
import numpy as np

import lowerset
from chainer_ext import RecomputeHook, max_batch_size, peak_memory, trace
from lowerset.units import format_size, parse_size

TOLERANCE = 0.03


class SmallNet(chainer.Chain):
    """A stem convolution, `depth` 3x3 convolutions with batch normalization and ReLU at one
    resolution, then global average pooling and a linear classifier."""

    def __init__(self, depth=12, width=32, n_classes=10):
        super().__init__()
        with self.init_scope():
            self.stem = L.Convolution2D(3, width, 3, pad=1)
            self.convs = chainer.ChainList(*[L.Convolution2D(width, width, 3, pad=1, nobias=True)
                                             for _ in range(depth)])
            self.norms = chainer.ChainList(*[L.BatchNormalization(width) for _ in range(depth)])
            self.fc = L.Linear(width, n_classes)

    def forward(self, x):
        h = F.relu(self.stem(x))
        for conv, norm in zip(self.convs, self.norms):
            h = F.relu(norm(conv(h)))
        return self.fc(F.average(h, axis=(2, 3)))


def make_step(model, x, t):
    """loss_fn(b): the forward pass on the first b samples of a preallocated batch."""
    return lambda b: F.softmax_cross_entropy(model(x[:b]), t[:b])


def measured_step(model, loss_fn, b, strategy, resident):
    """Bytes of one real training step at batch `b` (under the plan when there is one)."""
    def step():
        model.cleargrads()
        if strategy is None:
            loss_fn(b).backward()
        else:
            with RecomputeHook(strategy):
                loss_fn(b).backward()
    return peak_memory(step).peak + resident


def cli_plan(graph, cap, out):
    """Plan the saved graph with the command line (`cap`: a size string); return the plan."""
    gpath, ppath = out / "graph.json", out / "plan.json"
    lowerset.save_graph(graph, gpath)
    cmd = [sys.executable, "-m", "lowerset", "plan", str(gpath), "--budget", str(cap),
           "-o", str(ppath)]
    print(f"$ lowerset plan graph.json --budget {cap} -o plan.json")
    print(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip())
    return lowerset.load_strategy(ppath, graph=graph)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cap", default="200MB", help="memory cap of the whole step (default 200MB)")
    ap.add_argument("--batch", type=int, default=48, help="batch size wanted (default 48)")
    ap.add_argument("--out", type=Path, help="directory for graph.json and plan.json")
    args = ap.parse_args(argv)
    cap = parse_size(args.cap)
    rng = np.random.default_rng(0)
    model = SmallNet()
    n = 4 * args.batch
    x = rng.standard_normal((n, 3, 32, 32), dtype=np.float32)
    t = rng.integers(0, 10, n).astype(np.int32)
    loss_fn = make_step(model, x, t)
    ok = True
    with chainer.using_config("train", True):
        graph = trace(lambda: loss_fn(args.batch))
        resident = graph.facts.resident
        plain = lowerset.schedule(graph).peak
        print(f"cap {format_size(cap)}; batch {args.batch}: the plain step needs "
              f"{format_size(plain)} (predicted)")
        plan = lowerset.solve(graph, budget=cap)
        sched = plan.schedule
        got = measured_step(model, loss_fn, args.batch, plan, resident)
        print(f"planned to the cap: recomputes {sched.recompute_cost} cost units of "
              f"{graph.total_cost()}, predicted {format_size(sched.peak)}, measured "
              f"{format_size(got)}")
        ok &= got <= cap * (1 + TOLERANCE)
        with tempfile.TemporaryDirectory() as tmp:
            out = args.out or Path(tmp)
            out.mkdir(parents=True, exist_ok=True)
            cli = cli_plan(graph, args.cap, out)
            got = measured_step(model, loss_fn, args.batch, cli, resident)
            print(f"the command line's plan measures {format_size(got)}")
            ok &= got <= cap * (1 + TOLERANCE)
        for planner in (None, "lowerset"):
            r = max_batch_size(loss_fn, cap, planner=planner, max_batch=n, params=model)
            print(f"largest batch under the cap, planner={planner!r}: {r.batch_size} "
                  f"(measured {format_size(r.measured_peak)})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
