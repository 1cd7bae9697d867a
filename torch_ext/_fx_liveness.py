"""Liveness analysis of the forward and backward graphs AOTAutograd runs: the bytes a compiled
step holds, operation by operation, as the graphs' code frees them.

AOTAutograd's boxed code (``aot_eager``) clears its argument list and drops each name after its
last use, so a tensor lives while some name of its memory does: the operation that made it, its
views (ATen ops whose schema returns an alias, ``copy_`` and in-place ops included) and, for an
operation with several outputs, the tuple until its last item is taken. The caller holds the
forward graph's inputs (parameters, the batch), the outputs it returns and the backward graph's
outputs (gradients), and makes the gradients of the returned outputs before the backward graph
runs; the backward graph releases each saved tensor after its last use there. Each operation
adds its outputs' bytes and, for the moment of its call, its workspace: what the kernel
allocates and frees inside the call, which no graph names (measured by
:mod:`torch_ext._workspace`). Under ``inductor`` fused kernels allocate fewer intermediate
tensors than the graphs name, while its layout optimization adds channels-last copies of
convolutions' inputs (the `copies` of :func:`step_peak`, :mod:`torch_ext._inductor_layout`);
with those, the figure is an upper bound there.

:func:`step_peak` is what :class:`torch_ext.compiled.PlannedPartition` holds each plan's
partitioned graphs to.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any

import torch

from . import _ops

__all__ = ["step_peak"]


def _aliases(node: torch.fx.Node) -> bool:
    """Whether `node`'s first output is an alias of its first argument (a view, an in-place op,
    ``copy_``)."""
    return _ops.return_alias(node.target) is not None


class _Memory:
    """Storages and the names that keep them: a storage is freed when its last name dies,
    unless it is held (by the caller)."""

    def __init__(self, level: int) -> None:
        self.level = self.peak = level
        self.size: dict[Any, int] = {}
        self.names: dict[Any, set] = {}
        self.held: set = set()

    def transient(self, nbytes: int) -> None:
        """`nbytes` held for a moment above the current level (an operation's workspace)."""
        self.peak = max(self.peak, self.level + nbytes)

    def allocate(self, key: Any, nbytes: int) -> None:
        self.size[key] = nbytes
        self.names.setdefault(key, set())
        self.level += nbytes
        self.peak = max(self.peak, self.level)

    def name(self, key: Any, name: Any) -> None:
        self.names.setdefault(key, set()).add(name)

    def drop(self, key: Any, name: Any) -> None:
        names = self.names.get(key)
        if names is None:
            return
        names.discard(name)
        if not names and key not in self.held:
            self.level -= self.size.pop(key, 0)
            del self.names[key]


def _run(gm: torch.fx.GraphModule, memory: _Memory, inputs: dict[str, Any],
         workspace: Callable[[torch.fx.Node], int]) -> dict[str, Any]:
    """Walk `gm` in order over `memory`; `inputs` maps each placeholder's name to its storage
    key (already allocated or held); `workspace(node)` is the bytes its call holds above its
    outputs. Returns the storage key of each output name."""
    nodes = list(gm.graph.nodes)
    last = {}
    for i, n in enumerate(nodes):
        for a in n.all_input_nodes:
            last[a] = i
    keys: dict[torch.fx.Node, list[Any]] = {}   # node -> storages its name keeps
    outputs: dict[str, Any] = {}
    for i, n in enumerate(nodes):
        if n.op == "placeholder":
            keys[n] = [inputs[n.name]]
        elif n.op == "call_function":
            keys[n] = _call(n, keys, memory)
            memory.transient(workspace(n))
        elif n.op == "output":
            for a in n.all_input_nodes:
                outputs[a.name] = keys[a][0] if keys[a] else None
            break
        for k in keys.get(n, []):
            memory.name(k, n)
        for a in {a for a in n.all_input_nodes if last[a] == i}:
            for k in keys[a]:
                memory.drop(k, a)
        if n.op == "call_function" and not n.users:
            for k in keys[n]:
                memory.drop(k, n)
    return outputs


def _call(n: torch.fx.Node, keys: dict, memory: _Memory) -> list[Any]:
    """The storages node `n`'s name keeps, allocating those it makes."""
    src = n.args[0] if n.args and isinstance(n.args[0], torch.fx.Node) else None
    if n.target is operator.getitem and src is not None:
        if _aliases(src):                      # an item of a list of views (split, unbind)
            return list(keys[src])
        return [(src, n.args[1])]              # its own output, made by `src`
    if _aliases(n) and src is not None:
        return list(keys[src])
    val = n.meta.get("val")
    made: list[tuple[Any, int]]
    if isinstance(val, (tuple, list)):
        made = [((n, k), _ops.value_bytes(v)) for k, v in enumerate(val)
                if isinstance(v, torch.Tensor)]
    else:
        made = [(n, _ops.value_bytes(val))] if isinstance(val, torch.Tensor) else []
    for key, nbytes in made:
        memory.allocate(key, nbytes)
    return [key for key, _ in made]


def step_peak(fw: torch.fx.GraphModule, bw: torch.fx.GraphModule, resident: int,
              workspace: Callable[[torch.fx.Node], int] = lambda node: 0,
              copies: Mapping[str, int] | None = None) -> tuple[int, int]:
    """Bytes a compiled step holds at its highest point: the forward graph, then the backward.

    Parameters
    ----------
    fw, bw : torch.fx.GraphModule
        The forward and backward graphs of one partition (the backward graph's placeholders
        named as the forward graph's nodes they receive, as AOTAutograd's partitioners name
        them; the others are gradients of the forward's outputs).
    resident : int
        Bytes in use before the forward graph runs, its inputs included.
    workspace : callable
        ``workspace(node) -> bytes`` an FX call holds above its outputs at its highest point
        (:func:`torch_ext._workspace.probe`); none by default.
    copies : mapping, optional
        Forward placeholder name -> bytes of a copy the compiled code makes of it at the
        forward graph's start and uses in its place, saving the copy where the backward reads
        it (Inductor's channels-last copies, :func:`torch_ext._inductor_layout.layout_copies`);
        none by default.

    Returns
    -------
    (int, int)
        The highest bytes in use over the forward graph, and over the backward graph (resident
        bytes included).
    """
    memory = _Memory(resident)
    fw_keys = {}
    for n in fw.graph.nodes:
        if n.op != "placeholder":
            continue
        if copies and n.name in copies:   # dies at its last use, in the forward or backward
            fw_keys[n.name] = ("copy", n.name)
            memory.allocate(fw_keys[n.name], copies[n.name])
        else:
            fw_keys[n.name] = ("input", n.name)
            memory.held.add(fw_keys[n.name])
    saved = _run(fw, memory, fw_keys, workspace)
    forward = memory.peak
    for key in list(memory.names):   # the forward graph's outputs: names of its code no more
        memory.names[key] = set()
    bw_keys = {}
    for n in bw.graph.nodes:
        if n.op != "placeholder":
            continue
        if n.name in saved:
            bw_keys[n.name] = saved[n.name]
        else:   # a gradient of a forward output: made by the caller's backward
            bw_keys[n.name] = ("grad", n.name)
            memory.allocate(bw_keys[n.name], _ops.value_bytes(n.meta.get("val")))
    received = set(bw_keys.values())
    for key in saved.values():
        if key is not None and key not in received:
            memory.held.add(key)    # a returned output: the caller holds it
    memory.peak = memory.level   # the backward's own highest point from here
    _run(bw, memory, bw_keys, workspace)
    return forward, memory.peak
