"""Plans inside ``torch.compile``: an AOTAutograd partition function that saves what a plan keeps.

AOTAutograd traces a compiled region's forward and backward passes into one joint FX graph, and
a partition function splits it in two: a forward graph, which saves tensors for the backward,
and a backward graph, which recomputes every forward value it needs that was not saved.
:class:`PlannedPartition` is such a function. On each joint graph it

1. builds a :class:`lowerset.Graph` with execution facts from the forward part
   (:func:`joint_to_graph`): a node per operation that owns its memory; the views of a value and
   the items of an operation with several outputs belong to the node whose memory they share;
   T_v = FLOPs by ``torch.utils.flop_counter``'s formulas, M_v = bytes of its outputs; the
   backward of a node reads the arguments and outputs the joint graph's backward part reads;
   parameters and inputs are resident externals;
2. plans it (:func:`lowerset.solve` at a planner budget searched for so that the
   partitioned graphs fit the budget; without one, of the plans of least peak on the
   planner's front and the pruned family's, the one whose partitioned graphs peak lowest);
3. tags every forward operation with ``torch.utils.checkpoint.CheckpointPolicy``:
   ``MUST_RECOMPUTE`` where the plan drops its node's outputs, ``MUST_SAVE`` elsewhere, and hands
   the graph to PyTorch's own default partitioner, which honours those tags as it does selective
   activation checkpointing's and orders the backward graph so that each recomputation runs
   just before its first use.

Random operations (dropout's draw) and operations that write into memory (BatchNorm's running
statistics) are pinned: never recomputed, so a step's gradients are those of the compiled step
without a plan, bit for bit under ``aot_eager``. Before planning, a float32 or float64 dropout's
output is rewritten as a deterministic product of its input and its mask
(:mod:`torch_ext._fx_dropout`), which a plan may drop: the backward graph recomputes it from the
saved mask, so the randomness is replayed, not redrawn. :func:`backend` wraps the partition
function into a ``torch.compile`` backend for ``aot_eager`` or ``inductor``.

The planner's schedule is that of the joint graph's operations run one at a time, the backward
in the reverse order of the forward, each node's backward reading what the joint graph's
backward part reads of its arguments and outputs, each operation with the workspace measured
by running it once (:mod:`torch_ext._workspace`). PyTorch's partitioner orders the backward
graph, and the moments its gradients are made and freed, its own way, so the plan is held to
its budget by the graphs it yields instead: the liveness analysis of the partitioned forward
and backward graphs as ``aot_eager``'s code runs them (:mod:`torch_ext._fx_liveness`), with
the same workspace. :class:`PlannedPartition` searches the planner's budget for the plan whose
graphs fit, and :attr:`CompiledPlan.peak` is the step's predicted peak. Under Inductor (the
partition is told so by Inductor's call) the graph and the liveness analysis also hold what
its layout optimization adds (:mod:`torch_ext._inductor_layout`): the channels-last copies of
convolutions' weights and inputs, made at the forward's start and saved for the backward, and
the workspace of channels-last convolutions. Inductor's fused kernels allocate fewer
intermediate tensors than the graphs name, so there the prediction lies above the measured
step (by 2-3% on the CPU's ResNet-50). :func:`backend` under Inductor therefore holds a budget
by the compiled step itself (:func:`fit_measured`): it runs each compiled graph's step on
copies of its inputs, measures its peak and compiles again at a planner budget moved by the
difference.

References
----------
.. [1] Kusumoto et al., NeurIPS 2019, Sec. 2 (G, T_v, M_v), Sec. 3 (canonical strategies).
"""

from __future__ import annotations

import dataclasses
import math
import operator
from typing import Any, NamedTuple

import torch

import lowerset

from . import _compat, _fx_dropout, _fx_liveness, _inductor_layout, _ops, _step_measure, _workspace
from ._build import flop_costs
from ._graph import TARGET_TOTAL_COST

# torch._functorch and torch._inductor (1-2 s to import; torch.compile imports them anyway)
_APIS = _compat.compile_apis()

__all__ = ["PlannedPartition", "InductorPartition", "CompiledPlan", "backend", "fit_measured",
           "inductor_options", "joint_to_graph", "COMPILERS"]

#: The compilers :func:`backend` wraps: AOTAutograd's ``aot_eager`` (the graphs run op by op)
#: and ``inductor`` (``torch.compile``'s default).
COMPILERS = ("aot_eager", "inductor")

#: How many plans :class:`PlannedPartition` partitions at most to fit one graph to its budget.
FIT_ROUNDS = 6

#: A partition that fits its budget with less than this share of it left over ends the search.
FIT_SLACK = 0.01

#: How many planner budgets :func:`fit_measured` tries at most to fit one graph's measured step
#: (each a compilation, unless its plan was compiled before).
MEASURE_ROUNDS = 5


class CompiledPlan(NamedTuple):
    """What :class:`PlannedPartition` did with one joint graph.

    Attributes
    ----------
    graph : lowerset.Graph
        The forward part as :func:`joint_to_graph` builds it (labels: FX node names).
    plan : lowerset.CanonicalStrategy or lowerset.DropSetStrategy
        The plan on it; ``plan.schedule.peak`` is the predicted peak (bytes).
    recomputed : tuple of str
        Names of the forward FX nodes tagged ``MUST_RECOMPUTE``.
    peak : int
        The predicted peak of the step (bytes): the highest point of the liveness analysis of
        the partitioned forward and backward graphs (:mod:`torch_ext._fx_liveness`), the
        graph's parameters and inputs included, the partition's `outside` bytes not.
    measured : int or None
        The compiled step's measured peak (bytes, on the same terms as `peak`) where
        :func:`fit_measured` compiled it; None elsewhere.
    rounds : tuple of (int, int, int)
        Where :func:`fit_measured` fitted it to a budget: each round's ``(planner budget,
        predicted peak, measured peak)`` in bytes, in order (the planner budget is the
        partition's ``budget - outside``; a round whose plan an earlier round compiled repeats
        that one's peaks).
    """

    graph: lowerset.Graph
    plan: lowerset.Strategy
    recomputed: tuple[str, ...]
    peak: int
    measured: int | None = None
    rounds: tuple[tuple[int, int, int], ...] = ()


class _Group:
    """One node of the lowerset graph: an FX operation that owns its memory, with the FX nodes
    (items, views) that share it."""

    __slots__ = ("owner", "members", "out_bytes", "args", "random", "mutates", "copy")

    def __init__(self, owner, out_bytes):
        self.owner, self.members, self.out_bytes = owner, [owner], out_bytes
        self.args, self.random, self.mutates = [], False, False
        self.copy = False   # a layout copy of placeholder `owner` the compiled code makes


def _copy_group(placeholder, nbytes, external):
    """The node of a layout copy of `placeholder` (external `external`): no FX node of its
    own, never recomputed (the compiled code makes it, not the partition)."""
    grp = _Group(placeholder, [nbytes])
    grp.members, grp.args, grp.copy = [], [external], True
    return grp


def _is_view(node):
    """Whether FX node `node` returns a view of its first argument (an aliasing ATen op)."""
    alias = _ops.return_alias(node.target)
    return alias is not None and not alias.is_write


def _bytes(val):
    """Bytes of a fake tensor (0 for anything else)."""
    if not isinstance(val, torch.Tensor):
        return 0
    numel = val.numel()
    if not isinstance(numel, int):
        raise lowerset.ArgumentError(
            f"a tensor of the compiled graph has a symbolic shape {tuple(val.shape)}: a plan "
            "needs sizes in bytes; compile with dynamic=False (each new shape is then "
            "compiled, and planned, anew)")
    return numel * val.element_size()


def _require_sizes(joint):
    """Raise :func:`_bytes`'s error where a tensor of `joint` has a symbolic shape."""
    for n in joint.graph.nodes:
        val = n.meta.get("val")
        for v in val if isinstance(val, (tuple, list)) else [val]:
            _bytes(v)


def _flops(node):
    """FLOPs of one FX call (:func:`torch_ext._ops.call_flops` on the fake tensors in
    ``node.meta["val"]``; every output owns its memory: views are no nodes)."""
    vals = [a.meta.get("val") if isinstance(a, torch.fx.Node) else a for a in node.args]
    kwargs = {k: v.meta.get("val") if isinstance(v, torch.fx.Node) else v
              for k, v in node.kwargs.items()}
    val = node.meta.get("val")
    outs = [o for o in (val if isinstance(val, (tuple, list)) else [val])
            if isinstance(o, torch.Tensor)]
    return _ops.call_flops(node.target, vals, kwargs, val, outs, [-1] * len(outs))


def _forward_nodes(joint):
    """The joint graph's forward operations (``partitioner_tag == "is_forward"``), in order."""
    nodes = [n for n in joint.graph.nodes
             if n.op == "call_function" and n.meta.get("partitioner_tag") == "is_forward"]
    if not nodes and any(n.op == "call_function" for n in joint.graph.nodes):
        raise lowerset.ArgumentError(
            "the joint graph's operations carry no partitioner_tag: this PyTorch's AOTAutograd "
            f"does not mark the forward part (torch_ext was checked on torch "
            f"{', '.join(_compat.CHECKED_ON)})")
    return nodes


def _groups(joint, copies):
    """(groups in forward order, FX node -> (group index, output k) or ("e", external index),
    externals as FX placeholders, placeholder -> its copy's (group index, 0)). The layout
    copies of `copies` (placeholder name -> bytes) come first, as the compiled code makes them
    at the forward's start; convolutions read them in place of their placeholders."""
    where: dict[Any, Any] = {}
    externals: list[torch.fx.Node] = []
    for n in joint.graph.nodes:
        if n.op == "placeholder" and n.meta.get("partitioner_tag") == "is_forward" \
                and isinstance(n.meta.get("val"), torch.Tensor):
            where[n] = ("e", len(externals))
            externals.append(n)
    groups = [_copy_group(p, copies[p.name], where[p]) for p in externals if p.name in copies]
    copied = {grp.owner: (g, 0) for g, grp in enumerate(groups)}
    for n in _forward_nodes(joint):
        val = n.meta.get("val")
        src = n.args[0] if n.args and isinstance(n.args[0], torch.fx.Node) else None
        if n.target is operator.getitem and src in where and _owns_items(src, where, groups):
            g, _ = where[src]
            where[n] = (g, n.args[1])
            groups[g].members.append(n)
        elif (_is_view(n) or n.target is operator.getitem) and src in where:
            # a view, or an item of a list of views (split, unbind): the memory of its source
            where[n] = where[src]
            if where[src][0] != "e":
                groups[where[src][0]].members.append(n)
        elif isinstance(val, torch.Tensor) or (
                isinstance(val, (tuple, list))
                and any(isinstance(v, torch.Tensor) for v in val)):
            outs = list(val) if isinstance(val, (tuple, list)) else [val]
            g = _Group(n, [_bytes(v) for v in outs])
            g.args = [copied[a] if a in copied and n.target in _inductor_layout.CONVOLUTIONS
                      else where[a] for a in n.all_input_nodes if a in where]
            tags = getattr(n.target, "tags", ())
            g.random = torch.Tag.nondeterministic_seeded in tags
            schema = _compat.op_schema(n.target)
            g.mutates = bool(schema is not None and schema.is_mutable)
            where[n] = (len(groups), 0)
            groups.append(g)
    return groups, where, externals, copied


def _owns_items(src, where, groups):
    """Whether FX node `src` is the operation of a node with several outputs (its items are
    those outputs), not a view or a list of views of another node's output."""
    w = where[src]
    return (w[0] != "e" and groups[w[0]].owner is src
            and isinstance(src.meta.get("val"), (tuple, list)))


def _backward_reads(joint, where, copied):
    """The (group, k) and ("e", i) values some backward operation of the joint graph reads (a
    copied placeholder's copy, which the forward saves in its place)."""
    read: set[tuple[Any, Any]] = set()
    for n in joint.graph.nodes:
        if n.meta.get("partitioner_tag") == "is_backward" and n.op == "call_function":
            read.update(copied.get(a, where[a]) for a in n.all_input_nodes if a in where)
    return read


def _backward_calls(joint):
    """Per autograd sequence number (``meta["seq_nr"]``, shared by a forward operation and the
    backward operations AOTAutograd traced from its derivative): those backward calls."""
    calls: dict[int, list[torch.fx.Node]] = {}
    for n in joint.graph.nodes:
        if n.meta.get("partitioner_tag") == "is_backward" and n.op == "call_function" \
                and n.meta.get("seq_nr") is not None:
            calls.setdefault(n.meta["seq_nr"], []).append(n)
    return calls


def _peaks(groups, joint, workspace):
    """Per group: (forward_peak, backward_peak) of :class:`lowerset.NodeFacts` from measured
    workspace, (0, 0) where none was measured. The forward: the outputs and the call's
    workspace. The backward: the outputs of the backward calls of the group's sequence number
    (its first group takes them): the highest of a call's outputs and its workspace, among
    those with a workspace."""
    calls = _backward_calls(joint)
    taken: set[Any] = set()
    peaks = []
    for grp in groups:
        work = 0 if grp.copy else workspace(grp.owner)
        forward = sum(grp.out_bytes) + work if work else 0
        seq = None if grp.copy else grp.owner.meta.get("seq_nr")
        mine = calls.get(seq, []) if seq not in taken else []
        taken.add(seq)
        backward = max((_ops.value_bytes(n.meta.get("val")) + workspace(n)
                        for n in mine if workspace(n)), default=0)
        peaks.append((forward, backward))
    return peaks


def _joint_outputs(joint):
    """The joint graph's outputs, flat: the forward outputs, then one gradient per primal
    input (None where it has none)."""
    out = next(n for n in joint.graph.nodes if n.op == "output")
    return _compat.tree_flatten(out.args)[0]


def _returned(outputs, where, num_fwd_outputs):
    """The (group, k) values the forward graph returns (its first `num_fwd_outputs` outputs)."""
    return sorted({where[v] for v in outputs[:num_fwd_outputs]
                   if isinstance(v, torch.fx.Node) and v in where and where[v][0] != "e"})


def _graded_inputs(joint, outputs, num_fwd_outputs):
    """The placeholders the joint graph returns a gradient for: parameters, and inputs that
    require a gradient."""
    primals = [n for n in joint.graph.nodes
               if n.op == "placeholder" and n.meta.get("partitioner_tag") == "is_forward"]
    return {p for p, g in zip(primals, outputs[num_fwd_outputs:]) if g is not None}


def _last_forward_use(groups):
    """Per (group, k): the forward position of its last reader (its own where none reads it)."""
    last = {(g, k): g for g, grp in enumerate(groups) for k in range(len(grp.out_bytes))}
    for g, grp in enumerate(groups):
        for a in grp.args:
            if a[0] != "e":
                last[a] = max(last[a], g)
    return last


def _node_facts(g, grp, read, returned, last, gets_grad, peaks):
    args = tuple((~a[1], 0) if a[0] == "e" else a for a in grp.args)
    kept = [(g, k) in read or (g, k) in returned for k in range(len(grp.out_bytes))]
    return lowerset.NodeFacts(
        outputs=tuple(grp.out_bytes), args=args,
        reads_args=tuple(p for p, a in enumerate(grp.args) if a in read),
        # a copy's readers are the convolutions (their reads_args), not its own backward,
        # which runs last: it is first in the forward order
        reads_outputs=() if grp.copy else tuple(k for k, r in enumerate(kept) if r),
        grad_args=tuple(gets_grad(a) for a in grp.args),
        # a copy passes its gradient on as it is
        output_views=(-1,) * len(grp.out_bytes),
        grad_views=(0,) if grp.copy else (-1,) * len(args),
        forward_peak=peaks[0], backward_peak=peaks[1],
        pinned=grp.random or grp.mutates or grp.copy,
        plain_free_after=tuple(-1 if r else last[(g, k)] for k, r in enumerate(kept)))


def joint_to_graph(joint: torch.fx.GraphModule, num_fwd_outputs: int,
                   workspace: Any = None, copies: Any = None
                   ) -> tuple[lowerset.Graph, list[list[torch.fx.Node]]]:
    """The forward part of an AOTAutograd joint graph as a :class:`lowerset.Graph` with facts.

    Parameters
    ----------
    joint : torch.fx.GraphModule
        The joint forward and backward graph a partition function receives.
    num_fwd_outputs : int
        How many of its outputs the forward graph returns.
    workspace : callable, optional
        ``workspace(fx_node) -> bytes`` an operation's call holds above its outputs
        (:func:`torch_ext._workspace.probe`): with it, a node's ``forward_peak`` is its outputs
        and its call's workspace, its ``backward_peak`` the outputs of the backward calls of
        its autograd sequence number (``meta["seq_nr"]``) and their largest workspace, where
        one was measured. None: no workspace.
    copies : mapping, optional
        Placeholder name -> bytes of a copy the compiled code makes of it at the forward's
        start for the convolutions that read it, saving the copy for their backward
        (Inductor's layout optimization, :func:`torch_ext._inductor_layout.layout_copies`):
        each is a pinned node of its own, first in the forward order, labelled
        ``"<name>.channels_last"``, read by those convolutions and their backward.

    Returns
    -------
    graph : lowerset.Graph
        Node ``i`` is labelled with the FX name of the i-th forward operation that owns its
        memory; T_v in FLOPs scaled to ``torch_ext.trace``'s units (cost units), M_v in bytes;
        ``attrs[v]`` holds the operation (``"op"``) and its FLOPs unscaled (``"flops"``).
        A placeholder the joint graph returns a gradient for is an external of kind "param"
        (resident, its gradient made in the step), any other an "input".
    members : list of list of torch.fx.Node
        Per node id, the FX nodes it stands for (the operation, its items and views; none for
        a copy).

    Raises
    ------
    lowerset.ArgumentError
        If the joint graph has no forward operation with a tensor output, its nodes carry no
        ``partitioner_tag``, or a tensor has a symbolic shape (``dynamic=True``).
    """
    groups, where, externals, copied = _groups(joint, copies or {})
    if len(groups) == len(copied):
        raise lowerset.ArgumentError("the joint graph has no forward operation with a tensor "
                                     "output: nothing to plan")
    read = _backward_reads(joint, where, copied)
    outputs = _joint_outputs(joint)
    returned = _returned(outputs, where, num_fwd_outputs)
    last = _last_forward_use(groups)
    graded = _graded_inputs(joint, outputs, num_fwd_outputs)
    kinds = tuple(("param" if p in graded else "input", _bytes(p.meta["val"]))
                  for p in externals)

    def gets_grad(a):   # parameters and floating-point values get a gradient; inputs do not
        if a[0] == "e":
            return kinds[a[1]][0] == "param"
        return torch.is_floating_point(_output_val(groups[a[0]], a[1]))

    kept = set(returned)
    peaks = _peaks(groups, joint, workspace or (lambda node: 0))
    facts_nodes = [_node_facts(g, grp, read, kept, last, gets_grad, peaks[g])
                   for g, grp in enumerate(groups)]
    seeds = tuple(v for v in returned
                  if torch.is_floating_point(_output_val(groups[v[0]], v[1])))
    facts = lowerset.ExecutionFacts(
        nodes=tuple(facts_nodes), forward_order=tuple(range(len(groups))),
        backward_order=tuple(range(len(groups) - 1, -1, -1)), externals=kinds,
        returned=tuple(returned), seeds=seeds or tuple(returned[-1:]), grad_sum="inplace")
    labels = [grp.owner.name + ".channels_last" if grp.copy else grp.owner.name
              for grp in groups]
    # a copy: one per element, as the trace's rule for an operation without a formula
    flops = {v: grp.out_bytes[0] // grp.owner.meta["val"].element_size()
             if grp.copy else _flops(grp.owner) for v, grp in zip(labels, groups)}
    cost, _ = flop_costs(flops, TARGET_TOTAL_COST)
    edges = sorted({(labels[a[0]], labels[v]) for v, grp in enumerate(groups)
                    for a in grp.args if a[0] != "e"})
    memory = {v: sum(grp.out_bytes) for v, grp in zip(labels, groups)}
    attrs = {v: {"op": "channels_last copy" if grp.copy else str(grp.owner.target),
                 "flops": flops[v]} for v, grp in zip(labels, groups)}
    graph = lowerset.Graph(labels, edges, cost, memory, attrs, facts=facts)
    return graph, [grp.members for grp in groups]


def _output_val(grp, k):
    val = grp.owner.meta.get("val")
    return val[k] if isinstance(val, (tuple, list)) else val


class PlannedPartition:
    """An AOTAutograd partition function that saves what a lowerset plan keeps.

    Pass it as ``partition_fn`` to ``torch._dynamo.backends.common.aot_autograd``, or use
    :func:`backend`. Each joint graph it partitions is planned on its own, at the same budget.

    A budget is held by the partitioned graphs themselves: the liveness analysis of the
    forward and backward graphs PyTorch's partitioner makes from a plan, with each
    operation's measured workspace (:attr:`CompiledPlan.peak`), must fit ``budget -
    outside``. The planner's schedule follows the joint graph's forward part, while the
    partitioner orders the backward graph and its frees its own way, so the plan is searched
    for over the planner's budget (:data:`FIT_ROUNDS` partitions at most per search), with the
    planner on the graph and on it without its operations' workspace, then among the plans
    of least peak; of the plans that fit, the one that recomputes the fewest FLOPs is kept.

    Parameters
    ----------
    budget : int, optional
        Bytes: the device memory of the whole step: one compiled graph's step, its
        parameters, their gradients and its inputs included, plus `outside`. None (default):
        the least peak: of the plans of least schedule peak on the planner's front, the
        pruned family's (:func:`lowerset.pareto`) and the pruned family's of the graph
        without its operations' workspace, the one whose partitioned graphs peak lowest.
    outside : int
        Bytes the step holds besides the compiled graph's own while it runs (the loss's
        targets, a model that is not compiled); the compiled step may reach
        ``budget - outside``. Default 0. Compiling the loss computation whole leaves none.
    method : str
        The planner's method (``"auto"``, ``"exact"``, ...).
    time_limit : float, "default" or None
        Seconds per plan (:func:`lowerset.default_time_limit` by default).
    measure_workspace : bool
        Run each distinct operation of the joint graph once on fresh tensors to measure its
        workspace (:mod:`torch_ext._workspace`; default True). False leaves the workspace
        out of the prediction.
    beyond_canonical : bool
        Plan at a budget with ``lowerset.solve(..., beyond_canonical=True)``: drop sets that
        no lower-set sequence gives (:class:`lowerset.DropSetStrategy`) where they recompute
        less. Default False.

    Attributes
    ----------
    plans : list of CompiledPlan
        One per joint graph partitioned, in order.

    Raises
    ------
    lowerset.InfeasibleBudgetError
        At compilation (wrapped by ``torch.compile`` in its ``BackendCompilerFailed``), if no
        plan of a graph fits `budget`.
    """

    def __init__(self, budget: int | None = None, *, outside: int = 0, method: str = "auto",
                 time_limit: float | str | None = lowerset.planner.DEFAULT,
                 measure_workspace: bool = True, beyond_canonical: bool = False) -> None:
        self.budget, self.outside, self.method = budget, outside, method
        self.time_limit, self.measure_workspace = time_limit, measure_workspace
        self.beyond_canonical = beyond_canonical
        self.plans: list[CompiledPlan] = []
        # fit_measured's: the dropped sets (_dropped_key) of plans this graph was compiled with
        self._compiled_before: set[bytes] = set()

    def plan(self, graph: lowerset.Graph, budget: int | None = None) -> lowerset.Strategy:
        """The plan of one graph at `budget` (bytes of the graph's schedule), this partition's
        ``budget - outside`` by default.

        Parameters
        ----------
        graph : lowerset.Graph
            A graph of :func:`joint_to_graph`.
        budget : int, optional
            The planner's budget (bytes); None: the partition's.

        Returns
        -------
        lowerset.CanonicalStrategy or lowerset.DropSetStrategy
            The latter only with `beyond_canonical`.
        """
        if budget is None:
            if self.budget is None:
                return self.least(graph)
            budget = self.budget - self.outside
        return lowerset.solve(graph, budget, method=self.method, time_limit=self.time_limit,
                              progress=False, beyond_canonical=self.beyond_canonical)

    def __call__(self, joint: torch.fx.GraphModule, joint_inputs: Any, *,
                 num_fwd_outputs: int, **kwargs: Any) -> tuple[torch.fx.GraphModule,
                                                               torch.fx.GraphModule]:
        """Plan `joint`, tag its forward operations and split it (AOTAutograd's call).

        Parameters
        ----------
        joint : torch.fx.GraphModule
            The joint forward and backward graph.
        joint_inputs : object
            Its example inputs (passed on).
        num_fwd_outputs : int
            How many of its outputs the forward graph returns.
        **kwargs
            Passed on to PyTorch's default partitioner (``static_lifetime_input_indices``);
            Inductor's ``compiler`` is dropped.

        Returns
        -------
        (torch.fx.GraphModule, torch.fx.GraphModule)
            The forward and the backward graph.
        """
        # inductor names itself; the default partitioner takes no compiler
        layout = (kwargs.pop("compiler", None) == "inductor"
                  and _inductor_layout.layout_optimized(joint))
        _fx_dropout.split_dropout(joint)
        _require_sizes(joint)
        convs = _inductor_layout.CONVOLUTIONS if layout else ()
        sizes = _workspace.probe(joint, channels_last=convs) if self.measure_workspace else {}

        def workspace(node):
            return sizes.get(_workspace.op_key(node), 0) if sizes else 0

        # the forward graph keeps the joint graph's forward operations and placeholder names
        copies = _inductor_layout.layout_copies(joint) if layout else None
        graph, members = joint_to_graph(joint, num_fwd_outputs, workspace=workspace,
                                        copies=copies)

        def partition(plan):
            recomputed = _tag(plan, members)
            fw, bw = _APIS["default_partition"](joint, joint_inputs,
                                                num_fwd_outputs=num_fwd_outputs, **kwargs)
            peak = max(_fx_liveness.step_peak(fw, bw, plan.schedule.resident,
                                              workspace=workspace, copies=copies))
            return CompiledPlan(graph, plan, recomputed, peak), (fw, bw)

        if self.budget is None:
            chosen, graphs = self._least_partition(graph, partition)
        else:
            chosen, graphs = self._fit(graph, partition, self.budget)
        key = _dropped_key(chosen.plan)
        if key in self._compiled_before:
            raise _CompiledBefore(key)
        self.plans.append(chosen)
        return graphs

    def _fit(self, graph, partition, budget):
        """The plan whose partitioned graphs fit the budget by their liveness analysis, with the
        fewest recomputed FLOPs (:func:`_cost`) among those tried.

        The planner's schedule follows the joint graph's forward part, each node's backward
        after the next one's, and holds each operation's workspace on top of the values it
        keeps; the partitioner's backward graph orders gradients and their frees its own way.
        So the planner's budget is searched for (:meth:`_search`) twice: planning on `graph`
        and on the graph without its operations' workspace (:func:`_without_workspace`), each
        plan judged by its partitioned graphs' peak with the workspace. The plans of least peak
        (:meth:`_least_plans`) that recompute less than the best fitting one are tried last, so
        that no budget recomputes more than the least peak's plan."""
        target = budget - self.outside
        best = None
        tried: list[tuple[int | None, int]] = []
        for planned in (graph, _without_workspace(graph)):
            if planned is None:   # no workspace: one search
                continue
            best = self._search(graph, planned, partition, target, best, tried)
        for plan in self._least_plans(graph):
            if best is not None and _cost(plan) >= _cost(best[0].plan):
                continue
            compiled_plan, graphs = partition(plan)
            tried.append((None, compiled_plan.peak))
            if compiled_plan.peak <= target:
                best = (compiled_plan, graphs)
        if best is None:
            raise lowerset.InfeasibleBudgetError(
                budget, method=self.method,
                reason="the partitioned graphs' liveness peaks, at the planner budgets tried, "
                       + ", ".join(f"{p} at {'a least peak' if a is None else a}"
                                   for a, p in tried)
                       + f" bytes, exceed the budget less outside ({target} bytes)")
        return best

    def _search(self, graph, planned, partition, target, best, tried):
        """Search the planner's budget on `planned` (`graph`, or it without its workspace) for
        a plan of `graph` whose partitioned graphs peak at most `target` bytes; return, of the
        fitting plans found and `best` (``(CompiledPlan, graphs)`` or None), the one of fewest
        recomputed FLOPs (:func:`_cost`), appending each round's (planner budget, liveness
        peak) to `tried`.

        Each round plans at a budget moved by what the last partition's liveness peak missed
        or left over (:func:`_next_budget`) and partitions again (a first budget below the
        planner's least peak moves up to it: the planner's schedule, which keeps a value until
        its own node's backward, may hold more than the graphs); a fitting partition within
        :data:`FIT_SLACK` of the target, or one that recomputes nothing, ends the search,
        :data:`FIT_ROUNDS` partitions at most."""
        asked = target
        rounds: list[tuple[int | None, int]] = []
        bounds: dict[str, int | None] = dict.fromkeys(("fit", "over", "floor"))
        for _ in range(FIT_ROUNDS):
            try:
                plan = _rebind(self.plan(planned, asked), graph)
            except lowerset.InfeasibleBudgetError as no_plan:
                bounds["floor"] = asked   # below the planner's least peak
                if not rounds:   # its schedule may hold more than the graphs: partition that
                    if no_plan.min_budget is None:
                        break
                    asked = no_plan.min_budget
                    continue
            else:
                compiled_plan, graphs = partition(plan)
                rounds.append((asked, compiled_plan.peak))
                if compiled_plan.peak <= target:
                    if best is None or _cost(plan) < _cost(best[0].plan):
                        best = (compiled_plan, graphs)
                    if (target - compiled_plan.peak <= FIT_SLACK * target
                            or not plan.schedule.recomputed):
                        break
                    bounds["fit"] = max(asked, bounds["fit"] or 0)
                else:
                    bounds["over"] = min(asked, bounds["over"] or asked)
            following = _next_budget(rounds, target, bounds, FIT_SLACK * target)
            if following is None:
                break
            asked = following
        tried.extend(rounds)
        return best

    def _least_plans(self, graph):
        """The ``FIT_ROUNDS // 2`` plans of least schedule peak on the planner's front
        (:func:`lowerset.pareto`), as many on the pruned family's (Sec. 4.3), and as many on
        the pruned family's of the graph without its operations' workspace
        (:func:`_without_workspace`), bound to `graph`. The planner's schedule runs the
        backward pass as the reverse of the joint graph's forward part, keeping a value until
        its own node's backward and holding each operation's workspace on top, and PyTorch's
        partitioner orders it its own way, so the two peaks differ by a different amount from
        plan to plan, and the lowest schedule need not partition lowest."""
        fronts = [(graph, method) for method in dict.fromkeys(
            (lowerset.dp.resolve_method(graph, self.method), "approx"))]
        bare = _without_workspace(graph)
        if bare is not None:
            fronts.append((bare, "approx"))
        plans, seen = [], set()
        for g, method in fronts:
            front = lowerset.pareto(g, method, time_limit=self.time_limit, progress=False)
            for p in front[::-1][:FIT_ROUNDS // 2]:   # the front's peaks decrease
                key = _dropped_key(p)
                if key not in seen:
                    seen.add(key)
                    plans.append(_rebind(p, graph))
        return plans

    def _least_partition(self, graph, partition):
        """Of :meth:`_least_plans`, each partitioned, the one whose graphs peak lowest (then
        recompute least), with its graphs."""
        return min((partition(p) for p in self._least_plans(graph)),
                   key=lambda c: (c[0].peak, _cost(c[0].plan)))

    def least(self, graph: lowerset.Graph) -> lowerset.CanonicalStrategy:
        """The least-peak plan of one graph (:func:`lowerset.min_peak`).

        Parameters
        ----------
        graph : lowerset.Graph
            A graph of :func:`joint_to_graph`.

        Returns
        -------
        lowerset.CanonicalStrategy
        """
        return lowerset.min_peak(graph, self.method, time_limit=self.time_limit,
                                 progress=False)


def _without_workspace(graph):
    """`graph` with no operation's workspace (``forward_peak`` and ``backward_peak`` 0); None
    where it has none. Measured on the U-Net under ``aot_eager``: the pruned family's front of
    the graph without it holds a plan whose partitioned graphs peak at 120.6 MB, where every
    plan of least schedule peak with it peaks at 124.8 MB or more."""
    nodes = graph.facts.nodes
    if not any(nf.forward_peak or nf.backward_peak for nf in nodes):
        return None
    bare = tuple(dataclasses.replace(nf, forward_peak=0, backward_peak=0) for nf in nodes)
    return graph.with_facts(dataclasses.replace(graph.facts, nodes=bare))


def _rebind(plan, graph):
    """`plan` as a plan of `graph` (the same nodes; :func:`_without_workspace`'s graph and its
    own): its lower sets, or its drop set, and method."""
    if plan.graph is graph:
        return plan
    if isinstance(plan, lowerset.DropSetStrategy):
        return lowerset.DropSetStrategy(graph, plan.dropped_mask(), method=plan.method)
    return lowerset.CanonicalStrategy(graph, plan.lower_sets, method=plan.method)


def _cost(plan):
    """``(FLOPs, cost units)`` `plan`'s schedule recomputes: the FLOPs from the graph's
    ``"flops"`` attributes (:func:`joint_to_graph`). Plans are compared by them first because
    a cost unit rounds each operation's FLOPs (to at least one unit): on the U-Net under
    ``aot_eager`` a plan of 37 units recomputes 31.2 MFLOP where one of 41 recomputes 26.9."""
    attrs = plan.graph.attrs
    recomputed = plan.schedule.recomputed
    return sum(attrs[v].get("flops", 0) for v in recomputed), plan.schedule.recompute_cost


def _next_budget(tried, target, bounds, least_step):
    """The planner budget after rounds `tried` ((planner budget, liveness peak) each, the last
    one partitioned last) for a liveness peak of `target` bytes.

    `bounds` holds the largest planner budget whose plan fit ("fit"), the least whose plan did
    not ("over") and the largest the planner found no plan for ("floor"), each None where
    none. Once a lower one ("fit" or "floor") and "over" bracket the answer: the middle of the
    bracket (a plan's peak is a step function of the planner's budget), None once it is
    closed. Before: a secant step, the last round's miss (or what it left over) scaled by how
    the peak followed the planner's budget over the last two rounds (not scaled where it moved
    against it: another plan), of at least `least_step` bytes (a plan just over the target may
    need the planner's budget well below it). A
    "floor" comes only after an "over": the search goes down only from a plan that did not
    fit."""
    bracket = _bracket(bounds)
    if bracket is not None:
        low, high = bracket
        return None if high - low <= 1 else (low + high) // 2
    last, peak = tried[-1]
    slope = 1.0
    if len(tried) >= 2 and tried[-2][0] != last:
        slope = (peak - tried[-2][1]) / (last - tried[-2][0])
        # a peak that moved against the planner's budget (plans differ) gives no slope
        slope = 1.0 if slope < 0 else min(max(slope, 0.1), 10.0)
    move = (target - peak) / slope
    move = math.copysign(max(abs(move), least_step), move)
    return max(0, int(last + move))


def _bracket(bounds):
    """``(low, high)``: the largest planner budget whose plan fit or that had no plan, and
    the least whose plan did not fit (the `bounds` of :func:`_next_budget`); None until both
    are known."""
    lows = [b for b in (bounds["fit"], bounds["floor"]) if b is not None]
    if lows and bounds["over"] is not None:
        return max(lows), bounds["over"]
    return None


def _dropped_key(plan):
    """What identifies a plan's compiled graphs: its dropped nodes (the partition's tags)."""
    return lowerset.scheduling.dropped_nodes(plan).tobytes()


class _CompiledBefore(Exception):
    """Raised by a partition whose plan :func:`fit_measured` has compiled and measured
    already (``PlannedPartition._compiled_before``), to stop a compilation that would repeat
    it."""

    def __init__(self, key: bytes) -> None:
        super().__init__("a plan compiled before")
        self.key = key


def _tag(plan, members):
    """Tag the forward FX nodes of `members` (per node id) ``MUST_RECOMPUTE`` where `plan` drops
    the node, ``MUST_SAVE`` elsewhere; the names of those tagged to recompute."""
    dropped = lowerset.scheduling.dropped_nodes(plan)
    policy = torch.utils.checkpoint.CheckpointPolicy
    recomputed = []
    for v, nodes in enumerate(members):
        for n in nodes:
            n.meta["recompute"] = policy.MUST_RECOMPUTE if dropped[v] else policy.MUST_SAVE
            if dropped[v]:
                recomputed.append(n.name)
    return tuple(recomputed)


def backend(budget: int | None = None, *, outside: int = 0, compiler: str = "inductor",
            method: str = "auto", time_limit: float | str | None = lowerset.planner.DEFAULT,
            measure_workspace: bool = True, measure_step: bool | None = None,
            beyond_canonical: bool = False) -> Any:
    """A ``torch.compile`` backend whose partition saves what a lowerset plan keeps.

    ``torch.compile(model, backend=torch_ext.compiled.backend(budget))``: every graph the model
    compiles into is partitioned by a :class:`PlannedPartition`, found on the returned backend
    as ``.partition`` (its ``plans`` say what each graph recomputes, its predicted peak and,
    where the step was measured, its measured peak).

    Parameters
    ----------
    budget : int, optional
        Bytes of the whole step, per compiled graph (see :class:`PlannedPartition`); None: the
        least peak.
    outside : int
        Bytes the step holds besides the compiled graph's (see :class:`PlannedPartition`).
    compiler : {"inductor", "aot_eager"}
        What compiles the two graphs: Inductor, or none (``aot_eager``: op by op, the
        prediction's model).
    method, time_limit, measure_workspace
        As :class:`PlannedPartition`.
    measure_step : bool, optional
        Hold `budget` by the compiled step's measured peak (:func:`fit_measured`): each
        training graph is compiled, run forward and backward twice on copies of its inputs,
        and compiled again at a planner budget moved by what the measurement missed or left
        over. None (default): with a budget under Inductor, whose code differs from the
        partitioned graphs the prediction analyses; under ``aot_eager`` the prediction holds
        the budget.
    beyond_canonical : bool
        As :class:`PlannedPartition`.

    Returns
    -------
    callable
        The backend, with attribute ``partition``.

    Raises
    ------
    lowerset.ArgumentError
        If `compiler` is not one of :data:`COMPILERS`.
    """
    if compiler not in COMPILERS:
        raise lowerset.ArgumentError(f"unknown compiler {compiler!r}; expected one of "
                                     f"{COMPILERS}")
    partition = PlannedPartition(budget, outside=outside, method=method, time_limit=time_limit,
                                 measure_workspace=measure_workspace,
                                 beyond_canonical=beyond_canonical)
    if measure_step is None:
        measure_step = budget is not None and compiler == "inductor"
    if compiler == "aot_eager":
        compile_fn = _APIS["aot_autograd"](fw_compiler=_APIS["boxed_nop"],
                                           bw_compiler=_APIS["boxed_nop"],
                                           partition_fn=partition,
                                           keep_inference_input_mutations=True)
    else:
        def compile_fn(gm, example_inputs):
            # as patches of compile_fx, not around it: they also hold for the backward graph,
            # which Inductor compiles at the first backward pass
            return _APIS["compile_fx"](gm, example_inputs,
                                       config_patches=inductor_options(partition))

    def run(gm, example_inputs):
        # AOTAutograd's cache would hand back graphs partitioned before, by another plan or
        # none, and leave `plans` without a record of them
        with _APIS["functorch_config"].patch(enable_autograd_cache=False):
            if measure_step:
                return fit_measured(partition, compile_fn, gm, example_inputs)
            return compile_fn(gm, example_inputs)

    run.partition = partition  # type: ignore[attr-defined]
    return run


def fit_measured(partition: PlannedPartition, compile_fn: Any, gm: torch.fx.GraphModule,
                 example_inputs: Any) -> Any:
    """`gm` compiled by `compile_fn` with `partition`, its measured step fitting the budget.

    Each round compiles `gm` (its backward too, not at the first backward pass), runs the
    compiled step forward and backward on copies of the inputs
    (:func:`torch_ext._step_measure.graph_step_peak`) and measures its peak. A step over
    ``partition.budget - partition.outside`` is compiled again at the budget less the largest
    excess of a measured step over its prediction so far; one under it by more than
    :data:`FIT_SLACK` at the budget less its own (negative) excess (Inductor's fused code may
    hold less than the graphs' prediction); a fitting and an overshooting budget, once they
    bracket the answer, are bisected to :data:`FIT_SLACK` of the budget
    (:meth:`_MeasuredFit.following`), for :data:`MEASURE_ROUNDS` planner budgets at most; a
    plan compiled in an earlier round is not compiled again (its partition stops the
    compilation and the round reuses its measurement).
    The search ends at a step that fits within :data:`FIT_SLACK` of the budget or recomputes
    nothing; where no round's step fits (or no plan fits the budget by the prediction, which
    Inductor's code may hold less than), the least peak's plan (the partition's without a
    budget) is compiled and measured last. Of the fitting steps, the one recomputing the
    fewest FLOPs (:func:`_cost`) is returned, its :class:`CompiledPlan` (``measured``,
    ``rounds``) appended to ``partition.plans`` in place of the rounds'.

    Without a budget, or for a graph with no backward (nothing partitioned, no gradient), the
    first compilation is returned, measured where it has a backward.

    Parameters
    ----------
    partition : PlannedPartition
        The partition `compile_fn` uses; its ``budget`` is set for each round and restored.
    compile_fn : callable
        ``compile_fn(gm, example_inputs) -> compiled``, a ``torch.compile`` backend that
        partitions with `partition` (as :func:`backend` makes one).
    gm : torch.fx.GraphModule
        The graph Dynamo captured.
    example_inputs : sequence
        Its real example inputs (the backend's).

    Returns
    -------
    callable
        The compiled graph.

    Raises
    ------
    lowerset.InfeasibleBudgetError
        If no compiled step measured fits the budget, the least peak's included (with each
        plan's predicted and measured peak).
    """
    budget = partition.budget
    with _APIS["functorch_config"].patch(force_non_lazy_backward_lowering=True):
        if budget is None:
            return _measured_round(partition, compile_fn, gm, example_inputs)[0]
        search = _MeasuredFit(partition, compile_fn, gm, example_inputs)
        try:
            return search.run()
        finally:
            partition.budget, partition._compiled_before = budget, set()


class _MeasuredFit:
    """:func:`fit_measured`'s search over the planner budget for one graph."""

    def __init__(self, partition, compile_fn, gm, example_inputs):
        self.partition, self.compile_fn = partition, compile_fn
        self.gm, self.example_inputs = gm, example_inputs
        self.budget, self.first = partition.budget, len(partition.plans)
        self.target = partition.budget - partition.outside
        self.rounds: list[tuple[int, int, int]] = []
        self.seen: dict[bytes, tuple[Any, CompiledPlan]] = {}   # dropped set -> fn, plan
        self.bounds: dict[str, int | None] = dict.fromkeys(("fit", "over", "floor"))

    def run(self):
        """The compiled graph kept (see :func:`fit_measured`)."""
        asked: int | None = self.target
        for _ in range(MEASURE_ROUNDS):
            if asked is None:
                break
            try:
                fn, cp = self.compile(asked)
            except lowerset.InfeasibleBudgetError:
                self.bounds["floor"] = asked
                if not self.rounds:
                    break   # no plan fits by the prediction: the least peak's is measured
            else:
                if cp is None or cp.measured is None:
                    return fn   # no backward: nothing to fit
                if self.record(asked, cp):
                    break
            asked = self.following()
        if not self.fitting():
            self.compile(None)   # the least peak's plan, where the rounds missed it
        return self.keep()

    def following(self):
        """The planner budget of the next round, None where the search ends. The compiled
        code's excess over the prediction (measured less predicted peak, negative where fused
        kernels hold less) moves with the plan, not with the planner budget (under Inductor:
        the U-Net's up to 14 MB above, ResNet-50's 8 MB below), so the next planner budget is the
        target less an excess measured: after a step over the target the largest one so far,
        at least :data:`FIT_SLACK` of the target below the last budget; after one with room
        the last one, at least as far above. Once a fitting (or plan-less) and an overshooting
        budget bracket the answer: the middle, None once the bracket is narrower than that
        step (each round is a compilation)."""
        least_step = FIT_SLACK * self.target
        bracket = _bracket(self.bounds)
        if bracket is not None:
            low, high = bracket
            return None if high - low <= least_step else (low + high) // 2
        asked, predicted, measured = self.rounds[-1]
        if measured > self.target:
            excess = max(m - p for _, p, m in self.rounds)
            return max(0, int(min(self.target - excess, asked - least_step)))
        return int(max(self.target - (measured - predicted), asked + least_step))

    def compile(self, asked):
        """``(compiled, CompiledPlan)`` at planner budget `asked` (None: the least peak's
        plan), measured; a plan compiled before is not compiled again."""
        p = self.partition
        p.budget = None if asked is None else asked + p.outside
        p._compiled_before = set(self.seen)
        try:
            fn, cp = _measured_round(p, self.compile_fn, self.gm, self.example_inputs)
        except _CompiledBefore as again:
            return self.seen[again.key]
        if cp is not None and cp.measured is not None:
            del p.plans[self.first:]
            self.seen[_dropped_key(cp.plan)] = fn, cp
        return fn, cp

    def record(self, asked, cp):
        """Note a round (its planner budget, its plan `cp` with its measured peak) in
        :attr:`rounds` and :attr:`bounds`; True where the search ends: the step fits within
        :data:`FIT_SLACK` of the target or recomputes nothing."""
        self.rounds.append((asked, cp.peak, cp.measured))
        if cp.measured > self.target:
            self.bounds["over"] = min(asked, self.bounds["over"] or asked)
            return False
        if (self.target - cp.measured <= FIT_SLACK * self.target
                or cp.plan.schedule.recompute_cost == 0):
            return True
        self.bounds["fit"] = max(asked, self.bounds["fit"] or 0)
        return False

    def fitting(self):
        return [(fn, cp) for fn, cp in self.seen.values() if cp.measured <= self.target]

    def keep(self):
        """The fitting compilation that recomputes the fewest FLOPs (:func:`_cost`), its plan
        appended to the partition's plans with the rounds."""
        fitting = self.fitting()
        if not fitting:
            raise lowerset.InfeasibleBudgetError(
                self.budget, method=self.partition.method,
                reason="the compiled steps measured "
                       + ", ".join(f"{cp.measured} with a plan predicted at {cp.peak}"
                                   for _, cp in self.seen.values())
                       + f" bytes, the least peak's plan among them, over the budget less "
                         f"outside ({self.target} bytes)")
        fn, cp = min(fitting, key=lambda c: _cost(c[1].plan))
        self.partition.plans.append(cp._replace(rounds=tuple(self.rounds)))
        return fn


def _measured_round(partition, compile_fn, gm, example_inputs):
    """``(compiled, CompiledPlan)``: `gm` compiled once, its plan (None where nothing was
    partitioned) with the step's measured peak (None where it has no backward)."""
    first = len(partition.plans)
    fn = compile_fn(gm, example_inputs)
    if len(partition.plans) == first:
        return fn, None
    cp = partition.plans[-1]
    increase = _step_measure.graph_step_peak(fn, example_inputs)
    if increase is not None:
        cp = cp._replace(measured=cp.plan.schedule.resident + increase)
        partition.plans[-1] = cp
    return fn, cp


def inductor_options(partition: PlannedPartition) -> dict[str, Any]:
    """Inductor's options that compile the plans of `partition` as they are predicted.

    ``torch.compile(model, options=inductor_options(part))`` compiles with Inductor, any
    other of its options added beside, and partitions every joint graph by `part`;
    :func:`backend` with ``compiler="inductor"`` compiles with these options.

    - ``custom_partitioner_fn``: an :class:`InductorPartition` of `part`.
    - ``allow_buffer_reuse`` off. With it on (Inductor's default), a buffer whose last use has
      passed is held until a later allocation of the same size takes it over, so a buffer
      dead before the step's highest point can still be held there; the liveness analysis
      of the prediction (:mod:`torch_ext._fx_liveness`) frees each buffer at its last use.
      The measured peaks with and without it: ``docs/benchmarks/torch.md``.

    Parameters
    ----------
    partition : PlannedPartition

    Returns
    -------
    dict
        Option name -> value, as ``torch.compile``'s `options` and
        ``torch._inductor.config.patch`` take them.
    """
    return {"custom_partitioner_fn": InductorPartition(partition), "allow_buffer_reuse": False}


class InductorPartition(_APIS["custom_partitioner"]):  # type: ignore[misc, name-defined, valid-type]
    """A :class:`PlannedPartition` as Inductor's ``custom_partitioner_fn``.

    :func:`inductor_options` passes it to Inductor, with the other options the prediction
    assumes; ``torch.compile(model, options=inductor_options(part))`` compiles with Inductor
    and partitions every joint graph by `part`, as :func:`backend` with
    ``compiler="inductor"`` does. Inductor calls only the partition, so a budget is held by
    the prediction alone, not by the measured step as :func:`backend` holds it
    (:func:`fit_measured`). Its uuid is None, so Inductor's cache is skipped (a cached graph
    would carry no record in ``part.plans``); it pickles as the partition's settings, which
    Inductor's cache key reads.

    Parameters
    ----------
    partition : PlannedPartition
    """

    def __init__(self, partition: PlannedPartition) -> None:
        self.partition = partition

    def __call__(self, gm, joint_inputs, **kwargs):
        """The forward and backward graphs of joint graph `gm`
        (:meth:`PlannedPartition.__call__`)."""
        return self.partition(gm, joint_inputs, **kwargs)

    def uuid(self) -> None:
        """None: Inductor caches no graph this partition makes."""
        return None

    def __reduce__(self):
        p = self.partition
        return (_inductor_partition, (p.budget, p.outside, p.method, p.time_limit,
                                      p.measure_workspace, p.beyond_canonical))


def _inductor_partition(budget, outside, method, time_limit, measure_workspace,
                        beyond_canonical):
    return InductorPartition(PlannedPartition(budget, outside=outside, method=method,
                                              time_limit=time_limit,
                                              measure_workspace=measure_workspace,
                                              beyond_canonical=beyond_canonical))
