"""Why a step differs from the traced one: the modes a trace records (train or eval, autocast,
device) and the likely cause of a mismatch the executor finds (:class:`torch_ext._replay.
ForwardCheck`), named in its :class:`~torch_ext.StrategyMismatchError`.

A trace keeps the modes in ``graph.attrs[0]["step"]`` (so a graph saved as JSON keeps them):
``training`` (the model's flag, None without ``model=``), ``other_mode`` (the names of the
model's modules whose flag differs from the model's), ``autocast`` (the autocast dtype of the
step's device type when :func:`torch_ext.trace` was called under ``torch.autocast``, else
None) and ``device``.

:func:`user_frame` names where in the user's code an operation was dispatched: for each traced
operation with ``trace(..., debug=True)``, and for the differing operation of a mismatch.
"""

import os
import sys
import warnings
from types import FrameType

import torch

from lowerset.exceptions import UnmodeledMemoryWarning

from ._compat import ddp_rebuilt_buckets
from .exceptions import TraceError

__all__ = ["step_modes", "likely_cause", "autocast_state", "check_wrapper", "user_frame",
           "holds_fsdp2", "warn_fsdp2_unmeasured"]

#: What a user does about DDP's first steps.
_DDP_ADVICE = ("run two steps before tracing (DistributedDataParallel's first step skips the "
               "buffers' broadcast and its second rebuilds the gradient buckets: each runs "
               "other operations than the steps after)")

#: Floating dtypes autocast casts to.
_LOW = (torch.float16, torch.bfloat16)

#: The directories whose frames are not the user's code: PyTorch's and torch_ext's.
_INTERNAL = tuple(os.path.dirname(os.path.abspath(m)) + os.sep for m in (torch.__file__,
                                                                          __file__))


def user_frame():
    """Where the user's code dispatched the operation under way: ``(file, line, function)``
    of the innermost frame of the calling stack outside torch and torch_ext, or None where
    every frame is theirs. Walks the frames (``sys._getframe``), reading no source file."""
    f: FrameType | None = sys._getframe(1)
    while f is not None:
        code = f.f_code
        if not code.co_filename.startswith(_INTERNAL):
            return (code.co_filename, f.f_lineno, code.co_name)
        f = f.f_back
    return None


def step_modes(model, device):
    """The modes of a step about to be traced: a JSON-ready dict (see the module docstring).

    Parameters
    ----------
    model : torch.nn.Module or None
    device : torch.device

    Returns
    -------
    dict
    """
    training, other = None, []
    if model is not None:
        training = bool(model.training)
        other = [name for name, m in model.named_modules() if name and m.training != training]
    return {"training": training, "other_mode": other,
            "autocast": autocast_state(device), "device": str(device)}


def check_wrapper(model):
    """Raise TraceError where `model` is a data-parallel wrapper whose steps a plan cannot
    follow: FSDP1 (``FullyShardedDataParallel``), whose forward pass swaps the parameters'
    storage in and out, or a DistributedDataParallel before its steady step (one that has not
    yet rebuilt its gradient buckets, where it rebuilds them: with a static graph, or without
    ``find_unused_parameters``)."""
    if model is None or not torch.distributed.is_available():
        return
    from torch.distributed.fsdp import FullyShardedDataParallel

    if any(isinstance(m, FullyShardedDataParallel) for m in model.modules()):
        raise TraceError("the model is wrapped in FSDP1 (FullyShardedDataParallel), which "
                         "torch_ext does not run: its steps differ from the traced one; use "
                         "FSDP2 (torch.distributed.fsdp.fully_shard) or "
                         "DistributedDataParallel")
    if not isinstance(model, torch.nn.parallel.DistributedDataParallel):
        return
    rebuilds = model.static_graph or not model.find_unused_parameters
    if rebuilds and not ddp_rebuilt_buckets(model):
        raise TraceError(f"the model is a DistributedDataParallel in its first two steps: "
                         f"{_DDP_ADVICE}, then trace")


def holds_fsdp2(model):
    """Whether a module of `model` is sharded by FSDP2 (``fully_shard``)."""
    if model is None or not torch.distributed.is_available():
        return False
    from torch.distributed.fsdp import FSDPModule

    return any(isinstance(m, FSDPModule) for m in model.modules())


def warn_fsdp2_unmeasured():
    """Warn (UnmodeledMemoryWarning) that a trace of an FSDP2 model with ``measure_memory=False``
    leaves out what FSDP2 allocates around the traced operations."""
    warnings.warn(UnmodeledMemoryWarning(
        "the model has modules sharded by FSDP2 (fully_shard) and measure_memory=False: the "
        "schedule leaves out the parameters FSDP2 gathers and frees around each module and its "
        "reduce-scatter buffers, which the trace measures only with measure_memory=True, so a "
        "step's measured peak can be well above the prediction"), stacklevel=4)


def autocast_state(device):
    """The autocast dtype of `device`'s type as a string ("bfloat16") where autocast is on,
    else None. Reliable outside a dispatched operation only (inside one that autocast wraps,
    PyTorch reports autocast off)."""
    kind = torch.device(device).type
    try:
        if not torch.is_autocast_enabled(kind):
            return None
        return str(torch.get_autocast_dtype(kind)).replace("torch.", "")
    except (RuntimeError, TypeError):  # pragma: no cover - a device type without autocast
        return None


def likely_cause(modes, model, autocast_now, func, kwargs, tensors, expected, traced_name):
    """The likely cause of a mismatch at an operation, as a sentence, or "" when none shows.

    Parameters
    ----------
    modes : dict
        The traced step's modes (:func:`step_modes`; empty for a graph traced before they were
        recorded).
    model : torch.nn.Module or None
        The model the executor was given.
    autocast_now : str or None
        :func:`autocast_state` when the executor's block was entered.
    func : torch._ops.OpOverload
        The operation dispatched.
    kwargs : dict
        Its keyword arguments.
    tensors : list of torch.Tensor
        Its tensor arguments.
    expected : tuple or None
        Per tensor argument of the traced operation, ``("node", ...)`` or ``("external",
        (shape, dtype, device))``; None for an absorbed operation.
    traced_name : str
        The traced operation's name.

    Returns
    -------
    str
    """
    for cause in (_mode_cause(modes, model), _autocast_cause(modes, autocast_now, func, kwargs,
                                                               traced_name),
                  _argument_cause(tensors, expected), _ddp_cause(model)):
        if cause:
            return cause
    return ""


def _ddp_cause(model):
    """A DistributedDataParallel model whose trace may come from its first steps (with
    ``find_unused_parameters`` it never rebuilds its buckets, and the trace cannot tell)."""
    if not isinstance(model, torch.nn.parallel.DistributedDataParallel):
        return ""
    return f"if the trace ran in the model's first two steps, {_DDP_ADVICE}, then re-trace"


def _mode_cause(modes, model):
    """Train or eval mode: the model's flags now against the traced ones."""
    traced = modes.get("training")
    if model is None or traced is None:
        return ""
    now, was = _mode(model.training), _mode(traced)
    if model.training != traced:
        call = "model.train()" if traced else "model.eval()"
        return (f"the model is in {now} mode; it was traced in {was} mode: call {call} before "
                f"the step, or re-trace in {now} mode and re-plan")
    other = [name for name, m in model.named_modules() if name and m.training != traced]
    if other != list(modes.get("other_mode", [])):
        changed = sorted(set(other) ^ set(modes.get("other_mode", [])))
        return (f"module {changed[0]!r} of the model is in another train/eval mode than when "
                "the step was traced: set the modes as they were, or re-trace and re-plan")
    return ""


def _mode(training):
    return "train" if training else "eval"


def _autocast_cause(modes, autocast_now, func, kwargs, traced_name):
    """Autocast: on when the block was entered and not so (or of another dtype) in the trace,
    or a cast to a low-precision dtype that only one of the two steps makes (autocast entered
    inside the step)."""
    traced = modes.get("autocast")
    if autocast_now and autocast_now != traced:
        was = f"on with {traced}" if traced else "off"
        return (f"autocast is on ({autocast_now}); the step was traced with autocast {was}: "
                "run it under the same torch.autocast as the trace, or re-trace and re-plan")
    cast = "_to_copy" in str(func) and kwargs.get("dtype") in _LOW
    if cast and "_to_copy" not in traced_name:
        dtype = str(kwargs["dtype"]).replace("torch.", "")
        return (f"the step casts to {dtype} where the traced step does not: autocast is on now "
                "and was off (or of another dtype) in the trace; run the step under the same "
                "torch.autocast as the trace, or re-trace and re-plan")
    if "_to_copy" in traced_name and not cast and "_to_copy" not in str(func):
        return ("the traced step casts here and this step does not: the trace ran under "
                "torch.autocast and this step does not (or under another dtype); run the step "
                "under the same torch.autocast, or re-trace and re-plan")
    return ""


def _argument_cause(tensors, expected):
    """Another dtype, device or shape of an external argument (the batch, a parameter)."""
    if expected is None or len(tensors) != len(expected):
        return ""
    for i, (t, x) in enumerate(zip(tensors, expected)):
        if x[0] != "external":
            continue
        shape, dtype, device = x[1]
        got = str(t.dtype).replace("torch.", "")
        if got != dtype:
            return (f"argument {i} is {got} where the traced step had {dtype}: the inputs' or "
                    f"the model's dtype differs from the trace's; cast them as traced, or "
                    "re-trace and re-plan")
        if str(t.device) != device:
            return (f"argument {i} is on {t.device} where the traced step had {device}: the "
                    "model or the batch is on another device than the trace's; move them, or "
                    "re-trace on this device and re-plan")
        if tuple(t.shape) != tuple(shape):
            return (f"argument {i} has shape {tuple(t.shape)} where the traced step had "
                    f"{tuple(shape)}: another batch shape; re-trace at this shape and re-plan "
                    "(torch_ext.max_batch_size extrapolates traces to other batch sizes)")
    return ""
