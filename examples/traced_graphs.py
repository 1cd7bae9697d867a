"""Operator-level graphs of transformer decoder stacks, traced from PyTorch, for the planner
benchmarks (``examples/bench_scale.py``'s families "gpt" and "llama").

- "gpt": ``torch_models.GPTStack`` (pre-LayerNorm blocks: fused q/k/v projection split into
  heads, causal ``scaled_dot_product_attention`` with dropout, GELU MLP, dropout after each
  sublayer, residual adds, a head tied to the token embedding) at width 256, 4 heads, 128
  tokens, a vocabulary of 8,192 and batch 2: 64 nodes a layer plus 15, about 1,450 lower
  sets a layer. The width only scales bytes and FLOPs; the graph's shape is that of the CPU
  preset's 12-layer GPT-2-small (783 nodes at 12 layers).
- "llama": ``torch_models.LlamaStack`` (RMSNorm, rotary embeddings on strided slices,
  grouped-query attention through ``repeat_interleave``, SwiGLU) at width 128, 4 query and
  2 key/value heads, 64 tokens, a vocabulary of 256 and batch 4 (activations, not the
  logits, fill most of the step).

Each is traced by :func:`torch_ext.trace` with FLOP costs. Needs the ``torch`` extra;
:func:`available` says whether it is installed.
"""

import functools
import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

STACKS = ("gpt", "llama")
#: Per stack: the network's sizes (``torch_models.network``) and the traced batch.
SIZES = {"gpt": dict(dim=256, heads=4, length=128, vocab=8192),
         "llama": dict(dim=128, heads=4, kv_heads=2, length=64, vocab=256)}
BATCH = {"gpt": 2, "llama": 4}
#: Nodes a layer adds, and the nodes of the rest (embeddings, final norm, head and loss).
NODES_PER_LAYER = {"gpt": 64, "llama": 72}
FIXED_NODES = {"gpt": 15, "llama": 13}


def available():
    """Whether PyTorch is installed (the ``torch`` extra)."""
    return importlib.util.find_spec("torch") is not None


@functools.lru_cache(maxsize=None)
def _traced(stack, layers):
    import torch

    import torch_models
    from torch_ext import trace

    torch.manual_seed(0)
    net = torch_models.network(stack, "test", layers=layers, **SIZES[stack])
    model = net.build()
    batch = net.make_batch(BATCH[stack], torch.Generator().manual_seed(0))
    return trace(lambda: net.loss(model, batch), measure_memory=False, model=model)


def traced(stack, layers):
    """The traced step of `stack` ("gpt" or "llama") with `layers` blocks: a fresh
    :class:`lowerset.Graph` (no planner results cached on it) with the trace's nodes, edges,
    costs (cost units), bytes and execution facts. The trace runs once per stack and depth in
    a process."""
    if stack not in STACKS:
        raise ValueError(f"unknown stack {stack!r}; expected one of {STACKS}")
    if layers < 1:
        raise ValueError(f"layers must be at least 1, got {layers}")
    g = _traced(stack, layers)
    return g.with_facts(g.facts)


def gpt(layers):
    """:func:`traced` of the GPT-like stack."""
    return traced("gpt", layers)


def llama(layers):
    """:func:`traced` of the LLaMA-style stack."""
    return traced("llama", layers)


def sized(nodes, stack="gpt"):
    """(layers, graph) of `stack` with about `nodes` nodes (at least one layer)."""
    layers = max(1, round((nodes - FIXED_NODES[stack]) / NODES_PER_LAYER[stack]))
    return layers, traced(stack, layers)
