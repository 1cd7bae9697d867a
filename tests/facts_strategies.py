"""Hypothesis strategies: graphs with random execution facts, and random canonical strategies.

``graphs_with_facts`` draws what ``chainer_ext.trace`` could record and more: functions with one
to three outputs, arguments that name a given output of a predecessor (several arguments may
name the same one), parameters and inputs, backward passes that read any subset of their
arguments and outputs or none, arguments that get no gradient, outputs and gradients that are
views, external arrays that are views of others (their gradients summed into the base's),
edges that carry no array, in-place writes, arrays the step's code holds past their last use,
gradients smaller than their arrays (broadcasts), external arrays made and freed during the
step (with ``made_externals=True``), parameters whose gradient exists when the step starts
(gradient accumulation), saved state (stochastic or not), pinned nodes, workspace peaks,
plain-run frees in either pass, a random subset of nodes whose backward runs (in a random order
with consumers first), several returned outputs, either way of summing gradients.
Nodes are listed in forward order.
"""

import dataclasses

import hypothesis.strategies as st

import lowerset as ls


@st.composite
def graphs_with_facts(draw, min_nodes=1, max_nodes=8, max_bytes=40, made_externals=False,
                      grads_at_start=None):
    """Draw a :class:`lowerset.Graph` whose nodes 0..n-1 carry random :class:`ExecutionFacts`;
    with `made_externals`, some external arrays are made and freed during the step
    (``external_made``, ``external_free_after``); `grads_at_start` None: some parameters'
    gradients exist at the start, sometimes; True: wherever a parameter can have one."""
    n = draw(st.integers(min_nodes, max_nodes), label="n")
    # with grads_at_start=True, external 0 is a parameter: most graphs then have one that can
    # hold a gradient at the start (made before the step), which the tests assume
    n_ext = draw(st.integers(1 if grads_at_start else 0, 3), label="externals")
    kinds = [("param",) if grads_at_start and e == 0 else ls.EXTERNAL_KINDS
             for e in range(n_ext)]
    externals = tuple((draw(st.sampled_from(k)), draw(st.integers(0, max_bytes))) for k in kinds)
    outs = [tuple(draw(st.lists(st.integers(0, max_bytes), min_size=1, max_size=3)))
            for _ in range(n)]
    args, edges = [], set()
    for v in range(n):
        a = []
        for u in range(v):
            if draw(st.booleans(), label=f"edge {u}->{v}"):
                ks = draw(st.lists(st.integers(0, len(outs[u]) - 1), min_size=1, max_size=2))
                a += [(u, k) for k in ks]
                edges.add((u, v))
        if n_ext:
            a += [(~e, 0) for e in draw(st.lists(st.integers(0, n_ext - 1), max_size=2))]
        a = draw(st.permutations(a)) if a else []
        args.append(tuple(a))
    after = []   # edges that carry no array
    for v in range(n):
        free = [u for u in range(v) if (u, v) not in edges]
        after.append(tuple(u for u in free if draw(st.integers(0, 4), label=f"after {u}->{v}")
                           == 0))
        edges.update((u, v) for u in after[v])
    runs = draw(st.lists(st.booleans(), min_size=n, max_size=n), label="backward runs")
    data = {(s, v) for v in range(n) for s, _ in args[v] if s >= 0}
    bwd = _reverse_topological(draw, n, data, [v for v in range(n) if runs[v]])
    bpos = {v: q for q, v in enumerate(bwd)}
    nodes = []
    for v in range(n):
        m = len(args[v])
        views = tuple(draw(st.sampled_from([-1, -1] + list(range(m)))) for _ in outs[v])
        consumers_pos = [w for w in range(n) if any(s == v for s, _ in args[w])]
        last = max([v] + consumers_pos)
        freed = tuple(draw(st.sampled_from([-1] + list(range(last, n)))) for _ in outs[v])
        nodes.append(ls.NodeFacts(
            outputs=outs[v], args=args[v],
            state=draw(st.sampled_from([0, 0, 3, 17])),
            reads_args=tuple(p for p in range(m) if draw(st.booleans())),
            reads_outputs=tuple(k for k in range(len(outs[v])) if draw(st.booleans())),
            grad_args=tuple(draw(st.booleans()) for _ in range(m)),
            output_views=views,
            grad_views=tuple(draw(st.sampled_from([-1, -1] + list(range(len(outs[v])))))
                             for _ in range(m)),
            forward_peak=draw(st.sampled_from([0, 0, 50, 120])),
            backward_peak=draw(st.sampled_from([0, 0, 50, 120])),
            stochastic=draw(st.booleans()),
            pinned=draw(st.sampled_from([False, False, False, True])),
            plain_free_after=freed,
            inplace=any(p >= 0 for p in views) and draw(st.booleans()),
            plain_free_in_backward=draw(_backward_frees(freed, v, args, bpos)),
            after=after[v],
            held_until=draw(st.one_of(st.just(()), st.tuples(
                *[st.sampled_from([-1] + list(range(v, n))) for _ in outs[v]]))),
            grad_sizes=draw(st.one_of(st.just(()), st.tuples(
                *[st.integers(0, max_bytes) for _ in range(m)])))))
    made, freed = (), ()
    if made_externals and n_ext:
        made, freed = draw(_external_lifetimes(n, n_ext, args))
    sinks = [v for v in range(n) if not any(u == v for u, _ in edges)]
    returned = tuple((v, k) for v in sinks for k in range(len(outs[v])) if draw(st.booleans()))
    seeds = tuple(o for o in returned if draw(st.booleans()))
    facts = ls.ExecutionFacts(nodes=tuple(nodes), forward_order=tuple(range(n)),
                              backward_order=bwd, externals=externals, returned=returned,
                              seeds=seeds, grad_sum=draw(st.sampled_from(ls.GRAD_SUMS)),
                              external_sizes=draw(st.one_of(st.just(()), st.tuples(
                                  *[st.integers(0, max_bytes) for _ in externals]))),
                              external_bases=draw(st.one_of(st.just(()), st.tuples(
                                  *[st.sampled_from([-1] + list(range(e)))
                                    for e in range(n_ext)]))),
                              external_made=made, external_free_after=freed)
    facts = dataclasses.replace(facts, grads_at_start=draw(_grads_at_start(facts,
                                                                         grads_at_start)))
    cost = {v: draw(st.integers(1, 5)) for v in range(n)}
    memory = {v: sum(outs[v]) + nodes[v].state for v in range(n)}
    return ls.Graph(list(range(n)), sorted(edges), cost, memory, facts=facts)


def _grads_at_start(facts, always):
    """``grads_at_start``: empty, or a subset of the parameters made before the step that are
    their own gradient targets (gradient accumulation), not empty where `always` is True."""
    made = facts.external_made or (-1,) * len(facts.externals)
    able = [e for e, (kind, _) in enumerate(facts.externals)
            if kind == "param" and made[e] < 0 and facts.external_target(e) == e]
    if not able:
        return st.just(())
    some = st.lists(st.sampled_from(able), min_size=1, unique=True).map(tuple)
    return some if always else st.one_of(st.just(()), some)


def _backward_frees(freed, v, args, bpos):
    """``plain_free_in_backward`` of node `v`: empty, or per output -1 (always for an output
    the forward pass frees, `freed`) or a backward position no earlier than the backward of `v`
    and of its consumers that run."""
    after = [bpos[w] for w in [v] + [w for w, a in enumerate(args) if any(s == v for s, _ in a)]
             if w in bpos]
    first = max(after, default=0)
    positions = [-1] + list(range(first, len(bpos)))
    return st.one_of(st.just(()), st.tuples(*[st.sampled_from(positions if q < 0 else [-1])
                                              for q in freed]))


@st.composite
def _external_lifetimes(draw, n, n_ext, args):
    """``(external_made, external_free_after)``: each external made before the step (-1) or
    at a forward position no later than its first reader, and freed at the end (-1) or after
    a position from its last reader (or its making) on."""
    made, freed = [], []
    for e in range(n_ext):
        readers = [v for v in range(n) if any(s == ~e for s, _ in args[v])]
        m = draw(st.sampled_from([-1] + list(range(min(readers, default=n - 1) + 1))),
                 label=f"external {e} made")
        made.append(m)
        first = max([m] + readers)
        freed.append(-1 if m < 0 else draw(st.sampled_from([-1] + list(range(first, n))),
                                           label=f"external {e} freed"))
    return tuple(made), tuple(freed)


def _reverse_topological(draw, n, edges, subset):
    """A random order of `subset` with every consumer before its producer."""
    left = set(subset)
    order = []
    while left:
        ready = sorted(v for v in left if not any((v, w) in edges and w in left for w in left))
        v = draw(st.sampled_from(ready))
        order.append(v)
        left.remove(v)
    return tuple(order)


@st.composite
def canonical_strategies(draw, g):
    """A random lower-set sequence of `g`: cuts of a random linear extension."""
    order, left = [], set(range(g.n))
    while left:
        ready = sorted(v for v in left if all(int(p) not in left for p in g.preds(v)))
        v = draw(st.sampled_from(ready))
        order.append(v)
        left.remove(v)
    cuts = sorted(set(draw(st.lists(st.integers(1, g.n - 1), max_size=4)))) if g.n > 1 else []
    cuts.append(g.n)
    return ls.CanonicalStrategy(g, [{g.labels[v] for v in order[:c]} for c in cuts])
