"""Turn what :func:`torch_ext.trace` recorded into a :class:`~torch_ext.trace.TracedGraph`:
one node per recorded operation that is not absorbed, with its :class:`lowerset.NodeFacts`."""

import dataclasses
import math
from types import SimpleNamespace

import lowerset
from lowerset.scheduling import inplace_groups

from ._graph import TARGET_TOTAL_COST, TracedGraph
from ._outside import outside_bytes
from .exceptions import TraceError

__all__ = ["build", "flop_costs"]


def build(rec, loss, windows, cost_model, time_unit, device, modes, accumulate, outside=None):
    """The TracedGraph of a finished :class:`~torch_ext.trace._Recorder` (see ``trace``):
    `modes` go to ``attrs[0]["step"]``; with `accumulate`, every parameter that gets a
    gradient has one when the step starts (``grads_at_start``); with `outside` (the meter's
    ``window_starts``), the bytes held outside the traced operations are measured
    (:func:`torch_ext._outside.outside_bytes`)."""
    nodes = [op for op in rec.ops if op.node is not None]
    n = len(nodes)
    kept = _kept_for_unknown_reads(rec, nodes)
    returned = sorted(_returned(nodes) | kept)
    loss_ref = rec.value_of[loss]
    seeds = ((loss_ref[1], loss_ref[2]),)
    if seeds[0] not in returned:
        returned = sorted(set(returned) | set(seeds))
    bpos = {v: q for q, v in enumerate(rec.backward_order)}
    built = [_node_facts(op, n, windows, bpos, kept) for op in nodes]
    _pin_readers_of_overwritten(nodes, [nf for nf, _ in built])
    facts_nodes, attrs = [], {}
    absorbed = _absorbed_before(rec.ops)
    for op, (nf, hidden) in zip(nodes, built):
        facts_nodes.append(dataclasses.replace(nf, pinned=op.pin is not None))
        attrs[op.node] = _attrs(op, hidden, absorbed.get(op.node, []))
    if absorbed.get(None):
        attrs[n - 1].update(_absorbed_attrs("absorbed_after", absorbed[None]))
    attrs[0]["step"] = modes
    facts = lowerset.ExecutionFacts(
        nodes=tuple(facts_nodes), forward_order=tuple(range(n)),
        backward_order=tuple(rec.backward_order), externals=tuple(rec.externals),
        returned=tuple(returned), seeds=seeds, grad_sum="inplace",
        external_sizes=tuple(rec.external_sizes),
        external_bases=tuple(rec.external_bases))
    if accumulate:
        facts = dataclasses.replace(facts, grads_at_start=_gradient_targets(facts))
    cost, flop_unit, unit = _costs(nodes, cost_model, time_unit, TARGET_TOTAL_COST)
    edges = sorted({(s, v) for v, nf in enumerate(facts_nodes) for s, _ in nf.args if s >= 0}
                   | {(u, v) for v, nf in enumerate(facts_nodes) for u in nf.after})
    memory = {op.node: sum(b for b, p in zip(op.out_bytes, op.views) if p < 0) for op in nodes}
    def make(facts):
        try:
            return TracedGraph(list(range(n)), edges, cost, memory, attrs, facts=facts,
                               cost_model=cost_model, flop_unit=flop_unit,
                               time_unit=unit, device=device)
        except lowerset.GraphError as e:  # pragma: no cover - a trace bug, reported as such
            raise TraceError(f"the recorded step does not make a valid graph: {e}") from e

    graph = make(facts)
    if outside is None:
        return graph
    fwd, bwd = outside_bytes(graph, [op.index for op in nodes], outside)
    return make(dataclasses.replace(facts, outside_forward=fwd, outside_backward=bwd))


def _gradient_targets(facts):
    """The parameters (external ids, sorted) that get a gradient in the backward pass: the
    targets of the gradients the nodes whose backward runs return for external arguments."""
    targets = set()
    for v in facts.backward_order:
        nf = facts.nodes[v]
        for (s, _), gives in zip(nf.args, nf.grad_args):
            if gives and s < 0:
                targets.add(facts.external_target(~s))
    return tuple(sorted(e for e in targets if facts.externals[e][0] == "param"))


def _absorbed_before(ops):
    """Node id -> the absorbed operations dispatched just before it (None: after the last
    node)."""
    out, run = {}, []
    for op in ops:
        if op.node is None:
            run.append(op)
        else:
            if run:
                out[op.node] = run
            run = []
    if run:
        out[None] = run
    return out


def _pin_readers_of_overwritten(nodes, facts_nodes):
    """Pin the nodes that read memory an in-place operation overwrites later (a recomputation
    would read the new values): every node before the write that reads a value sharing the
    written buffer, except those the write ties to it (the views it writes through and the
    buffer's owner, :func:`lowerset.scheduling.inplace_groups`: dropped and recomputed
    together, in forward order, they replay the writes in order)."""
    # the facts are not made yet, and inplace_groups reads their nodes only
    group = inplace_groups(SimpleNamespace(nodes=facts_nodes))  # type: ignore[arg-type]
    buffer: dict[tuple[int, int], tuple[int, int] | None] = {}
    readers: dict[tuple[int, int], list[int]] = {}
    for op in nodes:
        v = op.node
        bufs = [buffer.get(a) if a[0] >= 0 else None for a in op.args]
        for p in op.writes:
            if p < len(op.args) and op.args[p][0] >= 0 and p in op.views:
                for u in readers.get(bufs[p], ()):
                    if u != v and group[u] != group[v] and nodes[u].pin is None:
                        nodes[u].pin = (f"reads memory that operation {v} ({op.name}) "
                                        "overwrites in place later")
        for b in {b for b in bufs if b is not None}:
            readers.setdefault(b, []).append(v)
        for k, p in enumerate(op.views):
            buffer[(v, k)] = bufs[p] if p >= 0 else (v, k)


def _kept_for_unknown_reads(rec, nodes):
    """Values read in the backward pass by autograd nodes no traced operation made: kept for
    the whole step (returned), their producers pinned."""
    kept = set()
    for (_, v, k), fn_name in rec.unknown_reads:
        kept.add((v, k))
        op = nodes[v]
        if op.pin is None:
            op.pin = (f"its output {k} is read in the backward pass by an autograd node "
                      f"({fn_name}) that no traced operation made")
    return kept


def _returned(nodes):
    """Outputs alive after the backward pass: their storage (memory the step made) or their
    tensor object (a view of an external array that the model or the caller keeps)."""
    out = set()
    for op in nodes:
        for k in range(len(op.outputs)):
            if k in op.tracked:
                alive = k not in op.freed_fwd and k not in op.freed_bwd
            else:
                alive = k not in op.died
            if alive:
                out.add((op.node, k))
    return out


def _node_facts(op, n, windows, bpos, kept):
    v = op.node
    args = list(op.args)
    for _, w in op.versions:
        if w not in args:
            args.append(w)
    reads_args: set[int] = set()
    reads_outputs: set[int] = set()
    for (u, k) in sorted(op.reads):
        if u == v:
            reads_outputs.add(k)
        elif (u, k) in args:
            reads_args.update(p for p, a in enumerate(args) if a == (u, k))
        else:
            args.append((u, k))
            reads_args.add(len(args) - 1)
    # a saved argument is read as the writes into its memory before the call left it
    reads_args.update(args.index(w) for p, w in op.versions if p in reads_args)
    hidden = len(args) - len(op.args)
    m = len(args)
    n_out = len(op.out_bytes)
    views = tuple(op.views)
    writes = op.writes
    nf = lowerset.NodeFacts(
        outputs=tuple(op.out_bytes), args=tuple(args),
        reads_args=tuple(sorted(reads_args)), reads_outputs=tuple(sorted(reads_outputs)),
        grad_args=tuple(bool(op.grads.get(p, False)) for p in range(m)),
        output_views=views,
        grad_views=tuple(op.gviews.get(p, -1) if op.grads.get(p) else -1 for p in range(m)),
        forward_peak=int(windows.get(f"f{op.index}", 0)),
        backward_peak=int(windows.get(f"b{op.index}", 0)),
        pinned=op.pin is not None,
        plain_free_after=tuple(op.freed_fwd.get(k, -1) if k not in op.freed_bwd else -1
                               for k in range(n_out)),
        inplace=any(p >= 0 and p in writes for p in views),
        plain_free_in_backward=tuple(op.freed_bwd.get(k, -1) for k in range(n_out)),
        held_until=tuple(_held(op, k, n) for k in range(n_out)),
        after=(v - 1,) if v > 0 and all(s < 0 for s, _ in args) else ())
    return nf, hidden


def _held(op, k, n):
    """Forward position until which the model's code holds output k (see NodeFacts)."""
    if k in op.dropped_at:
        return op.dropped_at[k] if op.dropped_at[k] > op.node else -1
    return n - 1


def _absorbed_attrs(key, ops):
    """``{key: names}`` of absorbed operations, with ``{key}_where`` where the trace recorded
    where they came from (``trace(..., debug=True)``)."""
    a = {key: [op.name for op in ops]}
    if any(op.where is not None for op in ops):
        a[f"{key}_where"] = [_where(op) for op in ops]
    return a


def _where(op):
    return None if op.where is None else list(op.where)


def _attrs(op, hidden, absorbed):
    a = {"op": op.name, "inputs": op.inputs, "outputs": op.outputs, "flops": int(op.flops)}
    a.update(_absorbed_attrs("absorbed", absorbed))
    if op.where is not None:
        a["where"] = list(op.where)
    if op.random:
        a["random"] = True
    if op.mutates:
        a["mutates"] = list(op.mutates)
    if hidden:
        a["hidden"] = hidden
    if op.pin is not None:
        a["pinned"] = op.pin
    return a


def _costs(nodes, cost_model, time_unit, target):
    """Integer costs T_v >= 1 and the unit: FLOPs per unit (a power of ten) or seconds."""
    if cost_model == "profile":
        return ({op.node: max(1, round(op.time / time_unit)) for op in nodes}, None, time_unit)
    cost, unit = flop_costs({op.node: op.flops for op in nodes}, target)
    return cost, unit, None


def flop_costs(flops, target):
    """Integer costs T_v >= 1 from FLOPs, in units of a power of ten of FLOPs chosen so that
    all of them together cost at most about `target` units.

    Parameters
    ----------
    flops : dict of node label to int
        FLOPs per node.
    target : int
        The total cost aimed at (``torch_ext.trace.TARGET_TOTAL_COST``).

    Returns
    -------
    (dict of node label to int, int)
        The costs (cost units) and the FLOPs per unit.
    """
    total = sum(flops.values())
    unit = 10 ** max(0, math.ceil(math.log10(total / target))) if total > target else 1
    return {v: max(1, round(f / unit)) for v, f in flops.items()}, unit
