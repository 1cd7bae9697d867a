"""The liveness-analysis simulation (lowerset.simulate) and solve_liveness.

The executor side (the simulation replays RecomputeHook exactly) is checked in
tests/chainer_ext/test_liveness_executor.py.
"""

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

import lowerset as ls

from strategies import dags, examples
from test_io import _graph_dir


@st.composite
def sequences(draw, g):
    """A random strategy on `g`: nested lower sets, each the predecessor closure of the last one
    plus random nodes."""
    n = g.n
    lower_sets, cur = [], np.zeros(n, dtype=bool)
    while not cur.all():
        add = draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=3))
        nxt = cur.copy()
        stack = [i for i in add if not nxt[i]]
        while stack:  # close under predecessors
            i = stack.pop()
            if nxt[i]:
                continue
            nxt[i] = True
            stack.extend(int(p) for p in g.preds(i) if not nxt[p])
        if nxt.sum() > cur.sum():
            lower_sets.append(nxt)
            cur = nxt
    return ls.CanonicalStrategy(g, lower_sets)


@pytest.mark.parametrize("n", [1, 2, 5, 9])
def test_chain_without_recomputation(n):
    """[V] on a chain of n equal values: all n are held after forward; the backward of node i
    adds the gradient of node i-1 while that of node i is still held: n + 2 values at the peak
    (the loss gets no gradient array, so n + 1 for n = 2 and n for n = 1)."""
    g = ls.Graph.chain(n, memory=10)
    r = ls.simulate(ls.CanonicalStrategy(g, [set(g.labels)]))
    assert r.forward_peak == 10 * n
    assert r.peak == 10 * (n + min(2, n - 1))
    assert r.recomputed == [] and r.recompute_cost == 0
    assert r.final == 10  # the loss


def test_chain_segments_trade_memory_for_recomputation():
    g = ls.Graph.chain(8, memory=10)
    full = ls.simulate(ls.CanonicalStrategy(g, [set(g.labels)]))
    two = ls.simulate(ls.CanonicalStrategy(g, [set(range(4)), set(g.labels)]))
    # forward: segment 1 is dropped but for its boundary node 3
    assert two.forward_peak == 10 * 5
    assert two.recomputed == [0, 1, 2] and two.recompute_cost == 3
    assert two.peak < full.peak


@settings(max_examples=examples(1))
@given(st.data())
def test_invariants_on_random_strategies(data):
    """With the default model (every backward reads its inputs and output):

    - nothing leaks: after backward only the values without successors are held;
    - exactly the dropped values, V_i minus the boundary of L_i (i < k) with successors, are
      recomputed, each once, at the cost of eq. (1) minus the last segment and the sinks;
    - the forward pass of [V] holds M(V); the peaks are ordered.
    """
    g = data.draw(dags(max_nodes=9, max_memory=6))
    s = data.draw(sequences(g))
    r = ls.simulate(s)
    sinks = [i for i in range(g.n) if g.succs(i).size == 0]
    assert r.final == int(g.memory[sinks].sum())
    assert len(set(r.recomputed)) == len(r.recomputed)
    dropped = set(s.recomputed) - set(s.segments[-1]) - {g.labels[i] for i in sinks}
    assert set(r.recomputed) == dropped
    assert r.recompute_cost == sum(int(g.cost[g.index[v]]) for v in dropped) <= s.overhead
    assert r.peak >= r.boundary_peak >= r.forward_peak
    assert r.peak >= r.backward_peak
    full = ls.simulate(ls.CanonicalStrategy(g, [set(g.labels)]))
    assert full.forward_peak == g.total_memory()


def _traced_like(reads_input):
    """x -> a -> b -> c (loss), attributes as chainer_ext.trace writes them. a's backward reads
    its output; nobody's reads x; c's backward reads its input b only if `reads_input`."""
    attrs = {
        "x": {"inputs": [["input", [4], "float32"]], "retained_inputs": [0],
              "retained_outputs": [], "outputs": [[[25], "float32"]], "output_bytes": 100},
        "a": {"inputs": [["node", "x", 0]], "retained_inputs": [], "retained_outputs": [0],
              "outputs": [[[25], "float32"]], "output_bytes": 100},
        "b": {"inputs": [["node", "a", 0]], "retained_inputs": [],
              "retained_outputs": [], "outputs": [[[100], "float32"]], "output_bytes": 400},
        "c": {"inputs": [["node", "b", 0]], "retained_inputs": [0] if reads_input else [],
              "retained_outputs": [],
              "outputs": [[[1], "float32"]], "output_bytes": 4},
    }
    return ls.Graph(list(attrs), [("x", "a"), ("a", "b"), ("b", "c")],
                    cost=dict.fromkeys(attrs, 1),
                    memory={v: a["output_bytes"] for v, a in attrs.items()}, attrs=attrs)


def test_attributes_say_what_backward_reads():
    lean, keeps = _traced_like(False), _traced_like(True)
    V = [set(lean.labels)]
    r_lean = ls.simulate(ls.CanonicalStrategy(lean, V))
    r_keeps = ls.simulate(ls.CanonicalStrategy(keeps, V))
    # x is freed once a has run, b once c has run; a is held for its own backward
    assert r_lean.forward_peak == r_keeps.forward_peak == 504     # a, b and c
    assert r_lean.final == r_keeps.final == 4
    # lean: a, c and the gradients of b and a (b's backward); keeps: a, b, c and b's gradient
    assert (r_lean.peak, r_keeps.peak) == (604, 904)
    conservative = ls.Graph(lean.labels, lean.edges, cost=dict.fromkeys(lean.labels, 1),
                            memory={v: int(lean.memory[lean.index[v]]) for v in lean.labels})
    assert ls.simulate(ls.CanonicalStrategy(conservative, V)).peak >= r_keeps.peak


def test_model_errors():
    g = _traced_like(True)
    g.attrs["c"]["inputs"] = [["node", "a", 0]]  # a is not a predecessor of c
    with pytest.raises(ls.StrategyError, match="not an output of a predecessor"):
        ls.LivenessModel(g)
    with pytest.raises(TypeError, match="CanonicalStrategy"):
        ls.simulate([{"x"}])
    other = ls.Graph.chain(3)
    with pytest.raises(ls.StrategyError, match="another graph"):
        ls.simulate(ls.CanonicalStrategy(other, [set(other.labels)]),
                    ls.LivenessModel(ls.Graph.chain(4)))


@settings(max_examples=examples(0.3))
@given(dags(min_nodes=2, max_nodes=9, max_memory=20))
def test_solve_liveness_is_no_worse_than_the_min_budget_strategies(g):
    best, cands = ls.solve_liveness(g, "exact", return_candidates=True, n_budgets=4)
    assert best.liveness == ls.simulate(best)
    lo = ls.min_budget(g)
    assert best.peak_memory >= lo and best.budget >= lo
    for mode in ("time", "memory"):
        assert best.liveness.peak <= ls.simulate(ls.solve(g, mode=mode)).peak
    assert all(best.liveness.peak <= r.peak for _, r in cands)
    keys = [tuple(map(frozenset, s.lower_sets)) for s, _ in cands]
    assert len(keys) == len(set(keys))
    approx = ls.solve_liveness(g, "approx", n_budgets=4)
    assert best.liveness.peak <= approx.liveness.peak


def test_solve_liveness_beats_min_budget_on_a_chain():
    """On a chain, eq. (2) makes the minimal budget cut it finely; under liveness analysis a
    coarser strategy (found at a larger budget) has a lower peak."""
    g = ls.Graph.chain(30, memory=10)
    best = ls.solve_liveness(g, "exact")
    at_min = min(ls.simulate(ls.solve(g, mode=m)).peak for m in ("time", "memory"))
    assert best.liveness.peak < at_min


def test_solve_liveness_errors():
    g = ls.Graph.chain(5, memory=10)
    for bad in ({"modes": ()}, {"modes": ("fast",)}, {"n_budgets": 0}, {"n_budgets": True},
                {"max_budget": 0}):
        with pytest.raises(ValueError):
            ls.solve_liveness(g, **bad)
    with pytest.raises(ls.InfeasibleBudgetError) as e:
        ls.solve_liveness(g, max_budget=ls.min_budget(g) - 1)
    assert e.value.min_budget == ls.min_budget(g)
    s = ls.solve_liveness(g, max_budget=ls.min_budget(g))
    assert s.peak_memory == ls.min_budget(g)


@pytest.mark.parametrize("name", ["resnet50", "unet", "vgg19", "densenet"])
def test_cg_graphs(name):
    """The authors' graphs (no executor attributes: the conservative model) plan and simulate;
    the chosen strategy's simulated peak is below that of the minimal-budget strategies."""
    path = _graph_dir() / f"cg_{name}.txt"
    if not path.exists():
        pytest.skip(f"{path} not found; set LOWERSET_GRAPHS to the folder of the cg_*.txt files")
    cg_graph = ls.read_cg(path)
    s = ls.solve_liveness(cg_graph, "approx", n_budgets=4, refine=False)
    assert 0 < s.liveness.peak <= ls.simulate(ls.solve(cg_graph, mode="time",
                                                      method="approx")).peak
    assert s.liveness.final == int(cg_graph.memory[[i for i in range(cg_graph.n)
                                                    if cg_graph.succs(i).size == 0]].sum())
