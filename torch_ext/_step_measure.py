"""Measure one compiled graph's training step on copies of its example inputs.

A ``torch.compile`` backend receives a graph and the real tensors it is called with (the
parameters among them, with ``inline_inbuilt_nn_modules``). :func:`graph_step_peak` runs the
compiled forward and backward of such a graph the way a training step does, inside the
backend, without changing anything the caller sees: the inputs without a gradient (the batch,
buffers such as BatchNorm's running statistics, which the step writes) are copied first, the
gradients are taken by ``torch.autograd.grad`` (no ``.grad`` is touched), and the random
generators are restored after. It is what holds a budget where the compiled code is not the
partitioned graphs that the prediction analyses (Inductor's layout optimization, its fusions).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ._compat import tree_flatten
from .measure import MemoryMeter


def _device(example_inputs):
    for a in example_inputs:
        if isinstance(a, torch.Tensor):
            return a.device
    return torch.device("cpu")


def _differentiable(outputs):
    return [o for o in tree_flatten(outputs)[0]
            if isinstance(o, torch.Tensor) and o.requires_grad]


def graph_step_peak(compiled: Callable[..., Any], example_inputs: Sequence[Any]) -> int | None:
    """Bytes one forward and backward of `compiled` holds at its highest point above its start.

    The step runs twice, the first to warm up (kernels loaded, libraries' workspaces made),
    the second under :class:`torch_ext.measure.MemoryMeter` on the inputs' device. The
    backward seeds every differentiable output with ones (a scalar loss: its gradient 1) and
    takes the gradients of the inputs that require one.

    Parameters
    ----------
    compiled : callable
        The backend's compiled graph, called as ``compiled(*inputs)``; its backward compiled
        already (``force_non_lazy_backward_lowering``: a lazy backward compilation inside a
        backend breaks Dynamo's compile metrics).
    example_inputs : sequence
        The backend's example inputs: real tensors (and Python scalars).

    Returns
    -------
    int or None
        Bytes above the level at the step's start, the gradients included (the inputs
        themselves not); None where no output or no input needs a gradient (no backward). A
        step that runs out of device memory (``torch.OutOfMemoryError``: a plan fitted to a
        budget near the device's memory by the prediction, which the compiled code exceeds)
        counts as holding all of it (:func:`device_memory`), so that a search lowers its
        budget instead of failing; the memory it held is released first.
    """
    args = [a.clone() if isinstance(a, torch.Tensor) and not a.requires_grad else a
            for a in example_inputs]
    wrt = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    device = _device(example_inputs)

    def step():
        outputs = _differentiable(compiled(*args))
        if not outputs or not wrt:
            return None
        return torch.autograd.grad(outputs, wrt, [torch.ones_like(o) for o in outputs],
                                   allow_unused=True)

    devices = [device] if device.type == "cuda" else []
    try:
        with torch.random.fork_rng(devices=devices), torch.enable_grad():
            if step() is None:
                return None
            with MemoryMeter(device) as meter:
                grads = step()
            del grads
    except torch.OutOfMemoryError:
        if device.type == "cuda":
            torch.cuda.empty_cache()
        return device_memory(device)
    return meter.result.peak if meter.result is not None else None


def device_memory(device: torch.device) -> int:
    """Bytes of memory `device` has: a GPU's total (``torch.cuda.get_device_properties``), the
    machine's physical memory for the CPU."""
    if device.type == "cuda":
        return int(torch.cuda.get_device_properties(device).total_memory)
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
