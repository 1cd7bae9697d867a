"""The workspace of each operation of a compiled graph, measured by running it once.

A joint graph names every tensor an operation returns, not what its kernel allocates and frees
inside the call: on the CPU a convolution's column buffers, a batch normalization's
temporaries; on CUDA what cuDNN takes from the caching allocator. :func:`probe` runs each
distinct operation of a joint graph (same ATen overload, same argument shapes, strides, dtypes
and other arguments) once on fresh tensors of its arguments' sizes under a
:class:`~torch_ext.measure.MemoryMeter` and keeps the bytes its call held above its outputs at
its highest point. Floating-point arguments are random, integer and boolean ones zero (every
index in range); PyTorch's CPU and device random states are restored afterwards, so a random
operation draws nothing from the step's generators. An operation whose call fails on such
inputs counts 0 bytes. The probe sets aside the FakeTensorMode a partition function runs
under. On the CPU the meter needs the profiler: where one already runs (a graph
compiled inside a measured region), nothing is measured and a warning says so.
"""

from __future__ import annotations

import operator
import warnings
from collections.abc import Callable
from typing import Any, cast

import torch

from ._compat import compile_apis, op_schema, profiler_enabled
from ._ops import return_alias, value_bytes
from .measure import MemoryMeter

__all__ = ["probe", "op_key"]


def _meta(x: Any) -> Any:
    if isinstance(x, torch.fx.Node):
        return _meta(x.meta.get("val"))
    if isinstance(x, torch.Tensor):
        return ("T", tuple(x.shape), tuple(x.stride()), str(x.dtype), str(x.device))
    if isinstance(x, (list, tuple)):
        return tuple(_meta(v) for v in x)
    return repr(x)


def op_key(node: torch.fx.Node) -> tuple:
    """What makes two FX calls the same operation for the workspace: the ATen overload, its
    arguments' shapes, strides, dtypes and devices, and its other arguments."""
    return (str(node.target), _meta(node.args), _meta(tuple(sorted(node.kwargs.items()))))


def _materialize(x: Any, device: torch.device, channels_last: bool = False) -> Any:
    if isinstance(x, torch.fx.Node):
        return _materialize(x.meta.get("val"), device, channels_last)
    if isinstance(x, torch.Tensor):
        t = torch.empty_strided(tuple(x.shape), tuple(x.stride()), dtype=x.dtype, device=device)
        if channels_last and t.dim() == 4:
            t = t.contiguous(memory_format=torch.channels_last)
        return t.normal_() if t.is_floating_point() else t.zero_()
    if isinstance(x, (list, tuple)):
        return type(x)(_materialize(v, device, channels_last) for v in x)
    return x


def _probed(node: torch.fx.Node) -> bool:
    """Whether `node` is an ATen call that makes tensors of its own (not an item, not a view)."""
    if node.op != "call_function" or node.target is operator.getitem:
        return False
    return (op_schema(node.target) is not None and return_alias(node.target) is None
            and value_bytes(node.meta.get("val")) > 0)


def _device(gm: torch.fx.GraphModule) -> torch.device | None:
    for n in gm.graph.nodes:
        val = n.meta.get("val")
        if isinstance(val, torch.Tensor):
            return val.device
    return None


def probe(gm: torch.fx.GraphModule, channels_last: tuple = ()) -> dict[tuple, int]:
    """Workspace bytes per :func:`op_key` of the operations of `gm` (a joint graph).

    Parameters
    ----------
    gm : torch.fx.GraphModule
        A graph whose nodes carry fake tensors in ``meta["val"]`` with concrete sizes.
    channels_last : tuple of OpOverload
        Operations run with their 4-dimensional tensor arguments in channels-last memory
        format, as the compiled code runs them (Inductor's layout optimization:
        :data:`torch_ext._inductor_layout.CONVOLUTIONS`); none by default.

    Returns
    -------
    dict
        :func:`op_key` -> bytes (0 or more) the call held above its outputs at its highest
        point.
    """
    device = _device(gm)
    todo: dict[tuple, torch.fx.Node] = {}
    for n in gm.graph.nodes:
        if _probed(n):
            todo.setdefault(op_key(n), n)
    if device is None or not todo:
        return {}
    if device.type != "cuda" and profiler_enabled():
        warnings.warn("torch_ext.compiled: a torch profiler is running, so the workspace of "
                      "the compiled graph's operations is not measured and not in the "
                      "prediction; compile outside the profiled region", stacklevel=2)
        return {}
    devices = [device] if device.type == "cuda" else []
    out: dict[tuple, int] = {}
    with compile_apis()["unset_fake_mode"](), torch.random.fork_rng(devices=devices), \
            torch.no_grad(), MemoryMeter(device) as meter:
        for i, (key, n) in enumerate(todo.items()):
            cl = n.target in channels_last
            try:
                args = _materialize(n.args, device, cl)
                kwargs = _materialize(dict(n.kwargs), device, cl)
            except (RuntimeError, TypeError, ValueError):
                continue
            try:
                with meter.window(str(i)):
                    cast(Callable[..., Any], n.target)(*args, **kwargs)
            except (RuntimeError, TypeError, ValueError, IndexError):
                continue
            finally:
                del args, kwargs
    windows = meter.result.windows   # type: ignore[union-attr]  # set: the block ended
    for i, (key, n) in enumerate(todo.items()):
        if str(i) in windows:
            out[key] = max(0, windows[str(i)] - value_bytes(n.meta.get("val")))
    return out
