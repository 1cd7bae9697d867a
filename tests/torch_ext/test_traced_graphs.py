"""examples/traced_graphs.py and bench_scale's family "gpt": the traced GPT-like stack's size
per layer, fresh graphs per call, and one benchmark row on it."""

import pytest

pytest.importorskip("torch")

import lowerset as ls  # noqa: E402
from examples import bench_scale as bs  # noqa: E402
from examples import traced_graphs as tg  # noqa: E402


def test_each_layer_adds_its_nodes_and_sized_inverts_the_count():
    one, two = tg.gpt(1), tg.gpt(2)
    assert one.n == tg.FIXED_NODES + tg.NODES_PER_LAYER
    assert two.n - one.n == tg.NODES_PER_LAYER
    layers, g = tg.sized(two.n)
    assert layers == 2 and g.n == two.n
    assert tg.sized(1)[0] == 1
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


def test_a_benchmark_row_on_the_traced_stack():
    row = bs.bench("gpt", tg.FIXED_NODES + tg.NODES_PER_LAYER, None, "approx")
    assert row["family"] == "gpt" and row["depth"] == 1 and row["complete"]
    c = row["calls"]
    assert c["min_peak"]["peak"] <= c["solve_half"]["peak"] <= c["solve_half"]["budget"]
    assert c["solve_half"]["budget"] < row["plain"]
    assert bs.default_sizes("gpt") == tuple(tg.FIXED_NODES + tg.NODES_PER_LAYER * n
                                            for n in (6, 12, 24, 48))
