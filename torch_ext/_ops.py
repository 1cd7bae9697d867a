"""What the trace and the executor read off one ATen operation call (after dispatch).

Both see the same calls through a :class:`~torch.utils._python_dispatch.TorchDispatchMode`:
``func(*args, **kwargs)`` with an ``OpOverload`` `func`. This module says, the same way for
both, which tensors a call reads (its *tensor leaves*, in schema order), how many bytes its
outputs hold, which outputs are views of which leaves, which leaves the call writes in place,
and whether it draws random numbers.
"""

from typing import NamedTuple

import torch

from ._compat import (
    flop_registry,
    op_packet,
    op_schema,
    sdpa_backward_flop_count,
    sdpa_flop_count,
    tree_flatten,
    tree_unflatten,
)

#: Bytes a CUDA caching-allocator block is rounded up to (``torch.cuda.memory_allocated``
#: counts blocks).
CUDA_BLOCK = 512

__all__ = ["flatten_call", "unflatten_call", "tensor_positions", "call_tensors", "op_name",
           "output_tensors",
           "storage_key", "view_of", "output_bytes", "is_random", "generator_marks",
           "drew_random", "schema_writes", "describe", "signature", "makes_uninitialized",
           "is_collective", "call_flops", "missing_formula_flops", "return_alias",
           "value_bytes"]

#: The operations whose outputs hold whatever the allocator's memory held (``torch.empty``):
#: their values are not the call's, so a recomputation need not reproduce them.
_UNINITIALIZED = frozenset({"empty", "empty_like", "new_empty", "empty_strided",
                            "new_empty_strided", "empty_permuted"})


#: The containers pytree flattens in a call's arguments (:func:`flatten_call`), and what a
#: container passed on whole must not hold.
_CONTAINERS = (tuple, list, dict)
_NESTED = (torch.Tensor, tuple, list, dict)


class _FlatSpec(NamedTuple):
    """The spec of a call whose tensors are all arguments of their own: its leaves are its
    positional arguments, then its keyword arguments' values (a list of sizes one leaf)."""

    n_args: int
    keys: tuple


def flatten_call(args, kwargs):
    """Leaves and spec of ``(args, kwargs)``: :func:`unflatten_call` rebuilds the call. A
    call whose tensors are all arguments of their own (most ATen calls: no list of tensors)
    has its arguments as leaves and a :class:`_FlatSpec`, which :func:`unflatten_call` reads
    without pytree (whose flatten and unflatten walk a spec per leaf, at every capture and
    recomputation); any other call is pytree's."""
    kwargs = kwargs or {}
    if all(map(_opaque, args)) and all(map(_opaque, kwargs.values())):
        return list(args) + list(kwargs.values()), _FlatSpec(len(args), tuple(kwargs))
    return tree_flatten((tuple(args), dict(kwargs)))


def _opaque(x):
    """Whether argument `x` is a leaf of :func:`flatten_call`'s flat spec: not a container,
    or one of scalars (a view's sizes: a tuple, list or dict holding no tensor and no
    container, passed on whole)."""
    if not isinstance(x, _CONTAINERS):
        return True
    items = x.values() if isinstance(x, dict) else x
    return not any(isinstance(y, _NESTED) for y in items)


def unflatten_call(leaves, spec):
    """``(args, kwargs)`` from :func:`flatten_call`'s leaves (possibly replaced) and spec."""
    if type(spec) is _FlatSpec:
        n = spec.n_args
        return tuple(leaves[:n]), dict(zip(spec.keys, leaves[n:]))
    return tree_unflatten(list(leaves), spec)


def tensor_positions(leaves):
    """Positions of the tensors among a call's flat leaves, in order (the node's arguments)."""
    return [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]


def call_tensors(args, kwargs):
    """The tensors among a call's leaves, in :func:`flatten_call`'s order (those
    :func:`tensor_positions` picks). The executor reads them at every operation: a walk over
    the tuples, lists and dicts ATen arguments are made of costs less than building pytree's
    spec; a call holding another container (a namedtuple, a registered pytree node) is
    flattened by pytree."""
    found: list[torch.Tensor] = []
    if _collect(args, found) and (not kwargs or _collect(kwargs.values(), found)):
        return found
    leaves, _ = flatten_call(args, kwargs)
    return [leaves[p] for p in tensor_positions(leaves)]


def _collect(items, found):
    """Append the tensors of `items` to `found`, depth first (pytree's order: a dict's values
    in insertion order); False at a container that pytree may flatten another way."""
    for x in items:
        if isinstance(x, torch.Tensor):
            found.append(x)
        elif type(x) is list or type(x) is tuple:
            if not _collect(x, found):
                return False
        elif type(x) is dict:
            if not _collect(x.values(), found):
                return False
        elif isinstance(x, (tuple, list, dict)):
            return False
    return True


_OP_NAMES: dict = {}


def op_name(func):
    """``str(func)`` of an OpOverload (``"aten.mm.default"``), kept per operation: the
    executor compares it at every call."""
    name = _OP_NAMES.get(func)
    if name is None:
        name = _OP_NAMES[func] = str(func)
    return name


def output_tensors(out):
    """The tensors a call returned, flattened in order (None entries and scalars skipped)."""
    if isinstance(out, torch.Tensor):
        return [out]
    found: list[torch.Tensor] = []
    if (type(out) is tuple or type(out) is list) and _collect(out, found):
        return found
    return [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]


def storage_key(t):
    """What identifies the memory a tensor uses: device and storage address (None when it has
    no memory)."""
    try:
        ptr = t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return None
    return (t.device.type, t.device.index, ptr) if ptr else None


def view_of(out, tensors):
    """The position in `tensors` whose memory tensor `out` shares (the same tensor first: an
    in-place operation returns its argument), or -1."""
    for p, t in enumerate(tensors):
        if out is t:
            return p
    key = storage_key(out)
    if key is None:
        return -1
    for p, t in enumerate(tensors):
        if storage_key(t) == key:
            return p
    return -1


def output_bytes(outs, tensors):
    """Per output of a call: ``(bytes, view)``, with `view` the argument position it is a view
    of (-1: it owns its memory).

    An owner counts its storage's bytes (on CUDA rounded up to the caching allocator's
    512-byte blocks, as ``torch.cuda.memory_allocated`` counts them); a second output sharing
    an owner's storage counts 0;
    a view counts its elements' bytes (``lowerset.Event.bytes`` reports views at their size).
    """
    seen, res = set(), []
    for o in outs:
        p = view_of(o, tensors)
        if p >= 0:
            res.append((o.numel() * o.element_size(), p))
            continue
        key = storage_key(o)
        if key is not None and key in seen:
            res.append((0, -1))
            continue
        seen.add(key)
        try:
            b = o.untyped_storage().nbytes()
        except (RuntimeError, NotImplementedError):
            b = o.numel() * o.element_size()
        if o.device.type == "cuda" and b:   # the caching allocator's blocks
            b = -(-b // CUDA_BLOCK) * CUDA_BLOCK
        res.append((int(b), -1))
    return res


#: The operator namespaces of PyTorch's collectives: ProcessGroup operations (DDP, FSDP) and
#: functional collectives (FSDP2, DTensor).
COLLECTIVE_NAMESPACES = ("c10d", "_c10d_functional", "c10d_functional",
                         "_c10d_functional_autograd")


def is_collective(name):
    """Whether the operation named `name` (``str(func)``) is a collective: every rank of its
    group runs it, and none finishes before all have started."""
    return name.split(".", 1)[0] in COLLECTIVE_NAMESPACES


def is_random(func):
    """Whether the operation draws from a random generator (``nondeterministic_seeded``)."""
    return torch.Tag.nondeterministic_seeded in getattr(func, "tags", ())


def generator_marks():
    """What changes when an operation draws from a default generator: the CPU generator's
    state and each initialised CUDA generator's offset."""
    cuda: tuple[int, ...] = ()
    if torch.cuda.is_initialized():
        cuda = tuple(g.get_offset() for g in torch.cuda.default_generators)
    return torch.default_generator.get_state(), cuda


def makes_uninitialized(func):
    """Whether the operation returns memory it does not write (``aten.empty_like``)."""
    packet = op_packet(func)
    return getattr(packet, "__name__", None) in _UNINITIALIZED


def drew_random(before, after):
    """Whether two :func:`generator_marks` differ."""
    return before[1] != after[1] or not torch.equal(before[0], after[0])


def schema_writes(func, args, kwargs):
    """Positions (among the call's tensor leaves, in :func:`flatten_call`'s order) of the
    tensors the schema marks as written in place (``Tensor(a!)``)."""
    schema = op_schema(func)
    if schema is None:
        return set()
    by_name = {a.name: a for a in schema.arguments}
    items = [(schema.arguments[i] if i < len(schema.arguments) else None, v)
             for i, v in enumerate(args)]
    items += [(by_name.get(k), v) for k, v in (kwargs or {}).items()]
    written: set[int] = set()
    pos = 0
    for a, value in items:
        n = len([x for x in tree_flatten(value)[0] if isinstance(x, torch.Tensor)])
        if a is not None and a.alias_info is not None and a.alias_info.is_write:
            written.update(range(pos, pos + n))
        pos += n
    return written


def return_alias(func):
    """The alias annotation (``alias_info``) of the first return of OpOverload `func`: set
    where it returns a view of an argument or writes into one (in-place ops, ``copy_``); None
    where it returns memory of its own, or has no schema or no return."""
    schema = op_schema(func)
    if schema is None or not schema.returns:
        return None
    return schema.returns[0].alias_info


def value_bytes(val):
    """Bytes of the tensors of an FX node's ``meta["val"]`` (a tensor, or a tuple or list of
    them; anything else counts 0)."""
    vals = val if isinstance(val, (tuple, list)) else [val]
    return sum(v.numel() * v.element_size() for v in vals if isinstance(v, torch.Tensor))


def describe(t):
    """``[shape, dtype, device]`` of a tensor, JSON-ready."""
    return [list(t.shape), str(t.dtype).replace("torch.", ""), str(t.device)]


def signature(tensors):
    """``describe`` of each tensor, as a tuple of tuples (cheap to compare)."""
    return tuple((tuple(t.shape), _name(t.dtype), _name(t.device)) for t in tensors)


_NAMES: dict = {}


def _name(x):
    """A dtype or a device as :func:`describe` writes it (``"float32"``, ``"cpu"``), kept per
    value: the executor writes the signature of every argument and output."""
    name = _NAMES.get(x)   # a dtype never equals a device: one table holds both
    if name is None:
        name = _NAMES[x] = str(x).replace("torch.", "")
    return name


def _cpu_attention(query, key, value, *args, **kwargs):
    return sdpa_flop_count(query.shape, key.shape, value.shape)


def _cpu_attention_backward(grad_out, query, key, value, *args, **kwargs):
    return sdpa_backward_flop_count(grad_out.shape, query.shape, key.shape, value.shape)


#: Operations ``torch.utils.flop_counter`` has no formula for, counted by its formula for the
#: same computation: the CPU kernel of ``scaled_dot_product_attention`` and its backward
#: (PyTorch registers its CUDA kernels only; one per output element would price attention as
#: an activation, and a plan would recompute it freely).
_MISSING_FORMULAS = {
    packet: formula for name, formula in (
        ("_scaled_dot_product_flash_attention_for_cpu", _cpu_attention),
        ("_scaled_dot_product_flash_attention_for_cpu_backward", _cpu_attention_backward))
    if (packet := getattr(torch.ops.aten, name, None)) is not None}


def missing_formula_flops(func, args, kwargs):
    """FLOPs of a call that ``torch.utils.flop_counter`` has no formula for but
    :data:`_MISSING_FORMULAS` has, else None."""
    formula = _MISSING_FORMULAS.get(op_packet(func))
    if formula is None:
        return None
    try:
        return int(formula(*args, **kwargs))
    except (TypeError, ValueError, RuntimeError, AttributeError, AssertionError):
        return None


def call_flops(func, args, kwargs, out, outs, views):
    """FLOPs of one call: ``torch.utils.flop_counter``'s formula (on real or fake tensors), or
    its formula for the same computation where it has none (:func:`missing_formula_flops`),
    else one per element of the outputs that own their memory (`views[k] < 0`): T_v of the
    "flops" cost model, in the trace and in :mod:`torch_ext.compiled`."""
    formula = flop_registry.get(op_packet(func))
    if formula is not None:
        try:
            return int(formula(*args, **kwargs, out_val=out))
        except (TypeError, ValueError, RuntimeError, AttributeError):
            pass
    flops = missing_formula_flops(func, args, kwargs)
    if flops is not None:
        return flops
    return sum(o.numel() for o, p in zip(outs, views) if p < 0)
