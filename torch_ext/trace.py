"""Record one PyTorch training step as the forward graph G = (V, E) of the paper, with the
execution facts (:class:`lowerset.ExecutionFacts`) its schedule needs.

A node is one ATen operation the forward pass dispatches, as autograd sees them (the calls below
``torch.nn.functional``, composite operations decomposed), holding all of that call's output
tensors, in dispatch order. Parameters, buffers and the batch are not nodes: they are the facts'
external arrays, resident for the step. An operation that reads only external arrays and makes
no memory of its own (``aten.t`` of a weight, BatchNorm's ``num_batches_tracked.add_``, an empty
tensor) is not a node either: its outputs are external arrays too, so that such operations do
not float free in G (each one would double the lower sets).

:func:`trace` runs the forward pass and one backward pass with PyTorch's own instruments:

- a ``TorchDispatchMode`` sees each operation, its tensors and its outputs (a view shares its
  argument's storage; an in-place operation returns its argument);
- ``saved_tensors_hooks`` see which tensors autograd saves, and, in the backward pass, which
  node reads each (``torch._C._current_autograd_node``);
- hooks on the autograd nodes give the backward order and which gradients each node returns
  (and whether they are views of the gradients it received);
- finalizers on storages say where the plain step frees each tensor, and finalizers on the
  tensors where the model's code drops its last reference (``NodeFacts.held_until``);
- the profiler's memory events (CPU) or the caching allocator's counters (CUDA) give each
  operation's and each backward call's highest point (:mod:`torch_ext.measure`);
- ``torch.utils.flop_counter``'s formulas (``FlopCounterMode``'s) give the FLOPs.
"""

import functools
import gc
import time
import weakref
from collections.abc import Callable

import torch

from lowerset.exceptions import ArgumentError

from . import _ops
from ._autograd import node_tag, reachable_nodes
from ._build import build as _build
from ._compat import (
    TorchDispatchMode,
    WeakIdKeyDictionary,
    current_autograd_node,
    is_view,
)
from ._diagnose import check_wrapper, holds_fsdp2, step_modes, user_frame, warn_fsdp2_unmeasured
from ._graph import TARGET_TOTAL_COST, TracedGraph  # noqa: F401  (re-exported)
from ._guards import check_not_compiled, step_device
from .exceptions import TraceError
from .measure import MemoryMeter

__all__ = ["trace", "TracedGraph", "COST_MODELS"]

#: How node costs T_v are measured: "flops" (``torch.utils.flop_counter``'s formulas; an
#: operation it has none for counts one per output element) or "profile" (forward time).
COST_MODELS: tuple[str, ...] = ("flops", "profile")

#: The key under which an autograd node's ``metadata`` names the traced operation that made it.
_KEY = "lowerset.trace"


class _Op:
    """What the trace records of one forward call."""

    __slots__ = ("func", "name", "args", "inputs", "edges", "outputs", "out_bytes", "views",
                 "writes", "mutates", "random", "flops", "time", "node", "pin", "reads",
                 "grads", "gviews", "freed_fwd", "freed_bwd", "dropped_at", "died", "index",
                 "tracked", "unmatched", "versions", "where")

    def __init__(self, func, index):
        self.func, self.name, self.index = func, str(func), index
        self.args, self.inputs, self.edges = [], [], []
        self.outputs, self.out_bytes, self.views = [], [], []
        self.writes, self.mutates = set(), []
        self.random, self.flops, self.time = _ops.is_random(func), 0, 0.0
        self.node, self.pin = None, None
        self.reads, self.grads, self.gviews = set(), {}, {}
        self.freed_fwd, self.freed_bwd, self.dropped_at, self.died = {}, {}, {}, set()
        self.tracked = set()   # outputs whose storage (not an external's) is watched
        self.unmatched = 0     # gradients its backward sent along edges no argument had
        self.versions = []     # (argument, (node, k)): the latest in-place write into the
                               # argument's memory since it was made (_note_versions)
        self.where = None      # (file, line, function) in the user's code (debug)


class _Recorder(TorchDispatchMode):
    """The dispatch mode and saved-tensor hooks of one trace (see the module docstring)."""

    def __init__(self, meter, repeats, debug=False, sync=None):
        super().__init__()
        self.meter, self.repeats, self.debug = meter, repeats, debug
        self.sync = sync or _no_sync   # CUDA: the kernels a timed call launched have run
        self.ops, self.n_nodes = [], 0
        self.externals, self.ext_storages, self.ext_readers = [], {}, {}
        self.external_bases = []                 # the external each one is a view of, or -1
        self.external_sizes = []                 # bytes of each (its gradient's size)
        self.params = []                         # the parameters read (strong: resident)
        self.value_of = WeakIdKeyDictionary()   # tensor -> ("n", v, k) or ("e", e)
        self.pending = []                        # (op index, weakrefs of outputs)
        self.finalizers = []
        self.phase, self.in_hook = "forward", False
        self.backward_order, self.unknown_reads, self.window = [], [], None
        self.last_write = {}   # storage key -> (node, k): the latest in-place write into it
        self.owner = {}        # storage key -> the node whose output owns that memory
        self.key_of = {}       # (op index, k) -> storage key of a watched output
        self.node_op = []      # node id -> op index

    # -- forward ---------------------------------------------------------------------------------

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.phase != "forward" or self.in_hook:
            return func(*args, **kwargs)
        self._resolve_pending()
        i = len(self.ops)
        op = _Op(func, i)
        if self.debug:
            op.where = user_frame()
        tensors = _ops.call_tensors(args, kwargs)
        for t in tensors:
            self._record_input(op, t)
        self._note_versions(op, tensors)
        op.writes = _ops.schema_writes(func, args, kwargs)
        copies = self._external_copies(op, tensors)
        out = self._run(op, func, args, kwargs, i)
        written = {p for p, c in copies if not _same_bytes(c, tensors[p])}
        op.mutates = sorted({p for p in op.writes | written if op.args[p][0] < 0})
        _pin_hidden_writes(op, written)
        del copies
        outs = _ops.output_tensors(out)
        self._record_outputs(op, i, tensors, outs, kwargs)
        self.ops.append(op)
        self._note_external_writes(op, i, tensors)
        if op.node is not None:
            self._note_node_writes(op, tensors)
            op.flops = _ops.call_flops(func, args, kwargs, out, outs, op.views)
            if _writes_into_a_view(op, tensors):
                # autograd rewrites the base's history (CopySlices): the backward of this call
                # is not an autograd node of its own; its saved tensors are kept for the step
                op.pin = ("writes in place into a view of another tensor, whose autograd "
                          "history PyTorch rewrites (CopySlices)")
            else:
                self.pending.append((i, [weakref.ref(t) for t in outs]))
        return out

    def _run(self, op, func, args, kwargs, i):
        marks = _ops.generator_marks()
        self.sync()
        start = time.perf_counter()
        with self.meter.window(f"f{i}"):
            out = func(*args, **kwargs)
            self.sync()
        op.time = time.perf_counter() - start
        op.random = op.random or _ops.drew_random(marks, _ops.generator_marks())
        if self.repeats > 1 and not (op.random or op.writes):
            op.time = _median_time(func, args, kwargs, self.repeats - 1, op.time, self.sync)
        return out

    def _record_input(self, op, t):
        ref = self.value_of.get(t)
        if ref is not None and ref[0] == "n":
            op.args.append((ref[1], ref[2]))
            op.inputs.append(["node", ref[1], ref[2]])
        else:
            is_param = t.requires_grad and t.is_leaf
            e = ref[1] if ref is not None else self._new_external(t, is_param)
            if ref is None and is_param:
                self.params.append(t)
            op.args.append((~e, 0))
            op.inputs.append([self.externals[e][0]] + _ops.describe(t))
        op.edges.append(_edge_key(t))

    def _new_external(self, t, is_param):
        key = _ops.storage_key(t)
        base = self.ext_storages.get(key, -1) if key is not None else -1
        b = 0 if base >= 0 else _ops.output_bytes([t], [])[0][0]
        e = len(self.externals)
        if key is not None and base < 0:
            self.ext_storages[key] = e
        self.externals.append(("param" if is_param else "input", b))
        self.external_sizes.append(t.numel() * t.element_size())
        self.external_bases.append(base)
        self.value_of[t] = ("e", e)
        return e

    def _external_copies(self, op, tensors):
        """Copies of the tensors in external memory without a gradient that the call reads but
        does not declare it writes, to find those it writes anyway (``native_batch_norm``'s
        running statistics), read as external arrays or through a node's output (the buffer
        an in-place ``copy_`` returns, as DDP's broadcast of the buffers does)."""
        return [(p, t.detach().clone()) for p, t in enumerate(tensors)
                if p not in op.writes and not t.requires_grad and t.numel()
                and (op.args[p][0] < 0 or _ops.storage_key(t) in self.ext_storages)]

    def _record_outputs(self, op, i, tensors, outs, kwargs):
        sizes = _ops.output_bytes(outs, tensors)
        op.out_bytes = [b for b, _ in sizes] or [0]
        op.views = [p for _, p in sizes] or [-1]
        op.outputs = [_ops.describe(o) for o in outs]
        if self._absorbed(op, sizes):
            is_param = any(t.requires_grad for t in tensors)  # outputs get it after autograd
            for o in outs:
                self._alias_external(o, is_param)
            return
        v = op.node = self.n_nodes
        self.n_nodes += 1
        self.node_op.append(i)
        if op.random and kwargs.get("generator") is not None:
            op.pin = "draws from a generator passed to it, which the executor does not restore"
        elif _ops.is_collective(op.name):
            op.pin = ("a collective: a recomputation would run it on one rank alone, and the "
                      "other ranks would never join it")
        for k, o in enumerate(outs):
            key = _ops.storage_key(o)
            if key is not None and key not in self.ext_storages:  # memory of the step's own
                op.tracked.add(k)
                self.key_of[i, k] = key
                if op.views[k] < 0:
                    self.owner[key] = v
                self.finalizers.append(weakref.finalize(o.untyped_storage(), self._freed, i, k))
            self.finalizers.append(weakref.finalize(o, self._dropped, i, k))
            self.value_of[o] = ("n", v, k)

    def _absorbed(self, op, sizes):
        """An operation on external arrays only, not random, that makes no memory: its
        outputs are external arrays (views of parameters, zero-byte tensors)."""
        return (all(s < 0 for s, _ in op.args) and not op.random
                and all(p >= 0 or b == 0 for b, p in sizes))

    def _alias_external(self, o, is_param):
        ref = self.value_of.get(o)
        if ref is None or ref[0] != "e":
            self._new_external(o, is_param)

    def _note_external_writes(self, op, i, tensors):
        """Pin the nodes that read an external array an operation later overwrites (their
        recomputation would read the new values)."""
        for p, t in enumerate(tensors):
            key = _ops.storage_key(t)
            if op.args[p][0] < 0 and (p in op.writes or p in op.mutates):
                for r in self.ext_readers.get(key, ()):
                    if r != i and self.ops[r].pin is None:
                        self.ops[r].pin = (f"reads an external array that operation {i} "
                                           f"({op.name}) overwrites later")
            if op.args[p][0] < 0 and op.node is not None:
                self.ext_readers.setdefault(key, []).append(i)

    def _note_versions(self, op, tensors):
        """Add to ``op.versions`` the latest in-place write into the memory of each argument
        made since the argument itself (``buf[:, 1:] = x`` writes through a view; a later
        ``buf.masked_fill_(...)`` reads the written values through ``buf``, whose own node
        is older than the write). The facts list them as arguments of the call, read by its
        backward where the argument is, so that a recomputation of the argument for either
        replays the writes first (:func:`lowerset.scheduling.inplace_groups`)."""
        for p, ((u, _), t) in enumerate(zip(op.args, tensors)):
            if u < 0:
                continue
            w = self.last_write.get(_ops.storage_key(t))
            if w is not None and w[0] > u:
                op.versions.append((p, w))

    def _note_node_writes(self, op, tensors):
        """Record the in-place writes of node `op` into memory of the step's own; a write into
        an argument the call does not return pins the call and the memory's owner (the write
        is not one the facts can tie to the buffer)."""
        for p in sorted(op.writes):
            if p >= len(tensors) or op.args[p][0] < 0:
                continue
            key = _ops.storage_key(tensors[p])
            ks = [k for k, q in enumerate(op.views) if q == p]
            if ks:
                self.last_write[key] = (op.node, ks[0])
                continue
            why = "writes in place into an argument it does not return"
            op.pin = op.pin or why
            owner = self.owner.get(key)
            if owner is not None and self.ops[self.node_op[owner]].pin is None:
                self.ops[self.node_op[owner]].pin = (f"operation {op.index} ({op.name}) {why} "
                                                     "into its memory")

    def _resolve_pending(self):
        """Map the autograd node of each finished call's outputs to the call (the outputs'
        ``grad_fn`` is set once the call has returned through autograd)."""
        for i, refs in self.pending:
            for r in refs:
                t = r()
                fn = None if t is None else t.grad_fn
                if fn is None:
                    continue
                owner = fn.metadata.get(_KEY)   # kept on the node: no reference to it here
                if owner is None:
                    fn.metadata[_KEY] = i
                elif owner != i and self.ops[i].pin is None:
                    self.ops[i].pin = "shares its autograd node with an earlier operation"
        self.pending = []

    def _freed(self, i, k):
        """The storage of output k of operation i is freed (the plain step frees it here)."""
        op = self.ops[i]
        key = self.key_of.pop((i, k), None)
        if key is not None:   # the address may hold another tensor from now on
            self.last_write.pop(key, None)
            self.owner.pop(key, None)
        if self.phase == "backward":
            op.freed_bwd[k] = max(0, len(self.backward_order) - 1)
        elif self.phase in ("forward", "between"):
            op.freed_fwd[k] = self.n_nodes - 1

    def _dropped(self, i, k):
        """The tensor object of output k of operation i is gone: the model's code no longer
        holds it."""
        op = self.ops[i]
        op.died.add(k)
        if self.phase == "forward":
            op.dropped_at[k] = self.n_nodes - 1

    # -- saved tensors ---------------------------------------------------------------------------

    def pack(self, t):
        """Keep a detached alias: the saved tensor's own Python object stays the model's, so
        its finalizer says when the model's code drops it."""
        self.in_hook = True
        try:
            ref = self.value_of.get(t)
            return (ref if ref is not None and ref[0] == "n" else None, t.detach())
        finally:
            self.in_hook = False

    def unpack(self, packed):
        ref, t = packed
        if ref is not None and self.phase == "backward":
            node = current_autograd_node()
            i = node.metadata.get(_KEY) if node is not None else None
            if i is None:
                self.unknown_reads.append((ref, type(node).__name__ if node else None))
            else:
                self.ops[i].reads.add((ref[1], ref[2]))
        return t

    # -- backward --------------------------------------------------------------------------------

    def hook_backward(self, loss):
        """Register pre- and post-hooks on every mapped autograd node reachable from `loss`."""
        self._resolve_pending()
        for fn in reachable_nodes(loss.grad_fn):
            i = fn.metadata.get(_KEY)
            if i is not None:
                fn.register_prehook(self._prehook(i))
                fn.register_hook(self._posthook(i, fn))

    def _prehook(self, i):
        def pre(grad_outputs):
            self._close_window()
            self.backward_order.append(self.ops[i].node)
            self.window = self.meter.open_window(f"b{i}")
        return pre

    def _posthook(self, i, fn):
        def post(grad_inputs, grad_outputs):
            _record_grads(self.ops[i], fn, grad_inputs, grad_outputs)
        return post

    def _close_window(self):
        if self.window is not None:
            self.meter.close_window(self.window)
            self.window = None


def _writes_into_a_view(op, tensors):
    """Whether the call writes in place into a tensor that is an autograd view of another
    (``x[:, :4] *= 2``) while gradients flow."""
    return any(p < len(tensors) and is_view(tensors[p]) and tensors[p].requires_grad
               for p in op.writes)


def _edge_key(t):
    """What the autograd edge of an argument points to: its grad_fn and output number, the
    leaf itself (an AccumulateGrad node), or None when it needs no gradient."""
    if not t.requires_grad:
        return None
    if t.grad_fn is not None:
        return ("fn", node_tag(t.grad_fn), t.output_nr)
    return ("leaf", id(t))


def _next_key(fn, nr):
    if fn is None:
        return None
    if type(fn).__name__ == "AccumulateGrad":
        return ("leaf", id(fn.variable))
    return ("fn", node_tag(fn), nr)


def _record_grads(op, fn, grad_inputs, grad_outputs):
    """Which arguments got a gradient from the node's backward, and which of those are views
    of a gradient it received (``AddBackward0`` hands its gradient on as it is). A gradient
    sent along an edge that none of the call's arguments had in the forward pass is counted in
    ``op.unmatched`` (:func:`_check_edges` refuses the trace)."""
    taken = set()
    out_keys = [_ops.storage_key(g) if g is not None else None for g in grad_outputs]
    for (nfn, nr), g in zip(fn.next_functions, grad_inputs):
        key = _next_key(nfn, nr)
        if key is None:
            continue
        for p, e in enumerate(op.edges):
            if e == key and p not in taken:
                taken.add(p)
                if g is not None:
                    op.grads[p] = True
                    gk = _ops.storage_key(g)
                    op.gviews[p] = out_keys.index(gk) if gk is not None and gk in out_keys else -1
                break
        else:
            if g is not None:
                op.unmatched += 1


def _check_edges(rec):
    """Raise TraceError where a backward sent a gradient along an autograd edge that the
    forward pass did not record for any argument: the graph would miss that gradient's bytes
    (every prediction of the step too low), so no graph is made."""
    bad = [op for op in rec.ops if op.unmatched]
    if bad:
        names = ", ".join(f"{op.index} ({op.name})" for op in bad[:3])
        raise TraceError(
            f"the backward of {len(bad)} operation(s), first {names}, sent gradients along "
            f"autograd edges that the forward pass did not record (torch {torch.__version__}): "
            "the trace cannot tell which values they reach")


def _raw(t):
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def _same_bytes(copy, t):
    return copy.shape == t.shape and copy.dtype == t.dtype and torch.equal(_raw(copy), _raw(t))


def _pin_hidden_writes(op, written):
    """Pin a call that writes, undeclared, into external memory it reads through a node's
    output: the executor would recompute it on the memory itself (BatchNorm's running
    statistics, updated twice)."""
    through = [op.args[p][0] for p in sorted(written) if op.args[p][0] >= 0]
    if through:
        op.pin = op.pin or (f"writes into memory outside the step that it reads through the "
                            f"output of node {through[0]}")


def _no_sync():
    pass


def _median_time(func, args, kwargs, extra, first, sync):
    """Median seconds of `first` and `extra` more calls, each ended by `sync` (the device's
    synchronize: a CUDA call returns when its kernels are queued, not run)."""
    times = [first]
    for _ in range(extra):
        start = time.perf_counter()
        func(*args, **kwargs)
        sync()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]


def trace(step: Callable[[], torch.Tensor], *, cost_model: str = "flops", repeats: int = 3,
          time_unit: float = 1e-5, measure_memory: bool = True,
          model: torch.nn.Module | None = None, accumulate_grads: bool = False,
          debug: bool = False) -> TracedGraph:
    """Run one training step and record it as a :class:`TracedGraph`.

    `step()` runs the forward pass and returns the loss; the trace then runs
    ``loss.backward()`` once. Parameters' gradients are put back as they were, and so are the
    CPU and CUDA random generators; running statistics and other buffers the step updates stay
    updated (the trace is a real step).

    Parameters
    ----------
    step : callable
        Takes no argument, runs one forward pass and returns the loss (a tensor with one
        element that requires a gradient).
    cost_model : {"flops", "profile"}
        "flops": T_v = FLOPs of the operation (``torch.utils.flop_counter``'s formulas, as
        ``FlopCounterMode`` counts them; an operation without one counts one per output
        element) in units of :attr:`TracedGraph.flop_unit`, at least 1. "profile": the median
        time of `repeats` runs in units of `time_unit` seconds (an operation that writes in
        place or draws random numbers is timed once), each from the call to the end of its
        kernels (on CUDA the device is synchronized before and after).
    repeats : int
        Runs per operation for "profile".
    time_unit : float
        Seconds per cost unit for "profile".
    measure_memory : bool
        Measure each operation's and each backward call's highest point (``forward_peak``,
        ``backward_peak``) with :class:`torch_ext.measure.MemoryMeter`; False leaves them 0.
        Where `model` holds modules sharded by FSDP2, it also measures what FSDP2 holds
        outside the traced operations (``ExecutionFacts.outside_forward``,
        ``outside_backward``; see :mod:`torch_ext._outside`).
    model : torch.nn.Module, optional
        The model the step runs; a ``torch.compile``d module raises :class:`TraceError` (the
        step's closure is searched for one as well). Its train/eval mode is recorded, so that
        :class:`RecomputeContext` (given ``model=`` too) names a change of mode as the cause
        of a mismatch.
    accumulate_grads : bool
        The step runs with every parameter's gradient already allocated: gradient
        accumulation (several micro-batches before ``optimizer.step()``), or
        ``optimizer.zero_grad(set_to_none=False)``. The trace's backward pass then runs with
        a zero gradient on each parameter the step reads (PyTorch adds the new gradients into
        them in place), and the facts list every parameter that gets a gradient in
        ``grads_at_start``: their bytes are resident, and the schedule sums into them as
        AccumulateGrad does. False (default): the gradients are None when the step starts
        (``optimizer.zero_grad()``'s default).
    debug : bool
        Record for each operation where in the user's code it came from: the file, line and
        function of the innermost frame outside torch and torch_ext (``attrs[v]["where"]``,
        and ``"absorbed_where"`` beside ``"absorbed"``, kept in the graph's JSON). A
        :class:`StrategyMismatchError` then names that line for the traced operations it
        shows. It walks the Python stack once per operation (0.3 us on a small model); False
        (default) records nothing.

    Returns
    -------
    TracedGraph

    Raises
    ------
    lowerset.ArgumentError
        If `cost_model`, `repeats` or `time_unit` is invalid.
    TraceError
        If `step` dispatches no operation, returns something other than a one-element tensor
        with a gradient, runs a ``torch.compile``d module, or its backward pass reads a saved
        tensor in an autograd node that no traced operation made; if `model` is a
        DistributedDataParallel in its first two steps (which run other operations than the
        steps after: run two steps, then trace) or holds an FSDP1 module.

    Warns
    -----
    lowerset.UnmodeledMemoryWarning
        If `model` holds a module sharded by FSDP2 (``fully_shard``) and `measure_memory` is
        False: without a measurement the schedule leaves out what FSDP2 allocates around the
        traced operations, so a step's measured peak is above the prediction.

    Notes
    -----
    Python's garbage is collected (``gc.collect()``) before the step runs, as
    :func:`torch_ext.peak_memory` does, so that the measured bytes start from the same state.
    Without `accumulate_grads`, the schedule assumes the parameters' gradients are None when
    the step starts (``optimizer.zero_grad()``, whose default sets them to None); the trace
    sets them to None (with it, to zeros) for its own backward pass and puts the caller's back
    after. Tensors alive after the backward pass (kept by the caller or a module) join
    ``facts.returned``: no plan drops or frees them.

    References
    ----------
    .. [1] Kusumoto et al., NeurIPS 2019, Sec. 2 (G, T_v, M_v), Sec. 3 (liveness analysis).
    """
    _check_trace_args(cost_model, repeats, time_unit)
    check_not_compiled(step, model, TraceError)
    check_wrapper(model)
    fsdp2 = holds_fsdp2(model)
    if fsdp2 and not measure_memory:
        warn_fsdp2_unmeasured()
    device = step_device(step, model)
    rng = _RandomState.save()
    meter: MemoryMeter | _NoMeter = MemoryMeter(device) if measure_memory else _NoMeter()
    profile = cost_model == "profile"
    sync = functools.partial(torch.cuda.synchronize, device) \
        if profile and device.type == "cuda" else None
    rec = _Recorder(meter, repeats if profile else 1, bool(debug), sync)
    modes = step_modes(model, device)
    gc.collect()   # as peak_memory: no garbage of earlier steps freed inside the traced one
    saved_grads = {}
    try:
        with meter:
            with rec, torch.autograd.graph.saved_tensors_hooks(rec.pack, rec.unpack):
                loss = step()
                _check_loss(loss, rec)
                rec.phase = "between"
                saved_grads = _clear_grads(rec, accumulate_grads)
                rec.hook_backward(loss)
                rec.phase = "backward"
                loss.backward()
                rec._close_window()
                rec.phase = "done"
        _check_edges(rec)
        measured = meter.result if isinstance(meter, MemoryMeter) else None
        windows = measured.windows if measured is not None else {}
        outside = measured.window_starts if measured is not None and fsdp2 else None
        return _build(rec, loss, windows, cost_model, time_unit, str(device), modes,
                      accumulate_grads, outside)
    finally:
        rec.phase = "done"
        for f in rec.finalizers:
            f.detach()
        for p, g in saved_grads.items():
            p.grad = g
        rng.restore()


def _check_trace_args(cost_model, repeats, time_unit):
    if cost_model not in COST_MODELS:
        raise ArgumentError(f"unknown cost_model {cost_model!r}; expected one of {COST_MODELS}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ArgumentError(f"repeats must be a positive int, got {repeats!r}")
    if not (isinstance(time_unit, (int, float)) and time_unit > 0):
        raise ArgumentError(f"time_unit must be a positive number of seconds, got {time_unit!r}")


class _NoMeter:
    """Stands in for a MemoryMeter when memory is not measured."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def window(self, name):
        import contextlib
        return contextlib.nullcontext()

    def open_window(self, name):
        return None

    def close_window(self, cm):
        pass


class _RandomState:
    """The CPU and CUDA generators' states, to put back after the trace."""

    cpu: torch.Tensor
    cuda: list[torch.Tensor] | None

    @classmethod
    def save(cls):
        self = cls()
        self.cpu = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
        return self

    def restore(self):
        torch.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)


def _check_loss(loss, rec):
    if not any(op.node is not None for op in rec.ops):
        raise TraceError("the traced step dispatched no operation on a tensor")
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        raise TraceError(f"the traced step must return the loss, a tensor with one element; got "
                         f"{type(loss).__name__}"
                         + (f" of shape {tuple(loss.shape)}" if isinstance(loss, torch.Tensor)
                            else ""))
    ref = rec.value_of.get(loss)
    if not loss.requires_grad or loss.grad_fn is None or ref is None or ref[0] != "n":
        raise TraceError("the loss the traced step returns has no gradient: compute it inside "
                         "the step from tensors that require one, with grad mode on")


def _clear_grads(rec, accumulate):
    """Set the parameters' gradients to None (`accumulate`: to zeros, gradients that exist
    when the step starts) for the trace's backward pass; return the old ones (None included)
    to put back."""
    saved = {}
    for t in rec.params:
        saved[t] = t.grad
        t.grad = torch.zeros_like(t) if accumulate else None
    return saved
