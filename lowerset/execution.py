"""Execution facts: what running a training step needs to know beyond G = (V, E).

G gives each node's cost T_v and memory M_v (paper, Sec. 2). A schedule of the real step
(:mod:`lowerset.schedule`) also needs to know how the framework runs it: the order of the forward
and backward passes, which arrays each function's backward reads, how big its gradients are,
which arrays are views of others, the transient workspace each function needs, and the bytes
resident before the step (parameters, inputs). :class:`ExecutionFacts` holds all of it, one
:class:`NodeFacts` per node. ``chainer_ext.trace`` fills it from a recorded run; any other graph
(the authors' ``cg_*.txt`` files) gets :func:`default_facts`: the paper's conservative
assumptions, under which every backward reads all its inputs and its output.

Node ids in the facts are the graph's ids (``graph.index[label]``), so facts belong to one graph.
A function's arguments are ``(src, k)`` pairs: ``src >= 0`` is the node whose output ``k`` the
argument is; ``src < 0`` is the external array ``~src`` (``-1`` is external 0) and ``k`` is 0.
All sizes are bytes.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any

from .exceptions import GraphError

if TYPE_CHECKING:
    from .graph import Graph

__all__ = ["NodeFacts", "ExecutionFacts", "default_facts", "activation_facts", "EXTERNAL_KINDS",
           "GRAD_SUMS"]

#: Kinds of external arrays: "param" (gets a gradient that persists) and "input".
EXTERNAL_KINDS = ("param", "input")

#: How a second gradient for one array is summed (:attr:`ExecutionFacts.grad_sum`).
GRAD_SUMS = ("new", "inplace")

#: NodeFacts fields that a trace measures rather than reads off the graph: two traces of the
#: same step can differ in them by a few bytes of interpreter allocations.
MEASURED_FIELDS = ("forward_peak", "backward_peak")


@dataclass(frozen=True)
class NodeFacts:
    """How one function application (a node of G) runs.

    Attributes
    ----------
    outputs : tuple of int
        Bytes of each output array (a node holds all outputs of one function application).
    args : tuple of (int, int)
        Per argument, ``(src, k)``: output ``k`` of node ``src``, or external ``~src`` when
        ``src < 0``.
    state : int
        Bytes of the arrays the function makes in forward and keeps for its backward besides its
        inputs and outputs (max-pooling indexes, BatchNormalization statistics, dropout masks).
    reads_args : tuple of int
        Argument positions whose arrays the backward reads.
    reads_outputs : tuple of int
        Output positions whose arrays the backward reads.
    grad_args : tuple of bool
        Per argument: whether the backward returns a gradient for it (of the argument's size).
    output_views : tuple of int
        Per output: the argument position whose array it is a view of (shares memory with), or
        -1 when it owns its memory.
    grad_views : tuple of int
        Per argument: the output index whose gradient the argument's gradient is a view of, or -1.
    forward_peak, backward_peak : int
        Measured bytes above the level at the start of the forward (backward) call at its
        highest point, workspace included (im2col buffers, temporaries); 0 when not measured.
        The schedule takes the larger of this and what it allocates itself.
    stochastic : bool
        The function's state holds random draws (a dropout mask) that a recomputation must
        reuse: the state is never dropped before its backward.
    pinned : bool
        The function must not run twice (a side effect a recomputation would repeat): its
        outputs are never dropped, so it is never recomputed.
    plain_free_after : tuple of int
        Per output: the forward position after whose function the plain framework (no hook)
        frees the array, or -1 when it lives to the end of the step.
    inplace : bool
        The function writes each output that is a view (``output_views``) into that argument's
        array in place (PyTorch's ``relu_``, ``add_``): the argument's value is overwritten, so
        a plan drops the two together or keeps both (see :func:`lowerset.dropped_nodes`).
    plain_free_in_backward : tuple of int
        Per output: the position in ``backward_order`` after whose backward call the plain
        framework frees the array (PyTorch's autograd releases what a backward node saved once
        it has run), or -1; empty when no output is freed in the backward pass (Chainer).
    held_until : tuple of int
        Per output: the forward position up to whose function (inclusive) the step's own code
        holds a reference to the array, so that no executor can free it earlier (PyTorch: a
        Python variable of the model's ``forward`` still names the tensor after its last use),
        or -1 when it holds none beyond the array's uses; empty when an executor frees arrays
        whatever the code holds (Chainer's hook empties the Variable). Liveness analysis keeps
        the forward copy of the array at least that long.
    after : tuple of int
        Node ids that run before this node without passing it an array: edges of G that carry
        nothing (PyTorch's trace orders an operation with no argument from the graph after the
        one dispatched before it, so that it does not float free among the lower sets). They
        restrict the lower sets and make boundaries as any edge of G does (a plan keeps a node
        whose successor lies in a later segment, as eq. (1) counts it); liveness analysis and
        recomputation follow the arguments only.
    grad_sizes : tuple of int
        Per argument: the bytes the backward allocates for the argument's gradient where it
        is not a view of an output gradient (``grad_views``), when that differs from the
        argument's size: Chainer's ``F.average`` returns a broadcast view of one value per
        sample and channel. Empty when every such gradient has its argument's size. A sum of
        two gradients of one array always has the array's size.
    """

    outputs: tuple[int, ...]
    args: tuple[tuple[int, int], ...]
    state: int = 0
    reads_args: tuple[int, ...] = ()
    reads_outputs: tuple[int, ...] = ()
    grad_args: tuple[bool, ...] = ()
    output_views: tuple[int, ...] = ()
    grad_views: tuple[int, ...] = ()
    forward_peak: int = 0
    backward_peak: int = 0
    stochastic: bool = False
    pinned: bool = False
    plain_free_after: tuple[int, ...] = ()
    inplace: bool = False
    plain_free_in_backward: tuple[int, ...] = ()
    held_until: tuple[int, ...] = ()
    after: tuple[int, ...] = ()
    grad_sizes: tuple[int, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (tuples become lists)."""
        return {f.name: _listify(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> NodeFacts:
        """Inverse of :meth:`to_dict`; raises KeyError or TypeError on a malformed dict.

        Parameters
        ----------
        d : mapping
            What :meth:`to_dict` returned (or its JSON read back).
        """
        kw = {f.name: _tuplify(d[f.name]) for f in fields(cls) if f.name in d}
        kw["args"] = tuple(tuple(a) for a in kw["args"])
        return cls(**kw)


# a dataclass: numpydoc's lint reads no __init__ in the source, the fields are the parameters
@dataclass(frozen=True)
class ExecutionFacts:  # numpydoc ignore=PR02
    """How a training step over G runs: one :class:`NodeFacts` per node and the step's order.

    Parameters
    ----------
    nodes : tuple of NodeFacts
        Indexed by node id.
    forward_order : tuple of int
        Node ids in forward execution order (a topological order of G).
    backward_order : tuple of int
        Ids of the nodes whose backward runs, in the order it runs (consumers before producers).
    externals : tuple of (str, int)
        ``(kind, bytes)`` of each array a node reads that no node makes (parameters, inputs);
        kind is one of :data:`EXTERNAL_KINDS`. Those made before the step are resident during
        it; those made in it live as `external_made` and `external_free_after` say.
    returned : tuple of (int, int)
        Outputs ``(node, k)`` the step hands outside its graph, never freed during the step:
        returned to the caller, and (without a seed) kept by the caller or a link after the
        forward pass, read by a function outside the graph, or sharing memory with an external
        argument.
    seeds : tuple of (int, int)
        Returned outputs the backward pass starts from; each gets an initial gradient.
    external_sizes : tuple of int
        Per external array, its size in bytes (the size of its gradient), where it differs from
        its resident bytes in `externals`: an external that is a view of another (a transposed
        weight) shares that one's memory, so it is resident with 0 bytes. Empty when every
        external owns its memory.
    external_bases : tuple of int
        Per external array, the external it is a view of, whose gradient its own gradient is
        summed into (PyTorch's ``aten.t`` of a weight used in three places: three gradients,
        one ``weight.grad``), or -1; empty when none is a view.
    external_made : tuple of int
        Per external array, the forward position before whose function the step makes it, or
        -1 when it exists before the step; empty when every one does. An array made during the
        step outside the graph (the output of a function applied under
        ``chainer.no_backprop_mode()``, NumPy arithmetic on ``.array``) is not resident: it
        is allocated at the start of that forward event.
    external_free_after : tuple of int
        Per external array, the forward position after whose function the step frees it (at
        the end of that forward event), or -1 when it lives to the end of the step (always for
        an external made before the step); empty with `external_made`. The lifetime does not
        depend on the plan: an executor keeps no such array for a recomputation
        (``chainer_ext.trace`` pins the functions that read one freed in the forward pass).
    grad_sum : str
        How a second gradient for one array is summed (one of :data:`GRAD_SUMS`): ``"new"``
        into a new array (Chainer, ``lazy_grad_sum=False``); ``"inplace"`` into the pending
        gradient when no other array shares its buffer, else into the arriving one when none
        shares that, else into a new array (PyTorch's autograd input buffers).
    grads_at_start : tuple of int
        External arrays whose gradient exists when the step starts (gradient accumulation:
        several micro-batches before ``optimizer.step()``, or PyTorch's
        ``zero_grad(set_to_none=False)``); empty when every gradient is made in the step.
        Each is a parameter (kind "param", made before the step) that is its own gradient
        target (:meth:`external_target`). Its gradient (:meth:`external_size` bytes) is
        resident. A gradient arriving for it is summed into it as `grad_sum` says: with
        "new" it is the target's pending gradient from the start, so the first arrival and it
        make a new array and it is released (Chainer's backward loads the existing gradient
        and sums); with "inplace" the arrivals gather in the target's pending gradient as
        usual, and after the last one of the step (the backward call that brings it) that
        one is added into the existing gradient in place and released (PyTorch's
        AccumulateGrad runs once every gradient for the parameter has reached its input
        buffer, then adds the buffer into ``.grad``).
    outside_forward : tuple of int
        Per forward position, the bytes the step holds outside the graph while that function
        runs, beyond what the other facts count (signed: negative where they count more):
        memory a framework allocates and frees around the traced functions whatever the plan,
        such as FSDP2's gathered parameters and gradient buffers, measured by the front end
        (``torch_ext.trace``). Empty: none.
    outside_backward : tuple of int
        The same per backward position (`backward_order`), held through the recomputations
        before that backward, the backward and the frees after it. Empty: none.

    Raises
    ------
    GraphError
        From :meth:`check` (called by :class:`lowerset.Graph`) when the facts do not fit G.

    References
    ----------
    .. [1] Kusumoto et al., NeurIPS 2019, Sec. 3 (canonical strategy; liveness analysis).
    """

    nodes: tuple[NodeFacts, ...]
    forward_order: tuple[int, ...]
    backward_order: tuple[int, ...]
    externals: tuple[tuple[str, int], ...] = ()
    returned: tuple[tuple[int, int], ...] = ()
    seeds: tuple[tuple[int, int], ...] = ()
    grad_sum: str = "new"
    external_sizes: tuple[int, ...] = ()
    external_bases: tuple[int, ...] = ()
    external_made: tuple[int, ...] = ()
    external_free_after: tuple[int, ...] = ()
    grads_at_start: tuple[int, ...] = ()
    outside_forward: tuple[int, ...] = ()
    outside_backward: tuple[int, ...] = ()

    @property
    def resident(self) -> int:
        """Bytes allocated before the step, resident during it: the external arrays made
        before it (parameters and inputs) and the gradients in `grads_at_start`."""
        made = self.external_made or (-1,) * len(self.externals)
        return (sum(b for (_, b), m in zip(self.externals, made) if m < 0)
                + sum(self.external_size(e) for e in self.grads_at_start))

    def check(self, graph: Graph) -> None:
        """Raise GraphError naming the first fact that does not fit `graph`.

        Parameters
        ----------
        graph : Graph
            The graph whose node ids these facts index.
        """
        n = graph.n
        if len(self.nodes) != n:
            raise GraphError(f"execution facts describe {len(self.nodes)} nodes, "
                             f"the graph has {n}")
        if sorted(self.forward_order) != list(range(n)):
            raise GraphError("forward_order must list every node id once")
        pos = {v: i for i, v in enumerate(self.forward_order)}
        for e in self.externals:
            if len(e) != 2 or e[0] not in EXTERNAL_KINDS or not _nonneg(e[1]):
                raise GraphError(f"external {e!r} must be (kind in {EXTERNAL_KINDS}, bytes >= 0)")
        for v, nf in enumerate(self.nodes):
            _check_node(graph, v, nf, self)
            for s in graph.preds(v):
                if pos[int(s)] > pos[v]:
                    raise GraphError(f"forward_order runs node {graph.labels[v]!r} before its "
                                     f"input {graph.labels[int(s)]!r}")
        bpos = {}
        for i, v in enumerate(self.backward_order):
            if not 0 <= v < n or v in bpos:
                raise GraphError(f"backward_order entry {v!r} is not a node id or repeats")
            bpos[v] = i
        consumers: list[set[int]] = [set() for _ in range(n)]
        for w, nf in enumerate(self.nodes):
            for s, _ in nf.args:
                if s >= 0:
                    consumers[s].add(w)
        for v in self.backward_order:
            for w in sorted(consumers[v]):
                if w in bpos and bpos[w] > bpos[v]:
                    raise GraphError(f"backward_order runs node {graph.labels[v]!r} before its "
                                     f"consumer {graph.labels[int(w)]!r}")
        for what, outs in (("returned", self.returned), ("seeds", self.seeds)):
            for o in outs:
                if (len(o) != 2 or not 0 <= o[0] < n
                        or not 0 <= o[1] < len(self.nodes[o[0]].outputs)):
                    raise GraphError(f"{what} entry {o!r} is not an output (node id, index)")
        if not set(self.seeds) <= set(self.returned):
            raise GraphError("every seed must be a returned output")
        if self.grad_sum not in GRAD_SUMS:
            raise GraphError(f"grad_sum must be one of {GRAD_SUMS}, got {self.grad_sum!r}")
        sizes = self.external_sizes
        if sizes and (len(sizes) != len(self.externals) or not all(_nonneg(b) for b in sizes)):
            raise GraphError(f"external_sizes must be empty or have {len(self.externals)} "
                             f"entries of bytes >= 0, got {sizes!r}")
        bases = self.external_bases
        if bases and (len(bases) != len(self.externals)
                      or any(not -1 <= int(b) < e for e, b in enumerate(bases))):
            raise GraphError(f"external_bases must be empty or have {len(self.externals)} "
                             f"entries, each -1 or the index of an earlier external, got "
                             f"{bases!r}")
        self._check_made(graph, pos)
        self._check_grads_at_start()
        for name, order in (("outside_forward", self.forward_order),
                            ("outside_backward", self.backward_order)):
            got = getattr(self, name)
            if got and (len(got) != len(order) or not all(_is_int(b) for b in got)):
                raise GraphError(f"{name} must be empty or have {len(order)} entries of bytes "
                                 f"(int), one per entry of its order; got {len(got)}")

    def _check_made(self, graph, pos):
        """Raise GraphError unless `external_made` and `external_free_after` fit: -1 or forward
        positions, freed no earlier than made, every reader between the two."""
        made, freed, n_ext = self.external_made, self.external_free_after, len(self.externals)
        if not made and not freed:
            return
        if len(made) != n_ext or len(freed) != n_ext:
            raise GraphError(f"external_made and external_free_after must both be empty or "
                             f"have {n_ext} entries, got {made!r} and {freed!r}")
        for e, (m, f) in enumerate(zip(made, freed)):
            if not (-1 <= m < graph.n and -1 <= f < graph.n and (f < 0 or 0 <= m <= f)):
                raise GraphError(f"external {e} is made at forward position {m!r} and freed "
                                 f"after {f!r}: each must be -1 or a forward position, and an "
                                 f"array freed in the step is made in it, first")
        for v, nf in enumerate(self.nodes):
            for s, _ in nf.args:
                if s < 0 and made[~s] >= 0 and not (
                        made[~s] <= pos[v] and (freed[~s] < 0 or pos[v] <= freed[~s])):
                    raise GraphError(f"node {graph.labels[v]!r} reads external {~s} at forward "
                                     f"position {pos[v]}, outside its lifetime "
                                     f"({made[~s]}..{freed[~s]})")

    def _check_grads_at_start(self):
        """Raise GraphError unless every entry of `grads_at_start` names, once, a parameter
        made before the step that is its own gradient target."""
        seen = set()
        for e in self.grads_at_start:
            if not _nonneg(e) or e >= len(self.externals):
                raise GraphError(f"grads_at_start entry {e!r} is not the index of an external "
                                 f"array (0..{len(self.externals) - 1})")
            why = "it repeats" if e in seen else self._no_grad_at_start(e)
            if why:
                raise GraphError(f"grads_at_start entry {e}: {why}; a gradient that exists "
                                 "when the step starts belongs to a parameter made before it "
                                 "that is its own gradient target")
            seen.add(e)

    def _no_grad_at_start(self, e):
        """Why external `e` cannot have a gradient when the step starts, or None."""
        if self.externals[e][0] != "param":
            return f"it is an external of kind {self.externals[e][0]!r}, not a parameter"
        if self.external_made and self.external_made[e] >= 0:
            return f"it is made during the step (external_made {self.external_made[e]})"
        if self.external_target(e) != e:
            return (f"its gradient is summed into external {self.external_target(e)}'s "
                    "(external_bases): name that one")
        return None

    def external_target(self, e: int) -> int:
        """The external array whose gradient external `e`'s gradient is summed into (itself,
        or the root of its `external_bases` chain).

        Parameters
        ----------
        e : int
            Index of an external array (into `externals`).
        """
        while self.external_bases and self.external_bases[e] >= 0:
            e = self.external_bases[e]   # an earlier external: the chain ends
        return e

    def external_size(self, e: int) -> int:
        """Bytes of external array `e` (its gradient's size; see `external_sizes`).

        Parameters
        ----------
        e : int
            Index of an external array (into `externals`).
        """
        return self.external_sizes[e] if self.external_sizes else self.externals[e][1]

    def keyed(self, labels: Sequence[Hashable], measured: bool = True) -> tuple[Hashable, ...]:
        """A hashable form with node ids replaced by `labels` (for graph equality).

        Parameters
        ----------
        labels : sequence of hashable
            The label of each node id.
        measured : bool, default True
            False leaves out the measured workspace peaks (``forward_peak``,
            ``backward_peak``), which vary by a few bytes between two traces of the same step.
        """
        def lab(src):
            return labels[src] if src >= 0 else ("external", ~src)
        skip = ("outputs", "args") if measured else ("outputs", "args") + MEASURED_FIELDS
        nodes = frozenset(
            (labels[v], nf.outputs, tuple((lab(s), k) for s, k in nf.args),
             tuple(getattr(nf, f.name) for f in fields(nf) if f.name not in skip))
            for v, nf in enumerate(self.nodes))
        return (nodes, tuple(labels[v] for v in self.forward_order),
                tuple(labels[v] for v in self.backward_order), self.externals,
                tuple((labels[v], k) for v, k in self.returned),
                tuple((labels[v], k) for v, k in self.seeds), self.grad_sum,
                self.external_sizes, self.external_bases, self.external_made,
                self.external_free_after, self.grads_at_start) + (
                    (self.outside_forward, self.outside_backward) if measured else ())

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (node ids as in the graph's node list)."""
        return {"nodes": [nf.to_dict() for nf in self.nodes],
                "forward_order": list(self.forward_order),
                "backward_order": list(self.backward_order),
                "externals": [list(e) for e in self.externals],
                "returned": [list(o) for o in self.returned],
                "seeds": [list(o) for o in self.seeds],
                "grad_sum": self.grad_sum,
                "external_sizes": list(self.external_sizes),
                "external_bases": list(self.external_bases),
                "external_made": list(self.external_made),
                "external_free_after": list(self.external_free_after),
                "grads_at_start": list(self.grads_at_start),
                "outside_forward": list(self.outside_forward),
                "outside_backward": list(self.outside_backward)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ExecutionFacts:
        """Inverse of :meth:`to_dict`; raises KeyError or TypeError on a malformed dict.

        Parameters
        ----------
        d : mapping
            What :meth:`to_dict` returned (or its JSON read back).
        """
        return cls(nodes=tuple(NodeFacts.from_dict(x) for x in d["nodes"]),
                   forward_order=tuple(d["forward_order"]),
                   backward_order=tuple(d["backward_order"]),
                   externals=tuple(tuple(e) for e in d["externals"]),
                   returned=tuple(tuple(o) for o in d["returned"]),
                   seeds=tuple(tuple(o) for o in d["seeds"]),
                   grad_sum=d.get("grad_sum", "new"),
                   external_sizes=tuple(d.get("external_sizes", ())),
                   external_bases=tuple(d.get("external_bases", ())),
                   external_made=tuple(d.get("external_made", ())),
                   external_free_after=tuple(d.get("external_free_after", ())),
                   grads_at_start=tuple(d.get("grads_at_start", ())),
                   outside_forward=tuple(d.get("outside_forward", ())),
                   outside_backward=tuple(d.get("outside_backward", ())))


def default_facts(graph: Graph) -> ExecutionFacts:
    """The facts assumed for a graph that carries none (the paper's conservative model).

    Every node has one output of M_v bytes, no state and no workspace; its arguments are its
    predecessors (output 0 of each); its backward runs, reads all its arguments and its output,
    and returns a gradient for every argument; nothing is a view. The forward pass runs in the
    graph's node-id order, the backward pass in the reverse order. The outputs of the nodes
    without successors are returned and seed the backward pass. Nothing is resident.

    Parameters
    ----------
    graph : Graph

    Returns
    -------
    ExecutionFacts

    Examples
    --------
    >>> f = ls.default_facts(ls.Graph.chain(3, memory=8))
    >>> f.nodes[1].outputs, f.nodes[1].args, f.backward_order
    ((8,), ((0, 0),), (2, 1, 0))
    """
    nodes = []
    for v in range(graph.n):
        preds = [int(p) for p in graph.preds(v)]
        m = len(preds)
        nodes.append(NodeFacts(
            outputs=(int(graph.memory[v]),), args=tuple((p, 0) for p in preds),
            reads_args=tuple(range(m)), reads_outputs=(0,), grad_args=(True,) * m,
            output_views=(-1,), grad_views=(-1,) * m, plain_free_after=(-1,)))
    sinks = tuple((v, 0) for v in range(graph.n) if graph.succs(v).size == 0)
    return ExecutionFacts(nodes=tuple(nodes), forward_order=tuple(range(graph.n)),
                          backward_order=tuple(range(graph.n - 1, -1, -1)),
                          returned=sinks, seeds=sinks)


def activation_facts(facts: ExecutionFacts) -> ExecutionFacts:
    """The facts of the same step with only its activations counted: the paper's memory.

    A schedule over these facts counts the values, their gradients and the functions' saved
    state, at function boundaries, and the input batch; it leaves out the parameters, their
    gradients and every function's workspace. That is what the paper's Table 1 compares (its
    GPU runs kept parameters and cuDNN workspace out of the figure) and what
    ``chainer_ext.peak_memory`` reports as the non-parameter boundary peak
    (``boundary_peak_without_grads`` plus the input bytes). Plan on it when activations are
    what must shrink, and run the plan on the graph with the whole facts
    (``lowerset.min_peak(G, measure="activations")`` does both).

    Parameters
    ----------
    facts : ExecutionFacts

    Returns
    -------
    ExecutionFacts
        The same facts with ``forward_peak`` and ``backward_peak`` 0, no gradient returned for
        an external array (``grad_args`` False where the argument is external), parameters
        of 0 bytes and no gradient at the start (``grads_at_start`` empty: parameters'
        gradients are not activations). Facts without externals or workspace
        (:func:`default_facts`) come back equal.

    Examples
    --------
    >>> f = ls.ExecutionFacts(
    ...     nodes=(ls.NodeFacts(outputs=(8,), args=((-1, 0), (-2, 0)), reads_args=(0, 1),
    ...                         grad_args=(True, True), output_views=(-1,), grad_views=(-1, -1),
    ...                         forward_peak=72, plain_free_after=(-1,)),),
    ...     forward_order=(0,), backward_order=(0,),
    ...     externals=(("input", 4), ("param", 16)), returned=((0, 0),), seeds=((0, 0),))
    >>> a = ls.activation_facts(f)
    >>> a.externals, a.nodes[0].grad_args, a.nodes[0].forward_peak
    ((('input', 4), ('param', 0)), (False, False), 0)
    """
    nodes = tuple(
        replace(nf, forward_peak=0, backward_peak=0,
                grad_args=tuple(bool(g) and s >= 0 for g, (s, _) in zip(nf.grad_args, nf.args)))
        for nf in facts.nodes)
    externals = tuple((kind, 0 if kind == "param" else b) for kind, b in facts.externals)
    sizes = tuple(0 if kind == "param" else b
                  for (kind, _), b in zip(facts.externals, facts.external_sizes))
    return replace(facts, nodes=nodes, externals=externals, external_sizes=sizes,
                   grads_at_start=())


def _check_node(graph, v, nf, facts):
    label = graph.labels[v]

    def bad(msg):
        return GraphError(f"execution facts of node {label!r}: {msg}")

    n_out, n_arg = len(nf.outputs), len(nf.args)
    if n_out == 0 or not all(_nonneg(b) for b in nf.outputs):
        raise bad(f"outputs must be a non-empty tuple of bytes >= 0, got {nf.outputs!r}")
    for b, what in ((nf.state, "state"), (nf.forward_peak, "forward_peak"),
                    (nf.backward_peak, "backward_peak")):
        if not _nonneg(b):
            raise bad(f"{what} must be bytes >= 0, got {b!r}")
    srcs = set()
    for a in nf.args:
        if len(a) != 2:
            raise bad(f"argument {a!r} must be a pair (src, k)")
        s, k = a
        if s >= 0:
            if s >= graph.n or not 0 <= k < len(facts.nodes[s].outputs):
                raise bad(f"argument {a!r} names no output of a node")
            srcs.add(s)
        elif ~s >= len(facts.externals) or k != 0:
            raise bad(f"argument {a!r} names no external array")
    if any(not 0 <= u < graph.n for u in nf.after):
        raise bad(f"after {nf.after!r} names no node")
    if srcs | set(nf.after) != {int(p) for p in graph.preds(v)}:
        raise bad(f"arguments come from nodes {sorted(srcs)} and it runs after "
                  f"{sorted(nf.after)}, but the graph's predecessors are "
                  f"{sorted(int(p) for p in graph.preds(v))}")
    for name, vals, lim in (("reads_args", nf.reads_args, n_arg),
                            ("reads_outputs", nf.reads_outputs, n_out)):
        if any(not 0 <= p < lim for p in vals):
            raise bad(f"{name} {vals!r} has a position outside 0..{lim - 1}")
    for name, vals, size, lo, hi in (("grad_args", nf.grad_args, n_arg, 0, 1),
                                     ("output_views", nf.output_views, n_out, -1, n_arg - 1),
                                     ("grad_views", nf.grad_views, n_arg, -1, n_out - 1),
                                     ("plain_free_after", nf.plain_free_after, n_out, -1,
                                      graph.n - 1)):
        if len(vals) != size or any(not lo <= int(x) <= hi for x in vals):
            raise bad(f"{name} must have {size} entries in {lo}..{hi}, got {vals!r}")
    pfb = nf.plain_free_in_backward
    if pfb and (len(pfb) != n_out
                or any(not -1 <= int(x) < len(facts.backward_order) for x in pfb)):
        raise bad(f"plain_free_in_backward must be empty or have {n_out} entries in "
                  f"-1..{len(facts.backward_order) - 1}, got {pfb!r}")
    if pfb and any(q >= 0 and b >= 0 for q, b in zip(nf.plain_free_after, pfb)):
        raise bad("an output is freed in the forward pass (plain_free_after) and again in the "
                  "backward pass (plain_free_in_backward)")
    held = nf.held_until
    if held and (len(held) != n_out or any(not -1 <= int(x) < graph.n for x in held)):
        raise bad(f"held_until must be empty or have {n_out} entries in -1..{graph.n - 1}, "
                  f"got {held!r}")
    gs = nf.grad_sizes
    if gs and (len(gs) != n_arg or not all(_nonneg(b) for b in gs)):
        raise bad(f"grad_sizes must be empty or have {n_arg} entries of bytes >= 0, got {gs!r}")
    if nf.inplace and all(int(p) < 0 for p in nf.output_views):
        raise bad("inplace needs an output that is a view of an argument (output_views)")


def _nonneg(x):
    return _is_int(x) and x >= 0


def _is_int(x):
    return isinstance(x, int) and not isinstance(x, bool)


def _listify(x):
    if isinstance(x, tuple):
        return [_listify(y) for y in x]
    return x


def _tuplify(x):
    if isinstance(x, list):
        return tuple(_tuplify(y) for y in x)
    return x
