"""Record one training step of a Chainer model as the forward graph G = (V, E) of the paper,
with the execution facts (:class:`lowerset.ExecutionFacts`) its schedule needs.

One node per function application (in forward order), holding all of that application's output
arrays: outputs of one ``FunctionNode`` are created together, so they cannot be split across
segments of a canonical strategy (the planner's cg reader does the same). Model inputs and
parameters are not nodes; they are the facts' external arrays.

:func:`trace` runs the forward pass and one backward pass, and records what Chainer does: the
order of both passes, which inputs and outputs each backward reads (the arrays the function
retains), the state each forward makes for its backward, which outputs and gradients are views
of other arrays, where the plain run frees each array, and the bytes each forward and backward
call holds at its highest point (its workspace, measured on the device it runs on).
"""

import statistics
import time
import tracemalloc
import weakref
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any, Literal, cast

import chainer
import numpy as np

import lowerset

from . import _backend, _effects
from . import _chainer_internals as _ci
from ._backend import Array
from ._probe import MemoryProbe
from .exceptions import TraceError

__all__ = ["trace", "TracedGraph", "preset_cost", "COST_MODELS"]

COST_MODELS: tuple[str, ...] = ("preset", "profile")


#: The paper's cost rule T_v (10 for a convolution, 1 otherwise), shared with the planner's
#: cg reader so that traced graphs and the authors' graphs are costed alike.
preset_cost = lowerset.paper_cost


class TracedGraph(lowerset.Graph):
    """A :class:`lowerset.Graph` recorded from Chainer, with its execution facts.

    Node labels are ints: the position of the function application in forward order (also the
    node ids). ``graph.facts`` holds the execution facts. Each node's ``attrs`` identify the
    application for :class:`chainer_ext.RecomputeHook`'s checks: ``function`` (class name),
    ``inputs`` (one entry per argument: ``["node", label, output_index]``,
    ``["param", shape, dtype]`` or ``["input", shape, dtype]``) and ``outputs``
    (``[shape, dtype]`` per output).

    Parameters
    ----------
    nodes, edges, cost, memory, attrs, facts
        As :class:`lowerset.Graph`.
    outputs : sequence of int
        Labels of the nodes producing the traced callable's return values.
    cost_model : str
        "preset" or "profile".
    time_unit : float or None
        Seconds per cost unit for ``cost_model="profile"``.

    Attributes
    ----------
    param_bytes : int
        Bytes of the distinct parameters used by the forward pass (external arrays).
    input_bytes : int
        Bytes of the distinct non-parameter inputs made before the step (model inputs,
        labels).
    outputs : tuple of int
        Labels of the nodes producing the traced callable's return values.
    cost_model : str
        "preset" or "profile".
    time_unit : float or None
        Seconds per cost unit for ``cost_model="profile"``.
    """

    outputs: tuple[int, ...]
    cost_model: str
    time_unit: float | None

    def __init__(self, nodes: Sequence[int], edges: Sequence[tuple[int, int]],
                 cost: Mapping[Hashable, int], memory: Mapping[Hashable, int],
                 attrs: Mapping[Hashable, Mapping[str, Any]], *, facts: lowerset.ExecutionFacts,
                 outputs: Sequence[int], cost_model: str, time_unit: float | None) -> None:
        super().__init__(nodes, edges, cost, memory, attrs=attrs, facts=facts)
        self.outputs = tuple(outputs)
        self.cost_model = cost_model
        self.time_unit = time_unit

    @property
    def param_bytes(self) -> int:
        """Bytes of the step's parameters (the external arrays of kind "param")."""
        return sum(b for kind, b in self.facts.externals if kind == "param")

    @property
    def input_bytes(self) -> int:
        """Bytes of the step's inputs (the batch): the external arrays of kind "input" made
        before the step."""
        made = self.facts.external_made or (-1,) * len(self.facts.externals)
        return sum(b for (kind, b), m in zip(self.facts.externals, made)
                   if kind == "input" and m < 0)


def _nbytes(shape, dtype):
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


def _adapter(func: chainer.FunctionNode) -> chainer.function.FunctionAdapter:
    """`func` as the ``FunctionAdapter`` it is where a state name starts with :data:`WRAPPED`
    (no check: :func:`array_attr_ids` names only an adapter's wrapped Function so)."""
    return cast(chainer.function.FunctionAdapter, func)


#: Prefix of the state names that are attributes of the old-style Function an adapter wraps.
WRAPPED = "wrapped."


def _state_owners(func):
    """(prefix, object) pairs whose attributes can hold `func`'s forward-made state: `func`, and
    the old-style :class:`chainer.Function` a ``FunctionAdapter`` wraps (its state lives there:
    BatchRenormalization's)."""
    return [("" if root == "function" else WRAPPED, obj)
            for root, obj in _effects.roots(func).items()]


def array_attr_ids(func: chainer.FunctionNode, types: tuple[type, ...]) -> dict[str, int]:
    """Map state name -> id(array) for every array-valued attribute of `func` (and of the
    function it wraps, named with :data:`WRAPPED` in front).

    Parameters
    ----------
    func : chainer.FunctionNode
        The function application.
    types : tuple of type
        The array types (NumPy's, CuPy's).
    """
    return {prefix + k: id(v) for prefix, obj in _state_owners(func)
            for k, v in vars(obj).items() if isinstance(v, types)}


def get_state(func: chainer.FunctionNode, name: str) -> Any:
    """The attribute `name` (from :func:`forward_state`) of `func`, None if unset.

    Parameters
    ----------
    func : chainer.FunctionNode
        The function application.
    name : str
        A state name.
    """
    if name.startswith(WRAPPED):  # a FunctionAdapter's: its wrapped Function holds it
        return getattr(_adapter(func).function, name[len(WRAPPED):], None)
    return getattr(func, name, None)


def set_state(func: chainer.FunctionNode, name: str, value: Any) -> None:
    """Set the attribute `name` (from :func:`forward_state`) of `func`.

    Parameters
    ----------
    func : chainer.FunctionNode
        The function application.
    name : str
        A state name.
    value : object
        The value set.
    """
    if name.startswith(WRAPPED):  # a FunctionAdapter's: its wrapped Function holds it
        setattr(_adapter(func).function, name[len(WRAPPED):], value)
    else:
        setattr(func, name, value)


def forward_state(func: chainer.FunctionNode, before: Mapping[str, int], exclude: set[int],
                  types: tuple[type, ...]) -> list[str]:
    """Names of array attributes `func` set or replaced in forward (its forward-made state;
    read and set them with :func:`get_state` and :func:`set_state`).

    Parameters
    ----------
    func : chainer.FunctionNode
    before : dict
        :func:`array_attr_ids` taken before the forward.
    exclude : set of int
        ids of arrays that are inputs or outputs of `func` (not state).
    types : tuple of type
        Array types.

    Returns
    -------
    list of str
    """
    return [k for k, i in array_attr_ids(func, types).items()
            if before.get(k) != i and i not in exclude]


def output_attrs(func: chainer.FunctionNode, outs: Sequence[Array | None],
                 types: tuple[type, ...]) -> dict[int, tuple[str, ...]]:
    """Map output index -> names of the array attributes of `func` that are that output itself
    (Chainer's GPU ``LocalResponseNormalization`` keeps its output as ``self.y``). They are not
    forward-made state (:func:`forward_state` leaves outputs out), but they keep the output's
    memory alive as long as `func` lives.

    Parameters
    ----------
    func : chainer.FunctionNode
    outs : sequence of array or None
        Its output arrays (:func:`output_arrays`).
    types : tuple of type
        Array types.

    Returns
    -------
    dict of int -> tuple of str
        Only the outputs that some attribute holds.
    """
    index = {id(y): k for k, y in enumerate(outs) if y is not None}
    found: dict[int, list[str]] = {}
    for name, i in array_attr_ids(func, types).items():
        if i in index:
            found.setdefault(index[i], []).append(name)
    return {k: tuple(names) for k, names in found.items()}


def output_arrays(func: chainer.FunctionNode) -> list[Array | None]:
    """Output arrays of a completed function, or None for outputs no longer reachable.

    Parameters
    ----------
    func : chainer.FunctionNode
        The function application.
    """
    arrays = []
    # Chainer declares ``FunctionNode.outputs = None`` unannotated (apply() sets the tuple)
    for ref in func.outputs:  # type: ignore[attr-defined]
        node = ref()
        arr = None
        if node is not None:
            arr = _ci.node_data(node)
            if arr is None:
                var = node.get_variable_or_none()
                if var is not None:
                    arr = _ci.var_array(var)
        arrays.append(arr)
    return arrays


class _Record:
    """What the trace hook learns about one function application."""

    __slots__ = ("func", "before", "in_roots", "in_owners", "snap", "cupy_calls", "restore",
                 "pre", "pin", "stochastic", "changed_inputs", "times", "state", "skip", "level",
                 "forward_peak", "out_specs", "out_views", "out_refs", "freed_after",
                 "backward_peak", "got_grad", "grad_views", "grad_sizes", "ext_info", "_wrapped")


class _TraceHook(chainer.FunctionHook):
    """Records every function application at nesting depth 0, and the backward pass."""

    name = "chainer_ext_trace"
    records_by_pos: list[_Record]          # set by trace() once the forward pass ran
    held_by_caller: list[tuple[int, int]]  # likewise

    def __init__(self, profile, repeats, measure):
        self.profile, self.repeats, self.measure = profile, repeats, measure
        self.records, self.pos = [], {}
        self.backward_order = []
        self.probe = None
        self._depth = self._bdepth = 0
        self._started = 0          # recorded applications started so far
        self._backward = False
        self._out_roots = {}       # id(root) -> (weakref, [(position, output index)])
        self.read_outside = set()  # outputs read by functions applied under no_backprop_mode
        self._outside_made = {}    # id(root) -> (weakref, position): made under no_backprop_mode
        self._ext_roots = {}       # id(root) -> (weakref, _External) of the external arrays
        self._types = _backend.array_types()
        self.cupy_watch = _effects.CupyRandomWatch()
        self.numpy_rng = _effects.NumpyRngState()

    # -- forward ----------------------------------------------------------------------------------

    def forward_preprocess(self, function, in_data):
        self._depth += 1
        if self._depth != 1 or self._backward:
            return
        r = _Record()
        r.func, r.skip = function, not chainer.config.enable_backprop
        self.records.append(r)
        owners = [self._owners(a) for a in in_data]
        if r.skip:
            self.read_outside.update(o for arg in owners for o in arg)
            r.func, r._wrapped = None, _capture_outputs(function)
            return
        self._started += 1
        r.ext_info = [None if own else self._external(a) for a, own in zip(in_data, owners)]
        r.before = array_attr_ids(function, self._types)
        r.in_roots = [weakref.ref(_backend.root_buffer(a)) for a in in_data]
        r.in_owners = owners
        self.cupy_watch.watch(in_data)
        # what the forward may change besides its outputs (see _effects); what it changed is
        # undone after tracing, so that tracing leaves the model as it was
        r.snap = _effects.Snapshot(function, in_data, self._types, self.numpy_rng)
        r.cupy_calls = self.cupy_watch.calls
        r.times, r.state, r.got_grad = [], [], None
        r.grad_views = r.grad_sizes = None
        r.backward_peak = 0
        r._wrapped = _capture_outputs(function)
        if self.measure:
            if self.probe is None:
                self.probe = MemoryProbe(_backend.device_of(in_data)).__enter__()
            r.level = self.probe.mark()
        if self.profile:
            _backend.synchronize(in_data)
            self._t0 = time.perf_counter()

    def forward_postprocess(self, function, in_data):
        self._depth -= 1
        if self._depth != 0 or self._backward:
            return
        r = self.records[-1]
        if r.skip:   # what it makes is made outside the graph, before the next function
            for y in r._wrapped.pop():
                root = _backend.root_buffer(y)
                self._outside_made[id(root)] = (weakref.ref(root), self._started)
            del function.forward
            return
        if self.profile:   # the forward alone, before this hook's own bookkeeping
            _backend.synchronize(in_data)
            r.times.append(time.perf_counter() - self._t0)
        outs = r._wrapped.pop()
        del function.forward  # the class's forward again
        r.forward_peak = max(0, self.probe.peak() - r.level) if self.measure else 0
        r.out_specs = [(tuple(y.shape), np.dtype(y.dtype)) for y in outs]
        roots = [_backend.root_buffer(y) for y in outs]
        r.out_views = [next((p for p, ref in enumerate(r.in_roots) if ref() is root), -1)
                       for root in roots]
        exclude = {id(a) for a in in_data} | {id(y) for y in outs}
        r.state = [(k, int(get_state(function, k).nbytes))
                   for k in forward_state(function, r.before, exclude, self._types)]
        j = len(self.pos)
        self.pos[id(function)] = j
        for k, root in enumerate(roots):
            ref, owners = self._out_roots.get(id(root), (None, None))
            if ref is None or ref() is not root:
                ref, owners = self._out_roots[id(root)] = (weakref.ref(root), [])
            owners.append((j, k))
        r.freed_after = [-1] * len(outs)
        r.out_refs = [weakref.ref(y, self._on_free(r, k)) for k, y in enumerate(outs)]
        self._check_effects(r, function, in_data, outs)
        del outs, roots
        if self.profile:
            for _ in range(self.repeats - 1):
                r.times.append(self._rerun(r, function, in_data, r.restore,
                                           clear_state=False)[3])

    def _external(self, a):
        """The :class:`_External` of array `a`, which no recorded function made (one per
        memory buffer): its bytes and, for an array made during the step (allocated since
        tracing began, seen by tracemalloc), where it is made and freed."""
        root = _backend.root_buffer(a)
        ref, info = self._ext_roots.get(id(root), (None, None))
        if ref is not None and ref() is root:
            return info
        info = _External(int(root.nbytes))
        if (self.probe is not None and self.probe.device == "cpu"
                and tracemalloc.get_object_traceback(root) is not None):
            ref, at = self._outside_made.get(id(root), (None, None))
            info.made = at if ref is not None and ref() is root else self._started - 1

            def freed(_ref):
                if not self._backward:
                    info.freed = self._started - 1
            self._ext_roots[id(root)] = (weakref.ref(root, freed), info)
        else:
            self._ext_roots[id(root)] = (weakref.ref(root), info)
        return info

    def _owners(self, a):
        """The recorded outputs ``(position, k)`` whose memory array `a` is (or is a view of)."""
        root = _backend.root_buffer(a)
        ref, owners = self._out_roots.get(id(root), (None, ()))
        return tuple(owners) if ref is not None and ref() is root else ()

    def _check_effects(self, r, function, in_data, outs):
        """Set ``r.restore`` (what a recomputation must set back, see _effects), ``r.pin`` (why
        the function must not be recomputed, or None) and ``r.stochastic`` (it reuses the random
        draws its forward-made state holds)."""
        r.pin = None
        paths, pin = r.snap.changes(function, in_data)
        r.changed_inputs = r.snap.changed_inputs
        drew_numpy = _effects.GLOBAL_RNG in paths
        drew_cupy = self.cupy_watch.calls > r.cupy_calls
        r.stochastic = False
        r.pre = {p: r.snap.pre(p) for p in paths}
        if pin is None and (drew_numpy or drew_cupy):
            # a second forward with the forward-made state kept: does it reuse the draws?
            others = [p for p in paths if p != _effects.GLOBAL_RNG]
            ys, drew, rebound, _ = self._rerun(r, function, in_data, others,
                                               clear_state=False)
            reuses = not drew and _same_arrays(ys, outs)
            if reuses and not rebound:
                r.stochastic, paths = True, others
            elif drew_numpy and not drew_cupy and _same_arrays(
                    self._rerun(r, function, in_data, paths, clear_state=True)[0], outs):
                pass  # replay: the state dropped, NumPy's random state set back
            elif reuses:
                # it makes part of its state again from the part it reuses (Gaussian's noise
                # from its eps): a recomputation replaces those arrays
                r.stochastic, paths = True, others
            elif drew_cupy:
                pin = ("its forward draws from CuPy's random generator, whose state cannot be "
                       "saved, and a second forward does not reuse what the first drew")
            else:
                pin = ("its forward is not reproducible: a second forward from NumPy's random "
                       "state before the first gives other outputs")
        r.restore, r.pin, r.snap = paths, pin, None

    def _rerun(self, r, function, in_data, paths, clear_state):
        """Run `function`'s forward again with `paths` set to their values before its first
        forward (and its forward-made state set to None if `clear_state`); put everything back
        afterwards. Return the outputs, whether the forward drew from a global generator (not
        counting NumPy's when it is among `paths`), whether it rebound a state attribute, and
        the seconds of the forward itself (to its device's synchronization; setting and
        restoring the generators and state left out)."""
        if r.pin is not None and r.changed_inputs:
            in_data = tuple(a.copy() for a in in_data)  # it writes to its inputs
        kept = {k: get_state(function, k) for k, _ in r.state}
        np_fp, np_state = self.numpy_rng.now()
        calls = self.cupy_watch.calls
        try:
            if clear_state:
                for k in kept:
                    set_state(function, k, None)
            with _effects.swapped(function, paths, [r.pre[p] for p in paths], self._types), \
                    chainer.using_device(chainer.backend.get_device_from_array(*in_data)):
                t0 = time.perf_counter()
                ys = function.forward(in_data)
                _backend.synchronize(in_data)
                seconds = time.perf_counter() - t0
                drew = (self.cupy_watch.calls > calls
                        or not _effects.same_data(_effects.numpy_rng_fingerprint(), np_fp))
            rebound = any(get_state(function, k) is not v for k, v in kept.items())
        finally:
            for k, v in kept.items():
                set_state(function, k, v)
            np.random.set_state(np_state)
        return ys, drew, rebound, seconds

    def _on_free(self, r, k):
        def freed(_ref):
            if not self._backward:
                r.freed_after[k] = self._started - 1
        return freed

    # -- backward ---------------------------------------------------------------------------------

    def start_backward(self):
        self._backward = True

    def backward_preprocess(self, function, in_data, out_grad):
        self._bdepth += 1
        if self._bdepth != 1:
            return
        j = self.pos.get(id(function))
        if j is None:
            return
        self.backward_order.append(j)
        r = self.records_by_pos[j]
        r.got_grad = [g is not None for g in out_grad]
        r.grad_views, r.grad_sizes = {}, {}
        _capture_backward(function, r.grad_views, r.grad_sizes)
        if self.measure:
            r.level = self.probe.mark()

    def backward_postprocess(self, function, in_data, out_grad):
        self._bdepth -= 1
        if self._bdepth:
            return
        j = self.pos.get(id(function))
        if j is None:
            return
        del function.backward  # the class's backward again
        if self.measure:
            r = self.records_by_pos[j]
            r.backward_peak = max(0, self.probe.peak() - r.level)

    def close(self):
        self.cupy_watch.close()
        if self.probe is not None:
            self.probe.__exit__(None, None, None)
            self.probe = None

    def undo_effects(self):
        """Set back what the traced forward changed besides its outputs (latest first)."""
        for r in reversed(self.records):
            for p in reversed(getattr(r, "restore", None) or ()):
                _effects.put(r.func, p, r.pre[p])
            for a, before in getattr(r, "changed_inputs", None) or ():
                a[...] = before


class _External:
    """An array the step's functions read that none of them made: its memory's bytes, the
    forward position before which the step made it (-1: before the step) and the one after
    which it was freed (-1: not in the forward pass)."""

    __slots__ = ("nbytes", "made", "freed")

    def __init__(self, nbytes):
        self.nbytes, self.made, self.freed = nbytes, -1, -1


def _same_arrays(ys, outs):
    return len(ys) == len(outs) and all(_effects.same_bits(y, o) for y, o in zip(ys, outs))


def _capture_outputs(function):
    """Wrap `function.forward` (an instance attribute, removed in forward_postprocess) so that
    its output arrays are seen before Chainer wraps them in Variables the caller may drop."""
    box = []
    forward = function.forward

    def capturing_forward(inputs):
        out = forward(inputs)
        box.append(out)
        return out

    function.forward = capturing_forward
    return box


def _capture_backward(function, views, sizes):
    """Wrap `function.backward` (an instance attribute, removed in backward_postprocess) so
    that the gradients it returns are compared with its output gradients as it returns them:
    ``views[p] = k`` where the gradient of input ``p`` shares memory with the gradient of
    output ``k`` (Add's backward returns its output gradient for both inputs, Concat's splits
    it, Reshape's reshapes it); ``sizes[p]`` is the bytes of the memory a new gradient owns
    where that is less than its size (``F.average``'s backward broadcasts one value per sample
    and channel). Only numbers are kept, so no gradient lives longer than in a plain
    backward."""
    backward = function.backward

    def capturing_backward(target_input_indexes, grad_outputs):
        gxs = backward(target_input_indexes, grad_outputs)
        roots = [None if gy is None else _backend.root_buffer(gy.raw_array)
                 for gy in grad_outputs]
        at = (range(len(gxs)) if len(gxs) == len(function.inputs)
              else target_input_indexes)
        for p, gx in zip(at, gxs):
            if gx is None or gx.raw_array is None:
                continue
            root = _backend.root_buffer(gx.raw_array)
            k = next((k for k, r in enumerate(roots) if r is not None and r is root), -1)
            if k >= 0:
                views[p] = k
            elif root.nbytes < gx.raw_array.nbytes:
                sizes[p] = int(root.nbytes)
        del roots
        return gxs

    function.backward = capturing_backward


def trace(fn: Callable[[], chainer.Variable | Sequence[chainer.Variable]], *,
          cost_model: Literal["preset", "profile"] = "preset", repeats: int = 5,
          time_unit: float = 1e-4, count_state: bool = True,
          measure_memory: bool = True) -> TracedGraph:
    """Run one training step of `fn` and record it as a :class:`TracedGraph`.

    The forward pass runs once under a recording hook; then the backward pass runs once from
    the returned Variables (seeded with ones, as ``loss.backward()`` does for a scalar), so that
    Chainer's backward order and gradients are recorded too. Parameters' gradients, what each
    forward changed besides its outputs (running statistics, counters on links, private random
    generators, inputs written in place) and NumPy's global random state are restored
    afterwards; CuPy's random state is not.

    Each function's side effects are found here (see ``chainer_ext._effects``): what its
    forward changed that a recomputation must set back goes to ``attrs[v]["restore"]``; a
    function that drew random numbers and reuses its kept draws on a second forward is
    ``NodeFacts.stochastic``; one whose change cannot be set back (an input or a list changed
    in place), or whose draws cannot be replayed, is ``NodeFacts.pinned`` with the reason in
    ``attrs[v]["pinned"]``.

    Parameters
    ----------
    fn : callable
        Takes no argument and runs one forward pass, returning the loss Variable (or a tuple or
        list of Variables the backward pass starts from).
    cost_model : {"preset", "profile"}
        "preset": T_v = 10 for convolutions, 1 otherwise (the paper's rule). "profile": the
        median forward time of each function over `repeats` runs on the current device, in
        units of `time_unit` seconds (at least 1): the forward call alone, to the device's
        synchronization, without the trace's own work around it (its memory probe and
        bookkeeping, saving and restoring generators and state for a repeat).
    repeats : int
        Runs per function for "profile" (the first is the real forward).
    time_unit : float
        Seconds per cost unit for "profile".
    count_state : bool
        If True (default), M_v also counts the arrays a function keeps for its backward besides
        its inputs and outputs (max-pooling indexes, BatchNormalization statistics, the softmax
        of softmax_cross_entropy, Dropout's mask). If False, M_v is the bytes of the outputs.
    measure_memory : bool
        Measure each forward and backward call's peak (``NodeFacts.forward_peak`` and
        ``backward_peak``) with tracemalloc on CPU or CuPy's pool on GPU. On CPU this slows the
        trace down a few times and needs tracemalloc not to be tracing already.

    Returns
    -------
    TracedGraph
        M_v in bytes (see `count_state`); T_v as chosen; ``facts`` filled.

    Raises
    ------
    ValueError
        If `cost_model`, `repeats` or `time_unit` is invalid.
    TraceError
        If `fn` applies no function with backprop enabled, or does not return Variables
        computed inside it, or Chainer's ``lazy_grad_sum`` is on (the schedule models the
        default, eager summation of gradients).
    RuntimeError
        If `measure_memory` and tracemalloc is already tracing (CPU), or CuPy is missing (GPU).

    Notes
    -----
    Functions applied under ``chainer.no_backprop_mode()`` are not nodes (their outputs are
    treated as inputs), and functions applied inside another function's forward are not
    recorded. Outputs the step hands outside its graph join ``facts.returned`` without a seed,
    so that no plan frees or drops them: those read by a function applied under
    ``no_backprop_mode``, those whose Variable is still alive when `fn` returns (kept by the
    caller or by a link: ``L.LSTM``'s state), and those whose array an external argument
    shares (``chainer.Variable(y.array)``). `fn` should keep what the real step keeps. An
    array made during the step outside the graph (the output of a function under
    ``no_backprop_mode``, NumPy arithmetic on ``.array``) that a node reads is an external
    input with a lifetime (``facts.external_made``, ``facts.external_free_after``): made
    where the function applied under ``no_backprop_mode`` that made it ran (else before its
    first reader's forward) and freed where the traced run freed it. A function that reads
    such an array freed in the forward pass is pinned (a recomputation would need it). An
    array counts as made during the step when the trace's tracemalloc saw it allocated (on the
    CPU with `measure_memory`, from the first function applied on); else it is resident.

    References
    ----------
    .. [1] Kusumoto et al., NeurIPS 2019, Sec. 2 (G, T_v, M_v) and Sec. 5 (cost rule).
    """
    if cost_model not in COST_MODELS:
        raise ValueError(f"unknown cost_model {cost_model!r}; expected one of {COST_MODELS}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be a positive int, got {repeats!r}")
    if not (isinstance(time_unit, (int, float)) and time_unit > 0):
        raise ValueError(f"time_unit must be a positive number of seconds, got {time_unit!r}")
    if chainer.config.lazy_grad_sum:
        raise TraceError("chainer.config.lazy_grad_sum is on; the schedule models Chainer's "
                         "default (gradients summed as they arrive): turn it off")
    hook = _TraceHook(cost_model == "profile", repeats, measure_memory)
    rng_state = np.random.get_state()
    saved_grads = None
    try:
        with hook:
            result = fn()
            results = _returned(result)
            hook.records = [r for r in hook.records if not r.skip]
            if not hook.records:
                raise TraceError("the traced callable applied no function with backprop "
                                 "enabled")
            hook.records_by_pos = hook.records
            hook.held_by_caller = _held_by_caller(hook.records, results)
            saved_grads = _save_grads(hook.records)
            hook.start_backward()
            _run_backward(results)
        return _build(hook, results, cost_model, time_unit, count_state)
    finally:
        hook.close()
        if saved_grads is not None:
            for var, grad in saved_grads:
                var.grad = grad
        hook.undo_effects()
        np.random.set_state(rng_state)


def _returned(result):
    if isinstance(result, chainer.Variable):
        return [result]
    if isinstance(result, (tuple, list)) and result and all(
            isinstance(v, chainer.Variable) for v in result):
        return list(result)
    raise TraceError(f"the traced callable must return a chainer.Variable or a tuple of them, "
                     f"got {type(result).__name__}")


def _held_by_caller(records, results):
    """Outputs ``(position, k)`` whose Variable is still alive when the traced callable returns,
    besides the results: the caller or a link keeps it (``L.LSTM``'s state, a dict of logits)."""
    out = []
    for j, r in enumerate(records):
        for k, ref in enumerate(r.func.outputs):
            node = ref()
            var = None if node is None else node.get_variable_or_none()
            if var is not None and not any(var is v for v in results):
                out.append((j, k))
    return out


def _save_grads(records):
    """(variable, grad) of every external Variable the step may give a gradient."""
    out, seen = [], set()
    for r in records:
        for node in r.func.inputs:
            var = node.get_variable_or_none()
            if node.creator_node is None and var is not None and id(var) not in seen:
                seen.add(id(var))
                out.append((var, var.grad))
                var.grad = None
    return out


def _run_backward(results):
    seeds = [v for v in results if v.requires_grad]
    if not seeds:
        return
    for v in seeds:
        v.grad = v.xp.ones_like(v.array)
    chainer.backward(seeds)


def _external_key(node, var, held):
    """What identifies an external array: the array object, so that one array passed to
    several functions (a label array given to two losses, each wrapping it in its own Variable)
    is one external; the node when its array is gone. `held` keeps the arrays alive while keys
    are made, so that no id is reused."""
    arr = var.array if var is not None else node.data
    if arr is None:
        return "node", id(node)
    held.append(arr)
    return "array", id(arr)


def _build(hook, results, cost_model, time_unit, count_state):
    records = hook.records
    pos = hook.pos
    nodes, edges, cost, memory, attrs, facts = [], [], {}, {}, {}, []
    externals, ext_index, held = [], {}, []
    sizes, lives, owned = [], [], set()   # per external: size, (made, freed); memory counted
    aliased = set()   # outputs whose memory an external argument shares (Variable(y.array))
    for j, r in enumerate(records):
        f = r.func
        args, fargs = [], []
        pin = r.pin
        for p, node in enumerate(f.inputs):
            creator = node.creator_node
            if creator is not None and id(creator) in pos:
                i = pos[id(creator)]
                k = next(k for k, ref in enumerate(creator.outputs) if ref() is node)
                args.append(["node", i, k])
                fargs.append((i, k))
                edges.append((i, j))
            else:
                var = node.get_variable_or_none()
                kind = "param" if isinstance(var, chainer.Parameter) else "input"
                aliased.update(r.in_owners[p])
                key = _external_key(node, var, held)
                if key not in ext_index:
                    ext_index[key] = len(externals)
                    externals.append((kind, _external_bytes(node, kind, r, p, owned, sizes,
                                                            lives)))
                if pin is None and lives[ext_index[key]][1] >= 0:
                    pin = ("it reads an array made during the step outside the graph, which the "
                           "step frees in its forward pass: a recomputation would need it")
                args.append([kind, list(node.shape), str(node.dtype)])
                fargs.append((~ext_index[key], 0))
        out_bytes = [_nbytes(s, d) for s, d in r.out_specs]
        state_bytes = sum(b for _, b in r.state)
        name = type(f).__name__
        nodes.append(j)
        memory[j] = sum(out_bytes) + (state_bytes if count_state else 0)
        if cost_model == "preset":
            cost[j] = preset_cost(name)
        else:
            cost[j] = max(1, int(round(statistics.median(r.times) / time_unit)))
        attrs[j] = {"function": name, "inputs": args,
                    "outputs": [[list(s), str(d)] for s, d in r.out_specs]}
        facts.append(dict(outputs=tuple(out_bytes), args=tuple(fargs), state=state_bytes,
                          reads_args=_ci.retained_input_indexes(f),
                          reads_outputs=_ci.retained_output_indexes(f),
                          output_views=tuple(r.out_views), forward_peak=int(r.forward_peak),
                          backward_peak=int(r.backward_peak), stochastic=r.stochastic,
                          pinned=pin is not None, plain_free_after=tuple(r.freed_after)))
        if pin is not None:
            attrs[j]["pinned"] = f"{name}: {pin}"
        elif r.restore:
            attrs[j]["restore"] = [list(p) for p in r.restore]
    out_labels, returned = [], []
    for v in results:
        c = v.creator_node
        if c is None or id(c) not in pos:
            raise TraceError("the traced callable returned a Variable that no function inside "
                             "it computed")
        j = pos[id(c)]
        out_labels.append(j)
        returned.append((j, next(k for k, ref in enumerate(c.outputs) if ref() is v.node)))
    node_facts = _node_facts(records, facts, hook)
    seeds = tuple(o for o in returned if records[o[0]].got_grad is not None
                  and records[o[0]].got_grad[o[1]])
    # outputs the step hands outside the graph are never freed either (no seed: no gradient)
    held = sorted(set(hook.read_outside) | set(hook.held_by_caller) | aliased)
    made = any(m >= 0 for m, _ in lives)
    ef = lowerset.ExecutionFacts(
        nodes=node_facts, forward_order=tuple(range(len(records))),
        backward_order=tuple(hook.backward_order), externals=tuple(externals),
        returned=tuple(dict.fromkeys(returned + held)), seeds=tuple(dict.fromkeys(seeds)),
        external_sizes=(tuple(sizes) if any(b != x for (_, b), x in zip(externals, sizes))
                        else ()),
        external_made=tuple(m for m, _ in lives) if made else (),
        external_free_after=tuple(q for _, q in lives) if made else ())
    return TracedGraph(nodes, edges, cost, memory, attrs, facts=ef, outputs=out_labels,
                       cost_model=cost_model,
                       time_unit=time_unit if cost_model == "profile" else None)


def _external_bytes(node, kind, r, p, owned, sizes, lives):
    """Resident bytes of a new external array, argument `p` of record `r`; append its size to
    `sizes` and its ``(made, freed)`` forward positions to `lives`. An array that shares the
    memory of a recorded output (``chainer.Variable(y.array)``) or of an earlier external made
    in the step owns 0 bytes; one made in the step owns its memory's bytes for its lifetime."""
    size = _nbytes(node.shape, node.dtype)
    sizes.append(size)
    info = r.ext_info[p]
    made = kind == "input" and info is not None and info.made >= 0
    if r.in_owners[p] or (made and id(info) in owned):
        lives.append((-1, -1))
        return 0
    if made:
        owned.add(id(info))
        lives.append((info.made, info.freed))
        return info.nbytes
    lives.append((-1, -1))
    return size


def _node_facts(records, facts, hook):
    """NodeFacts per node: which arguments get a gradient (the consumer's backward runs, the
    argument requires one, and the value received one), and which gradients are views of an
    output gradient (seen as the backward returned them, :func:`_capture_backward`)."""
    ran = set(hook.backward_order)
    out = []
    for j, (r, d) in enumerate(zip(records, facts)):
        grads, gviews, gsizes = [], [], []
        views, small = r.grad_views or {}, r.grad_sizes or {}
        for p, (node, (s, k)) in enumerate(zip(r.func.inputs, d["args"])):
            if s >= 0:
                got = records[s].got_grad
                gives = j in ran and node.requires_grad and got is not None and got[k]
            else:
                gives = j in ran and node.requires_grad
            grads.append(bool(gives))
            gviews.append(views.get(p, -1) if gives else -1)
            gsizes.append(small[p] if gives and p in small else _nbytes(node.shape, node.dtype))
        small = tuple(gsizes) if any(gives and p in small for p, gives in enumerate(grads)) else ()
        out.append(lowerset.NodeFacts(grad_args=tuple(grads), grad_views=tuple(gviews),
                                      grad_sizes=small, **d))
    return tuple(out)
