"""examples/traced_graphs.py and bench_scale's traced families: the stacks' sizes per layer,
fresh graphs per call, the contraction of their memoryless nodes, and one benchmark row."""

import numpy as np
import pytest

pytest.importorskip("torch")

import lowerset as ls  # noqa: E402
from examples import bench_scale as bs  # noqa: E402
from examples import traced_graphs as tg  # noqa: E402


@pytest.mark.parametrize("stack", tg.STACKS)
def test_each_layer_adds_its_nodes_and_sized_inverts_the_count(stack):
    one, two = tg.traced(stack, 1), tg.traced(stack, 2)
    assert one.n == tg.FIXED_NODES[stack] + tg.NODES_PER_LAYER[stack]
    assert two.n - one.n == tg.NODES_PER_LAYER[stack]
    layers, g = tg.sized(two.n, stack)
    assert layers == 2 and g.n == two.n
    assert tg.sized(1, stack)[0] == 1
    # the trace's execution facts come along: the step holds parameters and their gradients
    assert two.has_facts and ls.schedule(two).peak > ls.schedule(two.with_facts(
        ls.activation_facts(two.facts))).peak


def test_every_call_gets_a_graph_without_the_planners_results():
    first = tg.gpt(1)
    ls.pareto(first, "approx", progress=False)
    assert "_pareto_cache" in first.__dict__
    again = tg.gpt(1)
    assert again is not first and "_pareto_cache" not in again.__dict__
    assert again.matches(first) and again.facts == first.facts
    with pytest.raises(ValueError, match="at least 1"):
        tg.gpt(0)
    with pytest.raises(ValueError, match="unknown stack"):
        tg.traced("bert", 1)


@pytest.mark.parametrize("stack, most", [("gpt", 180), ("llama", 1650)])
def test_the_contracted_family_of_a_layer(stack, most):
    """The views and in-place outputs of a traced layer join the node they read: the
    default's family grows by at most `most` lower sets a layer (GPT-like 162 with the pruned
    sets, LLaMA-style about 1,600, against 1,450 and 10,334 of all lower sets), and "auto"
    searches it."""
    one, two = tg.traced(stack, 1), tg.traced(stack, 2)
    per_layer = len(ls.contracted_lower_sets(two)) - len(ls.contracted_lower_sets(one))
    assert per_layer <= most
    assert ls.count_lower_sets(two) - ls.count_lower_sets(one) > 5 * per_layer
    assert ls.resolve_method(two, "auto") == "contracted"
    group, _ = ls.lowersets.contraction(two)
    views = [v for v in range(two.n) if two.memory[v] == 0 and len(set(two.preds(v))) == 1]
    assert views and all(group[v] != v for v in views)
    assert np.all(two.memory[group != np.arange(two.n)] == 0)


def test_a_benchmark_row_on_the_traced_stack():
    row = bs.bench("gpt", tg.FIXED_NODES["gpt"] + tg.NODES_PER_LAYER["gpt"], None, "approx")
    assert row["family"] == "gpt" and row["depth"] == 1 and row["complete"]
    c = row["calls"]
    assert c["min_peak"]["peak"] <= c["solve_half"]["peak"] <= c["solve_half"]["budget"]
    assert c["solve_half"]["budget"] < row["plain"]
    for stack in tg.STACKS:
        assert bs.default_sizes(stack) == tuple(
            tg.FIXED_NODES[stack] + tg.NODES_PER_LAYER[stack] * n for n in bs.DEPTHS[stack])
