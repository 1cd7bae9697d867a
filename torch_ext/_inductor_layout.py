"""What Inductor's layout optimization adds to the memory of a partitioned step.

Inductor lowers the two graphs a partition function returns with its own memory layouts. On
a graph with convolutions (on the CPU with oneDNN, always; on CUDA by its heuristics), its
layout optimization runs every convolution in channels-last memory format
(``GraphLowering.decide_layout_opt``). A convolution's argument that the graph receives in
another format, a parameter or an input, is copied to channels-last at the start of the forward
graph, and where the backward reads it, the forward graph saves the copy, not the original:
the copy lives until its last use in the backward graph, beside the parameter it copies.
A channels-last convolution also holds a workspace of its own: on the CPU, oneDNN's backward
of a 3x3 convolution over 512 channels holds 18.9 MB above its outputs in channels-last and
9.4 MB in the contiguous format.

:func:`layout_copies` names the copies of one graph's forward part and their bytes, for the
planner's graph and the liveness analysis (:func:`torch_ext._fx_liveness.step_peak`);
:data:`CONVOLUTIONS` are the operations the workspace probe runs in channels-last under the
optimization (:func:`torch_ext._workspace.probe`).

Measured on the CPU (one thread, torch 2.13): with both, the measured peaks of ResNet-50's
compiled steps under Inductor lie 1.0-2.9% below the prediction (fused kernels allocate less
than the graphs name); without them, 8.5 to 29.0 MB above it.
"""

from __future__ import annotations

import torch

from ._compat import compile_apis

__all__ = ["layout_optimized", "layout_copies", "CONVOLUTIONS", "channels_last"]

_CONV = torch.ops.aten.convolution.default

#: The operations that run in channels-last under Inductor's layout optimization (the
#: forward convolution and its backward).
CONVOLUTIONS = (_CONV, torch.ops.aten.convolution_backward.default)


def layout_optimized(gm: torch.fx.GraphModule) -> bool:
    """Whether Inductor's layout optimization will run `gm`'s convolutions in channels-last
    (its own decision, ``GraphLowering.decide_layout_opt``, for training, under the current
    ``torch._inductor.config``).

    Parameters
    ----------
    gm : torch.fx.GraphModule
        A joint or forward graph whose nodes carry fake tensors in ``meta["val"]``.
    """
    return bool(compile_apis()["decide_layout_opt"](gm, is_inference=False))


def channels_last(t: torch.Tensor) -> bool:
    """Whether a 4-dimensional tensor's strides are channels-last already (a 1x1 kernel's
    contiguous weight is); Inductor copies the others."""
    return t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last)


def layout_copies(fw: torch.fx.GraphModule) -> dict[str, int]:
    """The forward inputs that Inductor's layout optimization copies to channels-last.

    Parameters
    ----------
    fw : torch.fx.GraphModule
        A joint graph or the forward graph partitioned from it (the same placeholder names;
        placeholders carry fake tensors in ``meta["val"]``).

    Returns
    -------
    dict
        Placeholder name -> bytes of its copy, for each 4-dimensional placeholder that is the
        input or the weight of a convolution and is not channels-last already.
    """
    copies: dict[str, int] = {}
    for n in fw.graph.nodes:
        if n.op != "call_function" or n.target is not _CONV:
            continue
        for a in n.args[:2]:
            if not isinstance(a, torch.fx.Node) or a.op != "placeholder":
                continue
            val = a.meta.get("val")
            if isinstance(val, torch.Tensor) and val.dim() == 4 and not channels_last(val):
                copies[a.name] = val.numel() * val.element_size()
    return copies
