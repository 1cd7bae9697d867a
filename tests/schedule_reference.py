"""A naive statement of the schedule (lowerset.scheduling), the test oracle for its kernels.

The same policy, written plainly in Python with dicts and sets over the facts, independently of
``lowerset._schedule_kernels``: compute events, liveness analysis (every array freed after its
last read), and a buffer-counting memory fold. ``events(plan)`` returns ``(events, timeline,
highs)`` with events as ``lowerset.Event`` tuples.
"""

import numpy as np

import lowerset
from lowerset import Event


def events(plan):
    """(events, timeline, highs) of `plan` (a CanonicalStrategy or a DropSetStrategy, or a
    Graph for the plain step)."""
    if isinstance(plan, (lowerset.CanonicalStrategy, lowerset.DropSetStrategy)):
        g, evs = plan.graph, _hooked_events(plan)
    else:
        g, evs = plan, _plain_events(plan)
    timeline, highs = _fold(g, evs)
    return evs, timeline, highs


# -- pass 1: compute events ----------------------------------------------------------------------


def _dropped(strategy):
    """Bool per node id: the strategy drops the node's outputs after the forward pass (the
    segments but the last, minus the boundaries, returned outputs, pinned nodes and nodes
    without consumers)."""
    g, F = strategy.graph, strategy.graph.facts
    keep = np.zeros(g.n, dtype=bool)
    keep[strategy._segment_masks[-1]] = True
    seg = {}
    for i, m in enumerate(strategy._segment_masks):
        for v in np.flatnonzero(m):
            seg[int(v)] = i
    for w, nf in enumerate(F.nodes):  # a node with a successor in a later segment is on a
        for s in [s for s, _ in nf.args] + list(nf.after):  # boundary (an `after` edge too)
            if s >= 0 and seg[w] > seg[s]:
                keep[s] = True
    for v, _ in F.returned:
        keep[v] = True
    for v, nf in enumerate(F.nodes):
        keep[v] |= nf.pinned
    has_consumer = np.zeros(g.n, dtype=bool)
    for nf in F.nodes:
        for s, _ in nf.args:
            if s >= 0:
                has_consumer[s] = True
    dropped = ~keep & has_consumer
    changed = True
    while changed:  # an in-place function and the views it writes through, down to the
        changed = False  # buffer's owner: all or none
        for w, nf in enumerate(F.nodes):
            for p in nf.output_views if nf.inplace else ():
                for u in _written_chain(F, nf, p):
                    if dropped[w] != dropped[u]:
                        dropped[w] = dropped[u] = False
                        changed = True
    return dropped


def _written_chain(F, nf, p):
    """The nodes whose memory an in-place write through argument `p` of `nf` changes: the
    argument's node, then the node each is a view of, up to the owner of the buffer."""
    chain = []
    src = nf.args[p] if p >= 0 else (-1, 0)
    while src[0] >= 0:
        chain.append(src[0])
        views = F.nodes[src[0]].output_views
        q = views[src[1]] if src[1] < len(views) else -1
        src = F.nodes[src[0]].args[q] if q >= 0 else (-1, 0)
    return chain


def _compute_events(g, dropped):
    """Pass 1: the ("forward"|"recompute"|"backward", node id) sequence of a hooked step."""
    F = g.facts
    fpos = _forward_positions(F)
    out = [("forward", v) for v in F.forward_order]
    missing = dropped.copy()  # dropped and not recomputed yet
    for j in F.backward_order:
        nf = F.nodes[j]
        need = []
        if missing[j] and (nf.reads_outputs or (nf.state and not nf.stochastic)):
            need.append(j)
        need += [nf.args[p][0] for p in nf.reads_args if nf.args[p][0] >= 0
                 and missing[nf.args[p][0]]]
        todo, stack = set(), need
        while stack:  # the dropped values needed, and the dropped inputs to recompute them
            v = stack.pop()
            if v not in todo:
                todo.add(v)
                stack.extend(s for s, _ in F.nodes[v].args if s >= 0 and missing[s])
        for v in sorted(todo, key=fpos.__getitem__):
            out.append(("recompute", v))
            missing[v] = False
        out.append(("backward", j))
    return out


def _reads(F, kind, v):
    """Arrays read by a compute event: ("value", node, k) and ("state", node, 0) keys."""
    nf = F.nodes[v]
    if kind == "backward":
        r = [("value", s, k) for s, k in (nf.args[p] for p in nf.reads_args) if s >= 0]
        r += [("value", v, k) for k in nf.reads_outputs]
        if nf.state:
            r.append(("state", v, 0))
        return r
    r = [("value", s, k) for s, k in nf.args if s >= 0]
    if kind == "recompute" and nf.stochastic and nf.state:
        r.append(("state", v, 0))
    return r


def _writes(F, kind, v):
    """Arrays a compute event makes."""
    if kind == "backward":
        return []
    nf = F.nodes[v]
    w = [("value", v, k) for k in range(len(nf.outputs))]
    if nf.state and not (kind == "recompute" and nf.stochastic):
        w.append(("state", v, 0))
    return w


# -- pass 2: liveness ----------------------------------------------------------------------------


def _hooked_events(strategy):
    g = strategy.graph
    F = g.facts
    dropped = (strategy.dropped_mask() if isinstance(strategy, lowerset.DropSetStrategy)
               else _dropped(strategy))
    compute = _compute_events(g, dropped)
    returned = {("value", v, k) for v, k in F.returned}
    # last read of each materialization: key -> [start index, last index]
    live, ends = {}, [[] for _ in compute]
    for e, (kind, v) in enumerate(compute):
        for key in _reads(F, kind, v):
            live[key][1] = max(live[key][1], e)
        for key in _writes(F, kind, v):
            if key in live:
                _close(live.pop(key), key, ends)
            live[key] = [e, max(e, _held_until(F, kind, key))]
    for key, span in live.items():
        if key not in returned:
            _close(span, key, ends)
    out = []
    seeds_at = max(i for i, (kind, _) in enumerate(compute) if kind == "forward")
    fpos = _forward_positions(F)
    for e, (kind, v) in enumerate(compute):
        out.append(_compute_event(g, kind, v))
        if e == seeds_at:
            out.extend(_seed_events(g))
        if kind == "backward":
            out.extend(_grad_free_events(g, v))
        if ends[e]:
            out.extend(_free_events(g, ends[e], compute, dropped, fpos))
    return out


def _held_until(F, kind, key):
    """The forward position (= compute event index: the forward events come first) until
    which the step's code holds the forward copy of a value, or -1."""
    what, v, k = key
    held = F.nodes[v].held_until
    if kind != "forward" or what != "value" or not held:
        return -1
    return held[k]


def _forward_positions(F):
    fpos = np.empty(len(F.forward_order), dtype=np.int64)
    fpos[list(F.forward_order)] = np.arange(len(F.forward_order))
    return fpos


def _close(span, key, ends):
    ends[span[1]].append((key, span[0]))


def _free_events(g, closed, compute, dropped, fpos):
    """Free events for the arrays whose last read is one event: states first, then values,
    grouped per node in forward order."""
    F = g.facts
    states = sorted((v for (what, v, _), _ in closed if what == "state"), key=fpos.__getitem__)
    out = [Event("free_state", g.labels[v], F.nodes[v].state, ()) for v in states]
    per_node = {}
    for (what, v, k), start in closed:
        if what == "value":
            forward_copy = compute[start][0] == "forward"
            kind = "drop" if forward_copy and dropped[v] else "free_value"
            per_node.setdefault((v, kind), []).append(k)
    for (v, kind) in sorted(per_node, key=lambda x: (fpos[x[0]], x[1] == "free_value")):
        ks = tuple(sorted(per_node[v, kind]))
        out.append(Event(kind, g.labels[v], sum(F.nodes[v].outputs[k] for k in ks), ks))
    return out


def _compute_event(g, kind, v):
    nf = g.facts.nodes[v]
    if kind == "backward":
        ks = _grad_outputs(g)[v]
        return Event(kind, g.labels[v], sum(nf.outputs[k] for k in ks), ())
    made = sum(nf.outputs)
    if nf.state and not (kind == "recompute" and nf.stochastic):
        made += nf.state
    return Event(kind, g.labels[v], made, tuple(range(len(nf.outputs))))


def _seed_events(g):
    F = g.facts
    return [Event("seed_grad", g.labels[v], F.nodes[v].outputs[k], (k,))
            for v, k in sorted(F.seeds)]


def _grad_free_events(g, v):
    ks = _grad_outputs(g)[v]
    if not ks:
        return []
    nf = g.facts.nodes[v]
    return [Event("free_grad", g.labels[v], sum(nf.outputs[k] for k in ks), ())]


def _grad_outputs(g):
    """Per node id: the output indexes that receive a gradient (seeds, or a consumer whose
    backward runs and returns one), sorted. Cached on the graph."""
    cache = g.__dict__.get("_grad_outputs")
    if cache is None:
        F = g.facts
        has = [set() for _ in range(g.n)]
        for v, k in F.seeds:
            has[v].add(k)
        for w in F.backward_order:
            nf = F.nodes[w]
            for (s, k), gives in zip(nf.args, nf.grad_args):
                if s >= 0 and gives:
                    has[s].add(k)
        cache = g.__dict__["_grad_outputs"] = [tuple(sorted(h)) for h in has]
    return cache


def _plain_events(g):
    """The plain step: forward in order (values freed where the recorded run freed them), the
    backward pass, gradients freed after each backward."""
    F = g.facts
    frees = [[] for _ in range(g.n)]  # forward position -> (node, k) freed after it
    for v, nf in enumerate(F.nodes):
        for k, q in enumerate(nf.plain_free_after):
            if q >= 0:
                frees[q].append((v, k))
    out = []
    fpos = _forward_positions(F)
    for q, v in enumerate(F.forward_order):
        out.append(_compute_event(g, "forward", v))
        if q == g.n - 1:
            out.extend(_seed_events(g))
        per_node = {}
        for u, k in frees[q]:
            per_node.setdefault(u, []).append(k)
        for u in sorted(per_node, key=fpos.__getitem__):
            ks = tuple(sorted(per_node[u]))
            out.append(Event("free_value", g.labels[u], sum(F.nodes[u].outputs[k] for k in ks),
                             ks))
    bfrees = {}  # backward position -> (node, k) freed after it
    for v, nf in enumerate(F.nodes):
        for k, q in enumerate(nf.plain_free_in_backward):
            if q >= 0:
                bfrees.setdefault(q, []).append((v, k))
    for q, j in enumerate(F.backward_order):
        out.append(_compute_event(g, "backward", j))
        out.extend(_grad_free_events(g, j))
        per_node = {}
        for u, k in bfrees.get(q, []):
            per_node.setdefault(u, []).append(k)
        for u in sorted(per_node, key=fpos.__getitem__):
            ks = tuple(sorted(per_node[u]))
            out.append(Event("free_value", g.labels[u], sum(F.nodes[u].outputs[k] for k in ks),
                             ks))
    return out


# -- pass 3: memory fold -------------------------------------------------------------------------


class _Buffers:
    """Reference-counted buffers: bytes are in use while any array refers to its buffer."""

    def __init__(self):
        self.size, self.refs = [], []
        self.used = 0

    def new(self, nbytes):
        self.size.append(int(nbytes))
        self.refs.append(1)
        self.used += int(nbytes)
        return len(self.size) - 1

    def ref(self, b):
        if b is not None:
            self.refs[b] += 1
        return b

    def unref(self, b):
        if b is None:
            return
        self.refs[b] -= 1
        if self.refs[b] == 0:
            self.used -= self.size[b]


def _fold(g, events):
    F = g.facts
    mem = _Buffers()
    val, state = {}, {}          # (node, k) -> buffer; node -> buffer
    pending = _grads_at_start(g, mem)  # gradient target -> buffer: ("n", node, k), ("e", ext)
    popped = {}                  # node -> {k: buffer} of the output gradients being used
    grad_outputs = _grad_outputs(g)
    timeline = np.zeros(len(events), dtype=np.int64)
    highs = np.zeros(len(events), dtype=np.int64)
    made_before, freed_after, ext = {}, {}, {}   # arrays made in the step outside the graph
    for e, (m, q) in enumerate(zip(F.external_made, F.external_free_after)):
        if m >= 0:
            made_before.setdefault(F.forward_order[m], []).append(e)
        if q >= 0:
            freed_after.setdefault(F.forward_order[q], []).append(e)
    for i, ev in enumerate(events):
        v = g.index[ev.node]
        nf = F.nodes[v]
        if ev.kind == "forward":
            for e in made_before.get(v, ()):
                ext[e] = mem.new(F.externals[e][1])
        before = mem.used
        extra = 0
        if ev.kind in ("forward", "recompute"):
            for k, p in enumerate(nf.output_views):
                if p >= 0:
                    s, sk = nf.args[p]
                    val[v, k] = mem.ref(val.get((s, sk))) if s >= 0 else None
                else:
                    val[v, k] = mem.new(nf.outputs[k])
            if nf.state and not (ev.kind == "recompute" and nf.stochastic):
                state[v] = mem.new(nf.state)
            extra = max(0, nf.forward_peak - (mem.used - before))
            if ev.kind == "forward" and freed_after.get(v):
                top = mem.used + extra
                for e in freed_after[v]:
                    mem.unref(ext.pop(e))
                extra = top - mem.used
        elif ev.kind in ("drop", "free_value"):
            for k in ev.outputs:
                mem.unref(val.pop((v, k)))
        elif ev.kind == "free_state":
            mem.unref(state.pop(v))
        elif ev.kind == "seed_grad":  # held by the caller too, for the whole step
            pending["n", v, ev.outputs[0]] = mem.ref(mem.new(ev.bytes))
        elif ev.kind == "backward":
            popped[v] = {k: pending.pop(("n", v, k)) for k in grad_outputs[v]}
            high = _backward_grads(F, v, nf, mem, pending, popped[v])
            extra = max(0, nf.backward_peak - (high - before)) + (high - mem.used)
        elif ev.kind == "free_grad":
            for b in popped.pop(v).values():
                mem.unref(b)
        timeline[i] = mem.used
        highs[i] = mem.used + extra
    return timeline + F.resident, highs + F.resident


def _grads_at_start(g, mem):
    """The pending gradients when the step starts (``F.grads_at_start``), made in `mem` but not
    counted in its bytes in use (they are resident). With grad_sum "new" each is its target's
    pending gradient; with "inplace" it waits under the key ("start", ext) as [buffer, the
    gradients still to arrive for it in the backward pass], and takes in the pending sum after
    the last (:func:`_sum_inplace`)."""
    F = g.facts
    pending = {}
    for e in F.grads_at_start:
        b = mem.new(F.external_size(e))
        if F.grad_sum == "new":
            pending["e", e] = b
            continue
        arrivals = sum(1 for w in F.backward_order
                       for (s, _), gives in zip(F.nodes[w].args, F.nodes[w].grad_args)
                       if gives and s < 0 and F.external_target(~s) == e)
        pending["start", e] = [b, arrivals]
    mem.used = 0
    return pending


def _backward_grads(F, v, nf, mem, pending, gy):
    """Allocate node v's input gradients and sum them into the pending ones (in argument
    order, as Chainer's backprop_step does); return the highest bytes in use meanwhile."""
    order, new, flat = [], {}, []
    for p, ((s, k), gives) in enumerate(zip(nf.args, nf.grad_args)):
        if not gives:
            continue
        target = ("n", s, k) if s >= 0 else ("e", F.external_target(~s))
        size = F.nodes[s].outputs[k] if s >= 0 else F.external_size(~s)
        view = nf.grad_views[p]
        made = nf.grad_sizes[p] if nf.grad_sizes else size   # a broadcast: fewer bytes
        b = mem.ref(gy.get(view)) if view >= 0 and gy.get(view) is not None else mem.new(made)
        if target not in new:
            order.append((target, size))
            new[target] = []
        new[target].append(b)
        flat.append((target, size, b))
    high = mem.used
    if F.grad_sum == "inplace":
        return _sum_inplace(mem, pending, gy, flat, high)
    for target, size in order:
        arrays = ([pending[target]] if target in pending else []) + new[target]
        if len(arrays) == 1:
            pending[target] = arrays[0]
            continue
        pending[target] = mem.new(size)
        high = max(high, mem.used)
        for b in arrays:
            mem.unref(b)
    return high


def _sum_inplace(mem, pending, gy, flat, high):
    """PyTorch's sums: the output gradients are released, then each argument's gradient, in
    argument order, joins its target: added into the pending one if nothing else refers to its
    buffer, else the pending one into it if nothing else refers to that, else both into a new
    array. Then each parameter whose gradient existed at the start and whose last gradient
    has arrived adds the pending one into that (released: AccumulateGrad's in-place add)."""
    for k in list(gy):
        mem.unref(gy.pop(k))
    for target, _, _ in flat:
        if target[0] == "e" and ("start", target[1]) in pending:
            pending["start", target[1]][1] -= 1
    for target, size, b in flat:
        old = pending.get(target)
        if old is None:
            pending[target] = b
        elif mem.refs[old] == 1:
            mem.unref(b)
        elif mem.refs[b] == 1:
            mem.unref(old)
            pending[target] = b
        else:
            pending[target] = mem.new(size)
            high = max(high, mem.used)
            mem.unref(old)
            mem.unref(b)
    for target, _, _ in flat:
        start = pending.get(("start", target[1])) if target[0] == "e" else None
        if start is not None and start[1] == 0:
            mem.unref(pending[target])
            pending[target] = pending.pop(("start", target[1]))[0]
    return high
