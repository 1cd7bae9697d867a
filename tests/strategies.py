"""Hypothesis strategies for the planner tests: random DAGs with small integer costs and memory.

Modelled on pckroon/hypothesis-networkx ``hypothesis_networkx/strategy.py``: one ``@st.composite``
builder that raises ``ValueError`` on impossible ranges. DAGs are made without rejection: edges go
only from i to j with i < j, then the nodes are relabelled by a random permutation so the input
is not already in topological order. Costs T_v in 1..3 and memories M_v in 0..4 bytes are small so
that ties between strategies occur.

Shrinking: the edges (i, i+1) are drawn as "missing?" flags and every other edge as "present?"
flags, so a failing example shrinks toward the path 0 -> 1 -> ... -> n-1 with costs 1 and memory
0, relabelled by the identity; fewer nodes shrink first.
"""

import warnings

import hypothesis.strategies as st

import lowerset as ls


@st.composite
def dags(draw, min_nodes=1, max_nodes=7, max_cost=3, max_memory=4, labels="int"):
    """Draw a :class:`lowerset.Graph` with ``min_nodes..max_nodes`` nodes.

    Parameters
    ----------
    min_nodes, max_nodes : int
        Node count range, ``1 <= min_nodes <= max_nodes``.
    max_cost : int
        T_v is drawn in ``1..max_cost`` (>= 1).
    max_memory : int
        M_v is drawn in ``0..max_memory`` bytes (>= 0).
    labels : {"int", "str"}
        Node labels: the integers of a random permutation, or ``"v<int>"`` strings.

    Raises
    ------
    ValueError
        On an impossible range.
    """
    if min_nodes < 1 or max_nodes < min_nodes:
        raise ValueError(f"need 1 <= min_nodes <= max_nodes, got {min_nodes}, {max_nodes}")
    if max_cost < 1 or max_memory < 0:
        raise ValueError(f"need max_cost >= 1 and max_memory >= 0, got {max_cost}, {max_memory}")
    if labels not in ("int", "str"):
        raise ValueError(f"labels must be 'int' or 'str', got {labels!r}")
    n = draw(st.integers(min_nodes, max_nodes), label="n")
    edges = []
    for j in range(1, n):
        if not draw(st.booleans(), label=f"path edge {j - 1}->{j} missing"):
            edges.append((j - 1, j))
        for i in range(j - 1):
            if draw(st.booleans(), label=f"edge {i}->{j}"):
                edges.append((i, j))
    cost = draw(st.lists(st.integers(1, max_cost), min_size=n, max_size=n), label="cost")
    memory = draw(st.lists(st.integers(0, max_memory), min_size=n, max_size=n), label="memory")
    perm = draw(st.permutations(range(n)), label="relabel")
    name = (lambda i: perm[i]) if labels == "int" else (lambda i: f"v{perm[i]}")
    nodes = [name(i) for i in range(n)]
    return ls.Graph(nodes, [(name(i), name(j)) for i, j in edges],
                    cost={name(i): cost[i] for i in range(n)},
                    memory={name(i): memory[i] for i in range(n)})


def examples(factor):
    """``max_examples`` for a test: `factor` times the active profile's (at least 5).

    The hypothesis profile (``HYPOTHESIS_PROFILE``: "dev" 20, "default" 100, "ci" 200, see
    conftest.py) scales every test; `factor` says how expensive each example is.
    """
    from hypothesis import settings

    return max(5, int(settings.default.max_examples * factor))


def default_plan(planner, g, *args, **kwargs):
    """``planner(g, *args, **kwargs)`` with the default time limit, its TimeLimitWarning
    silenced: for tests of what a plan does (its prediction, its gradients), any plan the
    default planner returns is a subject. A random network can have tens of thousands of lower
    sets (a 38-node one has 42,067; its first ``min_peak`` takes 7.8 s on these machines), so
    whether the default limit cuts the search depends on the machine's speed."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ls.TimeLimitWarning)
        return planner(g, *args, **kwargs)


#: Shapes of :func:`wide_dags`, the first one being what a failing example shrinks to.
SHAPES = ("path", "fan", "skip", "join", "source")


@st.composite
def wide_dags(draw, min_nodes=1, max_nodes=14, max_cost=3, max_memory=4, labels="int",
              max_lower_sets=None):
    """Draw a :class:`lowerset.Graph` of up to 14 nodes built from the shapes networks have.

    Node ``j`` (in a hidden topological order) takes one shape:

    - ``"path"``: its input is node ``j - 1``;
    - ``"fan"``: its input is one of a few hubs drawn up front, so hubs get many outputs
      (wide fans, multi-output nodes) and the consumers of a hub are unordered;
    - ``"skip"``: inputs ``j - 1`` and a node far back (a long skip connection);
    - ``"join"``: two to four earlier nodes (concatenation, addition);
    - ``"source"``: no input (a second input branch).

    Nodes that no later node reads are sinks, so graphs have several sinks (losses, auxiliary
    outputs, dead branches). Nodes are relabelled by a random permutation.

    Parameters
    ----------
    min_nodes, max_nodes : int
        Node count range, ``1 <= min_nodes <= max_nodes``.
    max_cost, max_memory : int
        T_v in ``1..max_cost``, M_v in ``0..max_memory`` bytes.
    labels : {"int", "str"}
    max_lower_sets : int, optional
        Reject (``assume``) graphs with more lower sets than this.

    Raises
    ------
    ValueError
        On an impossible range.

    Notes
    -----
    Shrinking: the shape of each node shrinks to "path" and the hubs to node 0, so a failing
    example shrinks toward the path graph, as :func:`dags` does.
    """
    from hypothesis import assume

    if min_nodes < 1 or max_nodes < min_nodes:
        raise ValueError(f"need 1 <= min_nodes <= max_nodes, got {min_nodes}, {max_nodes}")
    if max_cost < 1 or max_memory < 0:
        raise ValueError(f"need max_cost >= 1 and max_memory >= 0, got {max_cost}, {max_memory}")
    if labels not in ("int", "str"):
        raise ValueError(f"labels must be 'int' or 'str', got {labels!r}")
    n = draw(st.integers(min_nodes, max_nodes), label="n")
    hubs = draw(st.lists(st.integers(0, max(0, n - 2)), min_size=1, max_size=3, unique=True),
                label="hubs")
    edges = set()
    for j in range(1, n):
        shape = draw(st.sampled_from(SHAPES), label=f"shape of {j}")
        if shape == "path":
            edges.add((j - 1, j))
        elif shape == "fan":
            usable = [h for h in hubs if h < j]
            edges.add((usable[draw(st.integers(0, len(usable) - 1))] if usable else j - 1, j))
        elif shape == "skip":
            edges.add((j - 1, j))
            edges.add((draw(st.integers(0, j - 1), label=f"skip into {j}"), j))
        elif shape == "join":
            for i in draw(st.lists(st.integers(0, j - 1), min_size=min(2, j), max_size=4,
                                   unique=True), label=f"inputs of {j}"):
                edges.add((i, j))
    cost = draw(st.lists(st.integers(1, max_cost), min_size=n, max_size=n), label="cost")
    memory = draw(st.lists(st.integers(0, max_memory), min_size=n, max_size=n), label="memory")
    perm = draw(st.permutations(range(n)), label="relabel")
    name = (lambda i: perm[i]) if labels == "int" else (lambda i: f"v{perm[i]}")
    g = ls.Graph([name(i) for i in range(n)], [(name(i), name(j)) for i, j in sorted(edges)],
                 cost={name(i): cost[i] for i in range(n)},
                 memory={name(i): memory[i] for i in range(n)})
    if max_lower_sets is not None:
        try:
            ls.count_lower_sets(g, max_lower_sets=max_lower_sets)
        except ls.SearchLimitError:
            assume(False)
    return g
