"""The private PyTorch APIs torch_ext uses, each looked up here and nowhere else.

Tracing and executing a step needs more of PyTorch than its documented surface: a dispatch mode
sees every ATen call (``torch.utils._python_dispatch``), the trace asks which autograd node is
running (``torch._C._current_autograd_node``) and reads each operation's schema (``_schema``)
and the profiler's memory events (``torch._C._autograd``). Each such API is a row of
:data:`APIS`, with what torch_ext uses it for; importing this module looks every row up and
exposes it under a plain name, and every other module of torch_ext reaches it only through
here. A PyTorch that moves or drops one of them then fails at ``import torch_ext``, naming the
API and the versions this table was checked on (:data:`CHECKED_ON`), rather than deep inside a
trace. Two kinds of rows are not looked up at import: :data:`ON_FIRST_USE` (``torch._dynamo``,
whose import takes about 1.5 s, paid only by a step that has modules to check for
``torch.compile``) and :data:`SET_BY_COMPILE` (attributes that exist only on what
``torch.compile`` returns; ``tests/torch_ext/test_compat.py`` compiles a function to check
them).

A missing API raises :class:`~torch_ext.exceptions.MissingTorchAPIError`, both a
:class:`~torch_ext.exceptions.TorchExtError` and an :class:`ImportError`: ``import torch_ext``
raises it, and code that treats the PyTorch front end as optional catches ImportError there
(as it does for a missing PyTorch), while ``except lowerset.LowersetError`` catches it as one
of lowerset's errors.
"""

import functools
import importlib

import torch

from .exceptions import MissingTorchAPIError

__all__ = ["TorchDispatchMode", "pop_dispatch_mode_temporarily", "current_dispatch_mode",
           "current_function_mode", "tree_flatten", "tree_unflatten", "WeakIdKeyDictionary",
           "flop_registry", "sdpa_flop_count", "sdpa_backward_flop_count",
           "current_autograd_node", "is_view", "op_schema", "op_packet",
           "profiler_enabled", "profile_events", "event_name", "event_device_type",
           "event_start_ns", "event_end_ns", "event_nbytes", "compiled_call",
           "is_compiled_function", "optimized_module_class", "ddp_rebuilt_buckets", "APIS",
           "ON_FIRST_USE", "COMPILE_APIS", "compile_apis", "SET_BY_COMPILE", "SET_BY_DDP",
           "CHECKED_ON"]

#: The PyTorch versions every row below was checked on (``setup.cfg``'s torch extra pins the
#: last one).
CHECKED_ON = ("2.13.0",)

#: The private APIs looked up at import: plain name here -> (where PyTorch keeps it, a dotted
#: path from ``torch``; what torch_ext uses it for). A path through an object names one such
#: object: ``torch.ops.aten.add.Tensor`` for an OpOverload's attributes, the profiler's
#: result and event classes for their methods.
APIS = {
    "TorchDispatchMode": (
        "torch.utils._python_dispatch.TorchDispatchMode",
        "the trace's, the executor's and verify's modes: every ATen call the step makes"),
    "pop_dispatch_mode_temporarily": (
        "torch.utils._python_dispatch._pop_mode_temporarily",
        "the executor's backward pass runs without its dispatch mode (no Python per ATen call)"),
    "current_dispatch_mode": (
        "torch.utils._python_dispatch._get_current_dispatch_mode",
        "whether the executor's dispatch mode is the innermost one before it steps aside"),
    "current_function_mode": (
        "torch.overrides._get_current_function_mode",
        "whether the executor's watch for the backward call is the innermost function mode"),
    "tree_flatten": ("torch.utils._pytree.tree_flatten", "a call's arguments as flat leaves"),
    "tree_unflatten": ("torch.utils._pytree.tree_unflatten",
                       "a call rebuilt from its leaves, to rerun it"),
    "WeakIdKeyDictionary": (
        "torch.utils.weak.WeakIdKeyDictionary",
        "what each tensor is (node output, external), keyed by identity, not keeping it"),
    "flop_registry": ("torch.utils.flop_counter.flop_registry",
                      "FLOPs per call: the trace's \"flops\" cost model"),
    "sdpa_flop_count": ("torch.utils.flop_counter.sdpa_flop_count",
                        "FLOPs of the CPU kernel of scaled_dot_product_attention, which "
                        "flop_registry has no formula for"),
    "sdpa_backward_flop_count": ("torch.utils.flop_counter.sdpa_backward_flop_count",
                                 "FLOPs of that kernel's backward"),
    "current_autograd_node": (
        "torch._C._current_autograd_node",
        "the backward node reading a saved tensor (trace); a call outside backward (executor)"),
    "is_view": ("torch.Tensor._is_view",
                "an in-place write into an autograd view (CopySlices) pins its node"),
    "op_schema": ("torch.ops.aten.add.Tensor._schema",
                  "the arguments a call writes in place; whether it takes a generator"),
    "op_packet": ("torch.ops.aten.add.Tensor._overloadpacket",
                  "flop_registry's key; the name that marks torch.empty and its kin"),
    "profiler_enabled": ("torch.autograd.profiler._is_profiler_enabled",
                         "a CPU MemoryMeter refuses to start inside another profiler"),
    "profile_events": ("torch._C._autograd._ProfilerResult.events",
                       "a finished profiler's events, in order: a CPU MemoryMeter's source"),
    "event_name": ("torch._C._autograd._KinetoEvent.name",
                   "\"[memory]\" for an allocation or a free; a MemoryMeter window's mark"),
    "event_device_type": ("torch._C._autograd._KinetoEvent.device_type",
                          "a CPU allocation or free (not another device's)"),
    "event_start_ns": ("torch._C._autograd._KinetoEvent.start_ns",
                       "when an allocation, a free or a window happens"),
    "event_end_ns": ("torch._C._autograd._KinetoEvent.end_ns", "when a window ends"),
    "event_nbytes": ("torch._C._autograd._KinetoEvent.nbytes",
                     "bytes allocated (negative: freed)"),
    "compiled_call": ("torch.nn.Module._compiled_call_impl",
                      "a Module.compile()d module, which the trace refuses"),
}

#: Looked up at the first call of :func:`optimized_module_class` (as :data:`APIS`).
ON_FIRST_USE = {
    "optimized_module_class": ("torch._dynamo.eval_frame.OptimizedModule",
                               "a torch.compile'd module, which the trace refuses"),
}

#: Looked up at the first call of :func:`compile_apis` (as :data:`APIS`): ``torch._functorch``
#: and ``torch._inductor``, which ``torch.compile`` imports and ``import torch_ext`` does not.
COMPILE_APIS = {
    "default_partition": ("torch._functorch.partitioners.default_partition",
                          "splits a joint graph tagged by torch_ext.compiled's plan in two"),
    "aot_autograd": ("torch._dynamo.backends.common.aot_autograd",
                     "the aot_eager backend with torch_ext.compiled's partition"),
    "boxed_nop": ("torch._dynamo.backends.debugging.boxed_nop",
                  "aot_eager's compiler: runs the two graphs as they are"),
    "compile_fx": ("torch._inductor.compile_fx.compile_fx",
                   "the inductor backend with torch_ext.compiled's partition"),
    "inductor_config": ("torch._inductor.config",
                        "custom_partitioner_fn set for one compilation"),
    "functorch_config": ("torch._functorch.config",
                         "AOTAutograd's cache off for a planned compilation"),
    "custom_partitioner": ("torch._inductor.custom_graph_pass.CustomPartitionerFn",
                           "the class Inductor's custom partitioner must have"),
    "unset_fake_mode": ("torch._subclasses.fake_tensor.unset_fake_temporarily",
                        "the workspace probe runs real operations inside a partition function, "
                        "where AOTAutograd's FakeTensorMode is active"),
    "decide_layout_opt": ("torch._inductor.graph.GraphLowering.decide_layout_opt",
                          "whether Inductor's layout optimization will copy a compiled "
                          "graph's convolution inputs to channels-last (the prediction)"),
}

#: Attributes ``torch.compile`` sets on what it returns: plain name here -> (the attribute,
#: what torch_ext uses it for).
SET_BY_COMPILE = {
    "is_compiled_function": ("_torchdynamo_orig_callable",
                             "a torch.compile'd function, which the trace refuses"),
}

#: Attributes DistributedDataParallel keeps on its instances: plain name here -> (the
#: attribute, what torch_ext uses it for); ``tests/torch_ext/test_ddp.py`` checks them.
SET_BY_DDP = {
    "ddp_rebuilt_buckets": ("_has_rebuilt_buckets",
                            "whether DDP has reached its steady step (trace refuses before)"),
}

_MISSING = object()


def _look_up(path):
    """The object at dotted `path`, importing the modules along it; ``_MISSING`` if none."""
    parts = path.split(".")
    obj = importlib.import_module(parts[0])
    for i, name in enumerate(parts[1:], start=2):
        try:
            obj = getattr(obj, name)
        except AttributeError:
            try:
                obj = importlib.import_module(".".join(parts[:i]))
            except ImportError:
                return _MISSING
    return obj


def _look_up_all(table):
    """Plain name -> the object at the row's path, for every row of `table`.

    Raises
    ------
    MissingTorchAPIError
        If a path of some row leads nowhere in the installed PyTorch; the message names every
        such path.
    """
    found = {name: _look_up(path) for name, (path, _) in table.items()}
    missing = [table[name][0] for name, obj in found.items() if obj is _MISSING]
    if missing:
        raise MissingTorchAPIError(
            f"torch_ext needs PyTorch's private {', '.join(missing)}, which torch "
            f"{torch.__version__} does not have; torch_ext was checked on torch "
            f"{', '.join(CHECKED_ON)} (pip install 'lowerset[torch]')", missing)
    return found


_FOUND = _look_up_all(APIS)

TorchDispatchMode = _FOUND["TorchDispatchMode"]
pop_dispatch_mode_temporarily = _FOUND["pop_dispatch_mode_temporarily"]
current_dispatch_mode = _FOUND["current_dispatch_mode"]
current_function_mode = _FOUND["current_function_mode"]
tree_flatten = _FOUND["tree_flatten"]
tree_unflatten = _FOUND["tree_unflatten"]
WeakIdKeyDictionary = _FOUND["WeakIdKeyDictionary"]
flop_registry = _FOUND["flop_registry"]
sdpa_flop_count = _FOUND["sdpa_flop_count"]
sdpa_backward_flop_count = _FOUND["sdpa_backward_flop_count"]
current_autograd_node = _FOUND["current_autograd_node"]
is_view = _FOUND["is_view"]
event_name = _FOUND["event_name"]
event_device_type = _FOUND["event_device_type"]
event_start_ns = _FOUND["event_start_ns"]
event_end_ns = _FOUND["event_end_ns"]
event_nbytes = _FOUND["event_nbytes"]


def op_schema(func):
    """The ``torch._C.FunctionSchema`` of OpOverload `func` (None for another callable)."""
    return getattr(func, "_schema", None)


def op_packet(func):
    """The ``OpOverloadPacket`` of OpOverload `func` (None for another callable)."""
    return getattr(func, "_overloadpacket", None)


def profiler_enabled():
    """Whether a PyTorch profiler is running (read at each call: the flag changes)."""
    return torch.autograd.profiler._is_profiler_enabled


def profile_events(prof):
    """The events a finished ``torch.profiler.profile`` recorded, in its order (read them
    with ``event_name`` and its kin)."""
    return prof.profiler.kineto_results.events()


def compiled_call(module):
    """The compiled call of a ``Module.compile()``d `module` (None when it is not)."""
    return getattr(module, "_compiled_call_impl", None)


def ddp_rebuilt_buckets(ddp):
    """Whether DistributedDataParallel `ddp` has rebuilt its gradient buckets (in its second
    step, where it rebuilds them).

    Raises
    ------
    MissingTorchAPIError
        If the installed PyTorch keeps no such attribute on `ddp`.
    """
    name = SET_BY_DDP["ddp_rebuilt_buckets"][0]
    if not hasattr(ddp, name):
        raise MissingTorchAPIError(
            f"torch_ext needs DistributedDataParallel's private {name}, which torch "
            f"{torch.__version__} does not have; torch_ext was checked on torch "
            f"{', '.join(CHECKED_ON)}", [f"torch.nn.parallel.DistributedDataParallel.{name}"])
    return bool(getattr(ddp, name))


def is_compiled_function(obj):
    """Whether `obj` is a function that ``torch.compile`` returned."""
    return callable(obj) and hasattr(obj, SET_BY_COMPILE["is_compiled_function"][0])


@functools.cache
def optimized_module_class():
    """The class of the modules ``torch.compile`` returns (imports ``torch._dynamo``).

    Raises
    ------
    MissingTorchAPIError
        If the installed PyTorch does not have it.
    """
    return _look_up_all(ON_FIRST_USE)["optimized_module_class"]


@functools.cache
def compile_apis():
    """The rows of :data:`COMPILE_APIS`: plain name -> object (imports ``torch._functorch``
    and ``torch._inductor``).

    Raises
    ------
    MissingTorchAPIError
        If the installed PyTorch lacks one of them.
    """
    return _look_up_all(COMPILE_APIS)
