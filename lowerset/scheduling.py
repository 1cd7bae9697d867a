"""The execution schedule of one training step: the events, in order, and the memory they use.

This module is the only statement of the executor's policy: what is kept, dropped, recomputed
and freed, and when. :func:`schedule` turns a plan into :class:`Schedule` events;
``chainer_ext.RecomputeHook`` executes those events, and :func:`simulate` folds them into bytes.

A canonical strategy (paper, Sec. 3) says which values are dropped after the forward pass: those
of ``V_i ∖ ∂(L_i)`` for ``i < k`` (the last segment is kept; a returned output is never dropped).
The hooked step then runs in three passes over the graph's :class:`~lowerset.ExecutionFacts`:

1. **Compute events.** ``forward`` of every node in ``forward_order``; then, for each node of
   ``backward_order``: the ``recompute`` of every dropped value its backward reads (its own
   outputs when its backward reads them or its dropped state is needed, and the arguments in
   ``reads_args``), together with the dropped values those need, transitively, in forward order;
   then its ``backward``. A recomputed value stays until its last use, so nothing is recomputed
   twice.
2. **Liveness analysis.** Every array (an output of a node, or a node's state) is freed right
   after its last read in the event sequence: ``drop`` for the forward copy of a dropped value,
   ``free_value`` otherwise, ``free_state`` for states; the forward copy of an output lives at
   least until the forward position its ``held_until`` names (the step's own code holds it).
   The backward of a node reads the arrays
   in its ``reads_args`` and ``reads_outputs`` and its state; a forward or recomputation reads all
   its arguments (a stochastic function's recomputation also reads its kept state). After a
   ``backward`` its output gradients are freed (``free_grad``). Returned outputs are never freed.
3. **Memory fold** (:func:`simulate`). Bytes are counted per buffer, so a view (``output_views``,
   ``grad_views``) costs nothing while its base lives and keeps the base alive. A backward
   allocates one gradient per argument in ``grad_args`` (of the argument's size, or its
   ``grad_sizes`` entry: a broadcast); a gradient arriving for an array that already has one
   is summed at once, into a new array (Chainer's default, ``lazy_grad_sum=False``) or in
   place (PyTorch; ``ExecutionFacts.grad_sum``). Each
   event peaks at its start level plus the larger of what it allocates (and, for a backward,
   the sums' transient arrays) and its measured ``forward_peak``/``backward_peak``.
   Parameters and inputs (``externals``) are resident; an external made during the step
   (``external_made``) is allocated at the start of that forward event and freed at the end
   of the one ``external_free_after`` names, whatever the plan. Gradients that exist when the
   step starts (``ExecutionFacts.grads_at_start``: gradient accumulation) are resident too,
   and the gradients arriving for their parameters are summed into them: at the first
   arrival into a new array that replaces both (Chainer), or, once the last arrival is in, in
   place, the pending sum then released (PyTorch's AccumulateGrad).

A plain step (no hook; :func:`schedule` of a :class:`~lowerset.Graph`) has no drops and no
recomputation; a value is freed where the recorded run freed it (``plain_free_after`` in the
forward pass, ``plain_free_in_backward`` in the backward pass), states live to the end,
gradients are freed after each backward.

References
----------
.. [1] Kusumoto et al., NeurIPS 2019, Sec. 3 (canonical strategy; liveness analysis applied to
   it), footnote 2 (eq. (2) overestimates such an executor).
"""

from __future__ import annotations

import threading
from collections import namedtuple
from collections.abc import Hashable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any, NamedTuple, TypeGuard

import numpy as np

from . import _schedule_kernels as _k
from ._typing import BoolArray, IntArray
from .exceptions import ArgumentTypeError
from .execution import ExecutionFacts
from .graph import Graph

if TYPE_CHECKING:
    from .dropset import DropSetStrategy
    from .strategy import CanonicalStrategy

#: A schedule's events as int64 arrays ``(kind, node, nbytes, optr, oidx)``
#: (:attr:`Schedule.arrays`).
EventArrays = tuple[IntArray, IntArray, IntArray, IntArray, IntArray]

__all__ = ["Event", "Schedule", "MemoryFold", "schedule", "simulate", "EVENT_KINDS",
           "inplace_groups"]

#: Event kinds, in the vocabulary of the paper's canonical strategy and of liveness analysis.
EVENT_KINDS = _k.EVENT_CODES


class Event(NamedTuple):
    """One step of a training step's schedule.

    Attributes
    ----------
    kind : str
        One of :data:`EVENT_KINDS`.
    node : hashable
        The node's label.
    bytes : int
        Nominal bytes of the arrays the event makes or frees (views counted at their size):
        ``forward``/``recompute``: the outputs and the state made; ``drop``/``free_value``: the
        outputs freed; ``free_state``: the state; ``seed_grad``: the initial gradient;
        ``backward``/``free_grad``: the node's output gradients read/freed.
    outputs : tuple of int
        Output indexes concerned (``forward``, ``recompute``, ``drop``, ``free_value``,
        ``seed_grad``); empty otherwise.
    """

    kind: str
    node: Hashable
    bytes: int
    outputs: tuple[int, ...]


@dataclass(frozen=True)
class MemoryFold:
    """Bytes in use over a schedule (all in bytes, parameters and inputs included).

    Attributes
    ----------
    timeline : ndarray of int64, shape (#events,)
        Bytes in use after each event.
    highs : ndarray of int64, shape (#events,)
        Bytes in use at each event's highest point (its transient workspace included).
    resident : int
        Bytes allocated before the step (parameters, inputs, the gradients that exist at the
        start).
    peak : int
        ``max(resident, highs.max())``: the step's peak.
    peak_index : int
        Index of the first event reaching the peak (-1 if the resident bytes are the peak).
    """

    timeline: IntArray
    highs: IntArray
    resident: int
    peak: int
    peak_index: int


class Schedule:
    """The ordered events of one training step under a plan (see the module docstring).

    Parameters
    ----------
    graph : Graph
        The step's graph.
    strategy : CanonicalStrategy, DropSetStrategy or None
        None for the plain step.
    arrays : tuple of ndarray
        The events as arrays ``(kind, node, nbytes, optr, oidx)`` (int64; node ids, kind codes
        of :data:`EVENT_KINDS`, outputs in CSR form).
    """

    def __init__(self, graph: Graph, strategy: CanonicalStrategy | DropSetStrategy | None,
                 arrays: EventArrays) -> None:
        self.graph = graph
        self.strategy = strategy
        self.arrays = arrays

    @cached_property
    def events(self) -> tuple[Event, ...]:
        """Tuple of :class:`Event`, in order."""
        kind, node, nbytes, optr, oidx = self.arrays
        labels = self.graph.labels
        oidx = oidx.tolist()
        optr = optr.tolist()
        return tuple(Event(EVENT_KINDS[k], labels[v], b, tuple(oidx[optr[i]:optr[i + 1]]))
                     for i, (k, v, b) in enumerate(zip(kind.tolist(), node.tolist(),
                                                       nbytes.tolist())))

    @cached_property
    def fold(self) -> MemoryFold:
        """:class:`MemoryFold` of the events (computed once)."""
        return _fold(self.graph, self.arrays)

    @property
    def peak(self) -> int:
        """Bytes in use at the step's highest point, resident bytes included."""
        return self.fold.peak

    @property
    def resident(self) -> int:
        """Bytes allocated before the step (parameters, inputs, the gradients that exist at
        the start: ``ExecutionFacts.grads_at_start``)."""
        return self.fold.resident

    @property
    def timeline(self) -> IntArray:
        """Bytes in use after each event (ndarray of int64, shape (#events,))."""
        return self.fold.timeline

    @property
    def recomputed(self) -> list[Hashable]:
        """Labels recomputed (or rematerialized), in order; a canonical strategy's schedule
        recomputes each at most once."""
        kind, node = self.arrays[0], self.arrays[1]
        return [self.graph.labels[v] for v in node[_replays(kind)].tolist()]

    @property
    def recompute_cost(self) -> int:
        """Total cost T of the recomputations (and rematerializations), cost units; for a
        canonical strategy at most its eq. (1) overhead."""
        return _recompute_cost(self.graph, self.arrays)

    def __len__(self) -> int:
        return int(self.arrays[0].shape[0])

    def __repr__(self) -> str:
        what = "plain" if self.strategy is None else repr(self.strategy)
        return f"Schedule({len(self)} events, peak={self.peak} bytes, {what})"


def schedule(plan: CanonicalStrategy | DropSetStrategy | Graph) -> Schedule:
    """Return the schedule of one training step under `plan`.

    Parameters
    ----------
    plan : CanonicalStrategy, DropSetStrategy or Graph
        A strategy (run with ``chainer_ext.RecomputeHook`` or ``torch_ext.RecomputeContext``),
        or a graph (the plain step with no hook).

    Returns
    -------
    Schedule

    Raises
    ------
    ArgumentTypeError
        If `plan` is neither.

    References
    ----------
    .. [1] Kusumoto et al., NeurIPS 2019, Sec. 3.

    Examples
    --------
    >>> g = ls.Graph.chain(3, memory=10)
    >>> s = ls.schedule(ls.CanonicalStrategy(g, [{0, 1}, {0, 1, 2}]))
    >>> [(e.kind, e.node) for e in s.events][:5]
    [('forward', 0), ('forward', 1), ('drop', 0), ('forward', 2), ('seed_grad', 2)]
    >>> s.peak, s.recomputed
    (60, [0])
    """
    if _is_strategy(plan):
        return Schedule(plan.graph, plan, _hooked_arrays(plan.graph, dropped_nodes(plan)))
    if isinstance(plan, Graph):
        return Schedule(plan, None, _plain_arrays(plan))
    raise ArgumentTypeError(f"plan must be a lowerset.CanonicalStrategy, a "
                            f"lowerset.DropSetStrategy or a lowerset.Graph, got "
                            f"{type(plan).__name__}")


def _is_strategy(plan: object) -> TypeGuard[CanonicalStrategy | DropSetStrategy]:
    """Whether `plan` is a :class:`~lowerset.CanonicalStrategy` or a
    :class:`~lowerset.DropSetStrategy`: an object with a graph and the segment of each of its
    nodes (:func:`segment_labels`) or its dropped set (all the schedule reads of it).

    The test reads attributes rather than calling ``isinstance``: :mod:`lowerset.strategy`
    and :mod:`lowerset.dropset` import this module (their ``schedule``), so this one does not
    import them."""
    return isinstance(getattr(plan, "graph", None), Graph) and (
        callable(getattr(plan, "segment_of_nodes", None))
        or callable(getattr(plan, "dropped_mask", None)))


def simulate(plan: CanonicalStrategy | DropSetStrategy | Graph) -> MemoryFold:
    """Return the memory fold of `plan`'s schedule: ``schedule(plan).fold``.

    Parameters
    ----------
    plan : CanonicalStrategy, DropSetStrategy or Graph

    Returns
    -------
    MemoryFold

    Raises
    ------
    ArgumentTypeError
        If `plan` is neither a strategy nor a graph.

    Examples
    --------
    >>> g = ls.Graph.chain(6, memory=10)
    >>> s = ls.CanonicalStrategy(g, [set(range(6))])   # no recomputation
    >>> s.peak_memory, ls.simulate(s).peak           # eq. (2) counts every gradient at once
    (120, 90)
    """
    return schedule(plan).fold


def dropped_nodes(strategy: CanonicalStrategy | DropSetStrategy) -> BoolArray:
    """Bool per node id (shape (n,)): the nodes whose outputs `strategy` drops after the forward
    pass. For a canonical strategy, ``V_i ∖ ∂(L_i)`` for ``i < k`` minus returned outputs,
    pinned nodes and nodes without consumers; an in-place function (``NodeFacts.inplace``) and
    the producer of the array it overwrites are dropped only when all of them would be (they
    share one buffer, and a recomputation of the in-place function needs its argument's value
    from before the write). For a :class:`~lowerset.DropSetStrategy`, its dropped set.

    Parameters
    ----------
    strategy : CanonicalStrategy or DropSetStrategy
        The plan.
    """
    if callable(getattr(strategy, "dropped_mask", None)):
        return strategy.dropped_mask()  # type: ignore[union-attr]
    return dropped_of_labels(strategy.graph, segment_labels(strategy))  # type: ignore[arg-type]


def segment_labels(strategy: CanonicalStrategy) -> IntArray:
    """Int64 per node id (shape (n,)): the 0-based segment i of each node, ``v ∈ V_{i+1}``.

    Parameters
    ----------
    strategy : CanonicalStrategy
        The plan.
    """
    return strategy.segment_of_nodes()


def dropped_of_labels(g: Graph, seg: IntArray) -> BoolArray:
    """:func:`dropped_nodes` of the lower-set sequence whose segment labels are `seg`.

    Parameters
    ----------
    g : Graph
        The graph.
    seg : ndarray of int64, shape (n,)
        Segment labels, monotone along every edge, no empty segment.

    Notes
    -----
    A node of V_i lies on some boundary ∂(L_j), j >= i, exactly when a successor in G lies in
    a later segment (then it is on ∂(L_i) itself), an edge that carries no array
    (``NodeFacts.after``) included: the schedule keeps what eq. (1) counts as kept, so that it
    recomputes at most the strategy's eq. (1) overhead. A kept value that no later function
    reads costs no memory past its last read (liveness analysis frees it there)."""
    src, dst, droppable, tie = _drop_rule(g)
    boundary = np.zeros(g.n, dtype=bool)
    boundary[src[seg[dst] > seg[src]]] = True
    dropped = droppable & ~boundary & (seg != seg.max())
    if tie is not None:  # an in-place function and the array it overwrites: both or neither
        whole = np.ones(g.n, dtype=bool)
        np.logical_and.at(whole, tie, dropped)
        dropped &= whole[tie]
    return dropped


def _drop_rule(g):
    """(sources and targets of G's edges, nodes that may be dropped, in-place groups) of `g`,
    computed once. A node may be dropped when some function reads its outputs (an edge that
    carries an array) and it is neither pinned nor returned. The groups are an int64 root id
    per node (None when nothing is in place): an in-place function (``NodeFacts.inplace``) and
    the producer of the array it overwrites share one."""
    cached = g.__dict__.get("_drop_rule")
    if cached is None:
        src = np.repeat(np.arange(g.n, dtype=np.int64), np.diff(g.succ_ptr))
        dst = np.asarray(g.succ_idx, dtype=np.int64)
        keep = pinned_nodes(g)
        for v, _ in g.facts.returned:
            keep[v] = True
        consumed = np.zeros(g.n, dtype=bool)
        consumed[[s for nf in g.facts.nodes for s, _ in nf.args if s >= 0]] = True
        droppable = ~keep & consumed
        cached = g.__dict__["_drop_rule"] = (src, dst, droppable, _inplace_groups(g.facts))
    return cached


def _inplace_groups(facts):
    """Root id per node of the groups tied by in-place writes (union-find), or None."""
    groups = inplace_groups(facts)
    return groups if (groups != np.arange(len(facts.nodes))).any() else None


def inplace_groups(facts: ExecutionFacts) -> IntArray:
    """Int64 per node (shape (n,)): the root id of the group of nodes that in-place writes tie
    together, the node itself where none does.

    An in-place function (``NodeFacts.inplace``) writes into the buffer of the argument its
    output is a view of. It is tied with that argument's node and, following ``output_views``
    from there, with every view on the way to the node that owns the buffer: the writes change
    the owner's value, so a plan that recomputes the owner must replay them, and one that keeps
    it must not replay them on the kept buffer. A plan drops a group whole or not at all
    (:func:`dropped_nodes`); a function of the group that a later one overwrites reads the
    buffer as it was when it ran, so the group is recomputed in forward order (the facts' args
    lead from each write to the ones before it: ``torch_ext.trace`` records them).

    Parameters
    ----------
    facts : ExecutionFacts
        The step's facts.
    """
    nodes = facts.nodes
    root = np.arange(len(nodes), dtype=np.int64)

    def find(v: int) -> int:
        while root[v] != v:
            root[v] = root[root[v]]
            v = root[v]
        return v

    for w, nf in enumerate(nodes):
        if not nf.inplace:
            continue
        for p in nf.output_views:
            src = nf.args[p] if p >= 0 else (-1, 0)
            while src[0] >= 0:
                s, k = src
                root[find(w)] = find(s)
                q = nodes[s].output_views[k] if k < len(nodes[s].output_views) else -1
                src = nodes[s].args[q] if q >= 0 else (-1, 0)
    return np.array([find(v) for v in range(len(root))], dtype=np.int64)


def pinned_nodes(g: Graph) -> BoolArray:
    """Bool per node id (shape (n,)): the pinned nodes (``NodeFacts.pinned``).

    Parameters
    ----------
    g : Graph
        The graph.
    """
    return np.array([nf.pinned for nf in g.facts.nodes], dtype=bool)


# -- flattened facts ------------------------------------------------------------------------------

Flat = namedtuple("Flat", "n n_out n_targets resident fwd fpos bwd out_ptr out_node out_bytes "
                          "out_view returned seed grad_out plain_free state stoch arg_ptr "
                          "arg_node arg_out arg_target arg_size arg_gsize arg_grad arg_gview "
                          "rarg_ptr rarg_idx rout_ptr rout_idx fpeak bpeak plain_free_bwd "
                          "sum_inplace held ext_bytes made_ptr made_idx efree_ptr efree_idx "
                          "out_at gs_target gs_bytes gs_arrivals")
Flat.__doc__ = "The execution facts of a graph as flat int64/bool arrays (see _schedule_kernels)."


def flat_facts(g: Graph) -> Flat:
    """Return the :data:`Flat` arrays of `g`'s execution facts (computed once per graph).

    Parameters
    ----------
    g : Graph
        The graph.
    """
    cached = g.__dict__.get("_flat_facts")
    if cached is None:
        cached = g.__dict__["_flat_facts"] = _flatten(g)
    return cached


def _i64(x):
    return np.ascontiguousarray(np.asarray(x, dtype=np.int64).reshape(-1))


def _flatten(g):
    F = g.facts
    n = g.n
    out_ptr = _i64([0] + list(np.cumsum([len(nf.outputs) for nf in F.nodes])))
    n_out = int(out_ptr[-1])
    arg_ptr = _i64([0] + list(np.cumsum([len(nf.args) for nf in F.nodes])))
    n_ext = len(F.externals)
    out_node = np.repeat(np.arange(n), np.diff(out_ptr)).astype(np.int64)
    out_bytes = _i64([b for nf in F.nodes for b in nf.outputs])
    out_view = []
    for v, nf in enumerate(F.nodes):
        for p in nf.output_views:
            if p < 0:
                out_view.append(-1)
            else:
                s, k = nf.args[p]
                out_view.append(int(out_ptr[s]) + k if s >= 0 else -2)
    arg_node, arg_out, arg_target, arg_size = [], [], [], []
    for nf in F.nodes:
        for s, k in nf.args:
            if s >= 0:
                o = int(out_ptr[s]) + k
                arg_node.append(s)
                arg_out.append(o)
                arg_target.append(o)
                arg_size.append(F.nodes[s].outputs[k])
            else:
                arg_node.append(-1)
                arg_out.append(-1)
                arg_target.append(n_out + F.external_target(~s))
                arg_size.append(F.external_size(~s))
    arg_gsize = [b for nf, (lo, hi) in zip(F.nodes, zip(arg_ptr[:-1], arg_ptr[1:]))
                 for b in (nf.grad_sizes or arg_size[lo:hi])]
    arg_grad = np.array([bool(x) for nf in F.nodes for x in nf.grad_args], dtype=bool)
    ran = np.zeros(n, dtype=bool)
    ran[list(F.backward_order)] = True
    grad_out = np.zeros(n_out, dtype=bool)
    arg_out_a = _i64(arg_out)
    for v in range(n):
        for a in range(arg_ptr[v], arg_ptr[v + 1]):
            if ran[v] and arg_grad[a] and arg_out_a[a] >= 0:
                grad_out[arg_out_a[a]] = True
    seed = np.zeros(n_out, dtype=bool)
    for v, k in F.seeds:
        seed[out_ptr[v] + k] = True
    grad_out |= seed
    returned = np.zeros(n_out, dtype=bool)
    for v, k in F.returned:
        returned[out_ptr[v] + k] = True
    rarg = [[int(arg_ptr[v]) + p for p in nf.reads_args] for v, nf in enumerate(F.nodes)]
    rout = [[int(out_ptr[v]) + k for k in nf.reads_outputs] for v, nf in enumerate(F.nodes)]
    fwd = _i64(F.forward_order)
    fpos = np.empty(n, dtype=np.int64)
    fpos[fwd] = np.arange(n)
    made_at: list[list[int]] = [[] for _ in range(n)]
    freed_at: list[list[int]] = [[] for _ in range(n)]
    for e, (m, q) in enumerate(zip(F.external_made, F.external_free_after)):
        if m >= 0:   # made in the step: allocated at the forward event at position m
            made_at[int(fwd[m])].append(e)
        if q >= 0:
            freed_at[int(fwd[q])].append(e)
    return Flat(
        n=n, n_out=n_out, n_targets=n_out + n_ext, resident=int(F.resident), fwd=fwd, fpos=fpos,
        bwd=_i64(F.backward_order), out_ptr=out_ptr, out_node=out_node, out_bytes=out_bytes,
        out_view=_i64(out_view), returned=returned, seed=seed, grad_out=grad_out,
        plain_free=_i64([q for nf in F.nodes for q in nf.plain_free_after]),
        state=_i64([nf.state for nf in F.nodes]),
        stoch=np.array([nf.stochastic for nf in F.nodes], dtype=bool), arg_ptr=arg_ptr,
        arg_node=_i64(arg_node), arg_out=arg_out_a, arg_target=_i64(arg_target),
        arg_size=_i64(arg_size), arg_gsize=_i64(arg_gsize), arg_grad=arg_grad,
        arg_gview=_i64([x for nf in F.nodes for x in nf.grad_views]),
        rarg_ptr=_i64([0] + list(np.cumsum([len(r) for r in rarg]))),
        rarg_idx=_i64([a for r in rarg for a in r]),
        rout_ptr=_i64([0] + list(np.cumsum([len(r) for r in rout]))),
        rout_idx=_i64([o for r in rout for o in r]),
        fpeak=_i64([nf.forward_peak for nf in F.nodes]),
        bpeak=_i64([nf.backward_peak for nf in F.nodes]),
        plain_free_bwd=_i64([q for nf in F.nodes
                             for q in (nf.plain_free_in_backward or (-1,) * len(nf.outputs))]),
        sum_inplace=F.grad_sum == "inplace",
        held=_i64([q for nf in F.nodes for q in (nf.held_until or (-1,) * len(nf.outputs))]),
        ext_bytes=_i64([b for _, b in F.externals]),
        made_ptr=_i64([0] + list(np.cumsum([len(x) for x in made_at]))),
        made_idx=_i64([e for x in made_at for e in x]),
        efree_ptr=_i64([0] + list(np.cumsum([len(x) for x in freed_at]))),
        efree_idx=_i64([e for x in freed_at for e in x]),
        out_at=_outside(F, n),
        **_grads_at_start(F, n_out, ran, arg_ptr, arg_grad, _i64(arg_target)))


def _outside(F, n):
    """Bytes outside the graph per event (:func:`_k.fold_run`'s ``out_at``, int64, shape
    (2n,)): ``ExecutionFacts.outside_forward`` at the forward node's id, ``outside_backward``
    at n + the backward node's id; zeros where the facts have none."""
    out = np.zeros(2 * n, dtype=np.int64)
    if F.outside_forward:
        out[np.asarray(F.forward_order, dtype=np.int64)] = F.outside_forward
    if F.outside_backward:
        out[n + np.asarray(F.backward_order, dtype=np.int64)] = F.outside_backward
    return out


def _grads_at_start(F, n_out, ran, arg_ptr, arg_grad, arg_target):
    """The Flat arrays of ``F.grads_at_start``: per gradient that exists when the step starts,
    its target id (``n_out + e``), its bytes and the number of gradients the backward pass sums
    into that target (the arguments with a gradient of the nodes whose backward runs)."""
    targets = _i64([n_out + e for e in F.grads_at_start])
    runs = np.repeat(ran, np.diff(arg_ptr))
    arrivals = np.bincount(arg_target[runs & arg_grad], minlength=n_out + len(F.externals))
    return {"gs_target": targets,
            "gs_bytes": _i64([F.external_size(e) for e in F.grads_at_start]),
            "gs_arrivals": _i64(arrivals[targets])}


# -- the three passes -----------------------------------------------------------------------------


def _hooked_arrays(g, dropped):
    f = flat_facts(g)
    ws = _no_arena()   # the arrays returned are kept: none from a shared arena
    ckind, cnode, _ = _k.compute_events(dropped, f.fwd, f.fpos, f.bwd, f.state, f.stoch,
                                        f.arg_ptr, f.arg_node, f.rarg_ptr, f.rarg_idx,
                                        f.rout_ptr, ws, 0)
    slot, start, last, _ = _k.liveness(ckind, cnode, f.n_out, f.state, f.stoch, f.out_ptr,
                                       f.arg_ptr, f.arg_out, f.rarg_ptr, f.rarg_idx, f.rout_ptr,
                                       f.rout_idx, f.returned, f.held, ws, 0)
    return _k.emit_events(ckind, cnode, slot, start, last, dropped, f.n_out, f.fpos, f.out_ptr,
                          f.out_node, f.out_bytes, f.state, f.stoch, f.seed, f.grad_out, ws,
                          0)[:5]


def _no_arena():
    """An empty arena: the schedule kernels allocate every array they return."""
    return np.empty(0, dtype=np.int64)


_ARENAS = threading.local()


def _arena(top):
    """The calling thread's arena for :func:`_peak_and_cost`, at least `top` entries long (the
    kernels' arrays live in it between calls; see :mod:`lowerset._schedule_kernels`). It
    holds about 150 int64 per node of the largest graph the thread has scheduled (3 MB at
    2,500 nodes, default facts) and lives as long as the thread."""
    ws = getattr(_ARENAS, "ws", None)
    if ws is None or ws.shape[0] < top:
        ws = _ARENAS.ws = np.empty(top + top // 4, dtype=np.int64)
    return ws


def _peak_and_cost(g, dropped, cost_cap=None, peak_cap=None):
    """``(peak, recompute_cost)`` of the schedule that drops `dropped` (bool per node): those
    of ``_fold(g, _hooked_arrays(g, dropped))`` and :func:`_recompute_cost`, in one kernel
    call that releases the GIL. Where the cost passes `cost_cap` (cost units) or the peak
    passes `peak_cap` (bytes), the kernel stops there and the peak is None (the cost is
    exact either way)."""
    f = flat_facts(g)
    ws = _arena(0)
    peak, cost, top = _k.peak_and_cost(
        dropped, f.fwd, f.fpos, f.bwd, f.state, f.stoch, f.arg_ptr, f.arg_node, f.rarg_ptr,
        f.rarg_idx, f.rout_ptr, f.rout_idx, f.n_out, f.n_targets, f.resident, f.out_ptr,
        f.out_node, f.out_bytes, f.out_view, f.arg_out, f.arg_target, f.arg_size, f.arg_gsize,
        f.arg_grad, f.arg_gview, f.returned, f.held, f.seed, f.grad_out, f.fpeak, f.bpeak,
        f.sum_inplace, f.ext_bytes, f.made_ptr, f.made_idx, f.efree_ptr, f.efree_idx,
        f.out_at, f.gs_target, f.gs_bytes, f.gs_arrivals, _cost_array(g), ws, _cap(cost_cap),
        _cap(peak_cap))
    if top > ws.shape[0]:
        _arena(top)   # the next call on this thread takes all it needs from the arena
    return (None if peak < 0 else int(peak)), int(cost)


def _cap(x):
    """A kernel's cap argument: `x` as int64 (capped below :data:`_k.NO_STOP`), none for None."""
    return _k.NO_STOP if x is None else int(min(x, _k.NO_STOP))


#: Bytes of dropped-set keys a graph keeps in :func:`known_schedules` before it forgets them.
KNOWN_SCHEDULE_BYTES = 64 * 2**20


def dropped_key(dropped: BoolArray) -> bytes:
    """The packed bytes of `dropped`: the key of :func:`known_schedules`.

    Parameters
    ----------
    dropped : ndarray of bool, shape (n,)
        The dropped nodes.
    """
    return np.packbits(dropped).tobytes()


def known_schedules(g: Graph) -> dict[bytes, tuple[Any, ...]]:
    """The ``(peak, recompute_cost)`` of the dropped sets scheduled on `g` so far, by
    :func:`dropped_key`, kept on the graph (a Graph is immutable, and so are its schedules):
    the planner's calls on one graph (the pool's candidates, the local searches of `pareto`
    and `solve`) ask for many of the same ones. :func:`remember_schedule` adds to it. A
    schedule that a local search stopped at its caps is kept as ``(None, recompute_cost,
    floor)``: its peak is above `floor` bytes (-1: not known).

    Parameters
    ----------
    g : Graph
        The graph.
    """
    return g.__dict__.setdefault("_known_schedules", {})


def remember_schedule(g: Graph, key: bytes, point: tuple[Any, ...]) -> None:
    """Keep the figures of a dropped set on `g` unless `g` knows more of it (the whole
    schedule, or a floor at least as high); the keys kept stay within
    :data:`KNOWN_SCHEDULE_BYTES` (all are forgotten at once when they would pass it).

    Parameters
    ----------
    g : Graph
        The graph.
    key : bytes
        The dropped set (:func:`dropped_key`).
    point : tuple
        ``(peak, recompute_cost)``, or a stopped schedule's ``(None, recompute_cost, floor)``.
    """
    known = known_schedules(g)
    old = known.get(key)
    if point[0] is None and old is not None and (old[0] is not None or old[2] >= point[2]):
        return
    if (len(known) + 1) * (len(key) + 100) > KNOWN_SCHEDULE_BYTES:
        known.clear()
    known[key] = point


def _known_peak_and_cost(g, dropped):
    """:func:`_peak_and_cost`, from :func:`known_schedules` where `g` knows it (and kept
    there where it does not)."""
    key = dropped_key(dropped)
    out = known_schedules(g).get(key)
    if out is None or out[0] is None:
        out = _peak_and_cost(g, dropped)
        remember_schedule(g, key, out)
    return out


def _cost_array(g):
    """T per node as contiguous int64 (cost units), kept on the graph."""
    cached = g.__dict__.get("_cost_i64")
    if cached is None:
        cached = g.__dict__["_cost_i64"] = _i64(g.cost)
    return cached


def _plain_arrays(g):
    """The plain step: every forward in order, a value freed after the forward where the
    recorded run freed it, the backward pass with gradients freed after each backward."""
    f = flat_facts(g)
    kind, node, nbytes, outs = [], [], [], []
    frees: list[list[int]] = [[] for _ in range(f.n)]
    for o in np.flatnonzero(f.plain_free >= 0).tolist():
        frees[int(f.plain_free[o])].append(o)
    for q, v in enumerate(f.fwd.tolist()):
        lo, hi = int(f.out_ptr[v]), int(f.out_ptr[v + 1])
        kind.append(_k.FORWARD)
        node.append(v)
        outs.append(list(range(hi - lo)))
        nbytes.append(int(f.out_bytes[lo:hi].sum() + f.state[v]))
        if q == f.n - 1:
            for o in np.flatnonzero(f.seed).tolist():
                u = int(f.out_node[o])
                kind.append(_k.SEED_GRAD)
                node.append(u)
                nbytes.append(int(f.out_bytes[o]))
                outs.append([o - int(f.out_ptr[u])])
        _plain_frees(f, frees[q], kind, node, nbytes, outs)
    bfrees: list[list[int]] = [[] for _ in range(f.bwd.shape[0])]
    for o in np.flatnonzero(f.plain_free_bwd >= 0).tolist():
        bfrees[int(f.plain_free_bwd[o])].append(o)
    for q, j in enumerate(f.bwd.tolist()):
        lo, hi = int(f.out_ptr[j]), int(f.out_ptr[j + 1])
        b = int(f.out_bytes[lo:hi][f.grad_out[lo:hi]].sum())
        kind.append(_k.BACKWARD)
        node.append(j)
        nbytes.append(b)
        outs.append([])
        if f.grad_out[lo:hi].any():
            kind.append(_k.FREE_GRAD)
            node.append(j)
            nbytes.append(b)
            outs.append([])
        _plain_frees(f, bfrees[q], kind, node, nbytes, outs)
    optr = _i64([0] + list(np.cumsum([len(o) for o in outs])))
    return _i64(kind), _i64(node), _i64(nbytes), optr, _i64([k for o in outs for k in o])


def _plain_frees(f, freed, kind, node, nbytes, outs):
    """Append the FREE_VALUE events of the outputs `freed` (ids), one per node in forward
    order."""
    for u in sorted({int(f.out_node[o]) for o in freed}, key=f.fpos.__getitem__):
        ks = sorted(o - int(f.out_ptr[u]) for o in freed if f.out_node[o] == u)
        kind.append(_k.FREE_VALUE)
        node.append(u)
        outs.append(ks)
        nbytes.append(int(sum(f.out_bytes[int(f.out_ptr[u]) + k] for k in ks)))


def _recompute_cost(g, arrays):
    """Total cost T (cost units) of the nodes the event arrays recompute or rematerialize."""
    kind, node = arrays[0], arrays[1]
    return int(g.cost[node[_replays(kind)]].sum())


def _replays(kind):
    """Bool per event: a RECOMPUTE or a REMATERIALIZE (a replay of a forward)."""
    return (kind == _k.RECOMPUTE) | (kind == _k.REMATERIALIZE)


class EventFold:
    """The memory fold of :func:`simulate` over events given a few at a time, for a runtime
    that picks its next event by the bytes in use (``lowerset.baselines.dtr``). All figures are
    bytes, resident (parameters, inputs) included.

    Parameters
    ----------
    g : Graph

    Attributes
    ----------
    high : int
        The highest point of the events folded in so far (the resident bytes before any).
    """

    def __init__(self, g: Graph) -> None:
        f = flat_facts(g)
        self.resident = f.resident
        self.high = f.resident
        self._facts = (f.out_ptr, f.out_bytes, f.out_view, f.state, f.stoch, f.arg_ptr,
                       f.arg_target, f.arg_size, f.arg_gsize, f.arg_grad, f.arg_gview,
                       f.grad_out, f.fpeak, f.bpeak, f.sum_inplace, f.ext_bytes, f.made_ptr,
                       f.made_idx, f.efree_ptr, f.efree_idx, f.out_at, f.bwd)
        self._st, _ = _k.fold_start(f.n_out, f.n_targets, f.n, int(f.arg_ptr[-1]),
                                    f.gs_target, f.gs_bytes, f.gs_arrivals, f.sum_inplace,
                                    _no_arena(), 0)
        self._cap = self._st[0].shape[0]
        self._compact_at = self._cap // 2

    @property
    def used(self) -> int:
        """Bytes in use now (those outside the graph included)."""
        return int(self._st[7][0] + self._st[7][2]) + self.resident

    def need(self, kind: IntArray, node: IntArray, nbytes: IntArray, optr: IntArray,
             oidx: IntArray) -> int:
        """Fold in the events but the last; return the bytes above :attr:`used` at the
        highest point of the last, were it next.

        Parameters
        ----------
        kind, node, nbytes, optr, oidx : ndarray of int64
            The events, as in :attr:`Schedule.arrays` (``optr`` of length #events + 1
            indexing ``oidx``).
        """
        if self._st[7][1] > self._compact_at:  # renumber the buffers: the copy stays small
            self._st = _k.fold_compact(self._st, self._cap)
            self._compact_at = max(self._cap // 2, 2 * int(self._st[7][1]))
        self._st, need, high = _k.fold_need(self._st, kind, node, nbytes, optr, oidx,
                                            *self._facts)
        self.high = max(self.high, int(high) + self.resident)
        return int(need)

    def apply(self, kind: IntArray, node: IntArray, nbytes: IntArray, optr: IntArray,
              oidx: IntArray) -> tuple[IntArray, IntArray]:
        """Fold in the events; return the bytes in use after each and at its highest point
        (ndarrays of int64, shape (#events,)).

        Parameters
        ----------
        kind, node, nbytes, optr, oidx : ndarray of int64
            The events, as in :attr:`Schedule.arrays`.
        """
        self._st, timeline, highs, _ = _k.fold_run(self._st, kind, node, nbytes, optr, oidx,
                                                   *self._facts, _no_arena(), 0)
        if highs.size:
            self.high = max(self.high, int(highs.max()) + self.resident)
        return timeline + self.resident, highs + self.resident


def _fold(g, arrays):
    f = flat_facts(g)
    kind, node, nbytes, optr, oidx = arrays
    timeline, highs = _k.fold(kind, node, nbytes, optr, oidx, f.resident, f.n_out, f.n_targets,
                              f.out_ptr, f.out_bytes, f.out_view, f.state, f.stoch, f.arg_ptr,
                              f.arg_target, f.arg_size, f.arg_gsize, f.arg_grad, f.arg_gview,
                              f.grad_out, f.fpeak, f.bpeak, f.sum_inplace, f.ext_bytes,
                              f.made_ptr, f.made_idx, f.efree_ptr, f.efree_idx, f.out_at, f.bwd,
                              f.gs_target, f.gs_bytes, f.gs_arrivals)
    top = int(highs.max()) if highs.size else f.resident
    idx = int(np.argmax(highs)) if highs.size and top > f.resident else -1
    return MemoryFold(timeline=timeline, highs=highs, resident=f.resident,
                      peak=max(f.resident, top), peak_index=idx)
