"""Fixtures and graphs shared by the tests: the authors' published graphs, a wide fan."""

import os
from pathlib import Path

import pytest

import lowerset as ls

#: The seven graphs the paper's authors published (cg_<name>.txt).
CG_NAMES = ("vgg19", "unet", "resnet50", "googlenet", "pspnet", "resnet152", "densenet")


def graphs_dir():
    """The folder of the authors' cg_*.txt files: $LOWERSET_GRAPHS, else ../shared/graphs."""
    env = os.environ.get("LOWERSET_GRAPHS")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "shared" / "graphs"


@pytest.fixture(scope="session", params=CG_NAMES)
def cg_graph(request):
    """Each authors' graph, read once per session (skipped with the reason when absent)."""
    path = graphs_dir() / f"cg_{request.param}.txt"
    if not path.is_file():
        pytest.skip(f"authors' graph {path} not found; set LOWERSET_GRAPHS to the folder of "
                    "the cg_*.txt files")
    return ls.read_cg(path)


def fan(width):
    """A source, `width` parallel nodes and a sink, 10 bytes each: 2**width + 2 lower sets."""
    n = width + 2
    edges = [(0, v) for v in range(1, n - 1)] + [(v, n - 1) for v in range(1, n - 1)]
    return ls.Graph(list(range(n)), edges, dict.fromkeys(range(n), 1), dict.fromkeys(range(n), 10))


def contracted_family_by_definition(g):
    """The lower sets of `g` in which a node of no memory with one predecessor is in the set
    exactly when that predecessor is, and every isolated node exactly when the first one is
    (networkx), and the pruned sets."""
    import networkx as nx

    from lowerset.bruteforce import subset_lower_sets

    G = g.to_networkx()
    tied = [(v, next(iter(G.predecessors(v)))) for v in g.labels
            if g.memory[g.index[v]] == 0 and G.in_degree(v) == 1]
    isolated = [v for v in g.labels if G.degree(v) == 0]
    tied += [(v, isolated[0]) for v in isolated[1:]]
    whole = {L for L in subset_lower_sets(g) if all((v in L) == (u in L) for v, u in tied)}
    pruned = {frozenset(nx.ancestors(G, v) | {v}) for v in g.labels}
    return whole | pruned | {frozenset(g.labels)}


def ordered_family_by_definition(g):
    """The ordered family from its definition, with networkx: ∅, V, every L_v (the node and
    its ancestors), and the prefixes of two orders, the graph's (its labels) and networkx's
    topological generations, each generation in the graph's order."""
    import networkx as nx

    G = g.to_networkx()
    pruned = {frozenset(nx.ancestors(G, v) | {v}) for v in g.labels}
    generations = [v for gen in nx.topological_generations(G)
                   for v in sorted(gen, key=g.index.__getitem__)]
    prefixes = {frozenset(order[:i]) for order in (list(g.labels), generations)
                for i in range(g.n + 1)}
    return pruned | prefixes
