"""Operator-level graphs of a GPT-like decoder stack, traced from PyTorch, for the planner
benchmarks (``examples/bench_scale.py``'s family "gpt").

``torch_models.GPTStack`` (pre-LayerNorm blocks: fused q/k/v projection split into heads,
causal ``scaled_dot_product_attention`` with dropout, GELU MLP, dropout after each sublayer,
residual adds, a head tied to the token embedding) at width 256, 4 heads, 128 tokens, a
vocabulary of 8,192 and batch 2, traced by :func:`torch_ext.trace` with FLOP costs: 64 nodes a
layer plus 15, about 1,450 lower sets a layer. The width only scales bytes and FLOPs; the
graph's shape is that of the CPU preset's 12-layer GPT-2-small (783 nodes at 12 layers).

Needs the ``torch`` extra; :func:`available` says whether it is installed.
"""

import functools
import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

NODES_PER_LAYER = 64
FIXED_NODES = 15   # embeddings, their add and dropout, the final LayerNorm, head and loss
SIZES = dict(dim=256, heads=4, length=128, vocab=8192)
BATCH = 2


def available():
    """Whether PyTorch is installed (the ``torch`` extra)."""
    return importlib.util.find_spec("torch") is not None


@functools.lru_cache(maxsize=None)
def _traced(layers):
    import torch

    import torch_models
    from torch_ext import trace

    torch.manual_seed(0)
    net = torch_models.network("gpt", "test", layers=layers, **SIZES)
    model = net.build()
    batch = net.make_batch(BATCH, torch.Generator().manual_seed(0))
    return trace(lambda: net.loss(model, batch), measure_memory=False, model=model)


def gpt(layers):
    """The traced step of the GPT-like stack with `layers` blocks: a fresh
    :class:`lowerset.Graph` (no planner results cached on it) with the trace's nodes, edges,
    costs (cost units), bytes and execution facts. The trace runs once per `layers` in a
    process."""
    if layers < 1:
        raise ValueError(f"layers must be at least 1, got {layers}")
    traced = _traced(layers)
    return traced.with_facts(traced.facts)


def sized(nodes):
    """(layers, graph) of the GPT-like stack with about `nodes` nodes (at least one layer)."""
    layers = max(1, round((nodes - FIXED_NODES) / NODES_PER_LAYER))
    return layers, gpt(layers)
