"""The forward graph G = (V, E) of a network, with costs T_v and memory M_v (paper, Sec. 2).

V holds intermediate values only: model inputs and parameters are not nodes. An edge (v, w) means
that v is an input of the function producing w. Users name nodes with any hashable labels; the
graph stores them as dense integer ids in a topological order, which is what the Numba kernels use.
"""

from __future__ import annotations

import numbers
from collections.abc import Hashable, Iterable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from .exceptions import ArgumentTypeError, FrozenGraphError, GraphError
from .execution import ExecutionFacts, default_facts

if TYPE_CHECKING:
    import networkx as nx

__all__ = ["Graph"]

# the DP keeps three int64 arrays indexed by overhead: 10**7 cost units = 240 MB
_MAX_TOTAL_COST = 10**7
# eq. (2) sums up to about 6 M(V) in int64 next to the kernels' INF = int64 max // 4
_MAX_TOTAL_MEMORY = 2**56


def _as_int(value, what, label, *, positive):
    """Return `value` as a Python int, or raise GraphError naming the node."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise GraphError(f"node {label!r}: {what} must be a number, got {value!r}")
    if value != value or value in (float("inf"), float("-inf")):
        raise GraphError(f"node {label!r}: {what} must be finite, got {value!r}")
    if int(value) != value:  # type: ignore[call-overload]  # typeshed's Real has no __int__
        raise GraphError(
            f"node {label!r}: {what} must be an integer, got {value!r}"
            + (" (scale costs to integer cost units)" if what == "cost" else " (bytes)")
        )
    value = int(value)  # type: ignore[call-overload]  # as above
    if positive and value <= 0:
        raise GraphError(f"node {label!r}: {what} must be > 0, got {value}")
    if not positive and value < 0:
        raise GraphError(f"node {label!r}: {what} must be >= 0, got {value}")
    return value


#: Keys of the results that the planner and the scheduler cache in a graph's ``__dict__``
#: (valid because a Graph is immutable; left out when a graph is pickled).
_CACHES = frozenset({"_family_cache", "_paper_cache", "_pareto_cache", "_drop_rule",
                     "_flat_facts", "_activation_view"})


class Graph:
    """A forward graph G = (V, E) with integer costs T_v (cost units) and memory M_v (bytes).

    Parameters
    ----------
    nodes : iterable of hashable
        The node labels (intermediate values of the network), each once.
    edges : iterable of (hashable, hashable)
        Pairs (v, w): v is an input of the function that computes w.
    cost : mapping
        ``cost[v]`` is T_v, a positive integer in cost units (the paper uses 10 for a convolution,
        1 otherwise).
    memory : mapping
        ``memory[v]`` is M_v, a non-negative integer number of bytes.
    attrs : mapping, optional
        Extra per-node metadata (for instance the producing function's name): ``attrs[v]`` is a
        mapping; copied, kept, not used by the planner.
    facts : ExecutionFacts, optional
        How a training step over the graph runs (:mod:`lowerset.execution`), indexed by the
        position of each node in `nodes`, which must then be a topological order. Default:
        :func:`lowerset.default_facts`.

    Attributes
    ----------
    labels : tuple
        Node labels in the graph's topological order; node id ``i`` is ``labels[i]``.
    index : mapping
        Read-only map from label to node id.
    n : int
        Number of nodes #V.
    cost, memory : ndarray of int64, shape (n,)
        T_v in cost units and M_v in bytes, indexed by node id; read-only.
    pred_ptr, pred_idx, succ_ptr, succ_idx : ndarray of int64
        Predecessors and successors in CSR form: the predecessors of node ``i`` are
        ``pred_idx[pred_ptr[i]:pred_ptr[i + 1]]``; read-only.
    attrs : mapping
        Read-only map from every label to a copy of its metadata dict (empty when none was
        given).
    facts : ExecutionFacts
        The execution facts (given, or the defaults).
    has_facts : bool
        Whether facts were given (graphs with default facts compare equal whatever their
        node order).

    Raises
    ------
    ArgumentTypeError
        If a node label is not hashable, or `cost`, `memory`, `attrs` or an ``attrs[v]`` is
        not a mapping.
    GraphError
        If there are no nodes, a label is None or repeats, an edge names an unknown node or is
        a self-loop, the graph has a cycle (one cycle is named), a cost is missing, not an
        integer or not positive, a memory is missing, not an integer or negative, the total
        cost exceeds 10**7 cost units (the DP tables are indexed by overhead), the total
        memory exceeds 2**56 bytes, or `facts` are given with nodes not in topological order
        or do not fit the graph (:meth:`ExecutionFacts.check`).

    Notes
    -----
    A Graph is immutable: the attributes set by the constructor cannot be rebound or deleted
    (:class:`FrozenGraphError`), the arrays are read-only, and `index` and `attrs` are read-only
    mappings. The planner caches results on the graph (the lower sets, the minimal budget), and
    immutability keeps them valid. A subclass may add attributes of its own after calling
    ``Graph.__init__``. Pickling keeps a graph, not its caches.

    References
    ----------
    .. [1] Kusumoto et al., NeurIPS 2019, Sec. 2 (G, T_v, M_v).

    Examples
    --------
    >>> g = ls.Graph(["a", "b", "c"], [("a", "b"), ("b", "c")],
    ...              cost={"a": 1, "b": 10, "c": 1}, memory={"a": 4, "b": 8, "c": 4})
    >>> g.n, g.labels
    (3, ('a', 'b', 'c'))
    """

    labels: tuple[Hashable, ...]
    index: Mapping[Hashable, int]
    n: int
    cost: npt.NDArray[np.int64]
    memory: npt.NDArray[np.int64]
    pred_ptr: npt.NDArray[np.int64]
    pred_idx: npt.NDArray[np.int64]
    succ_ptr: npt.NDArray[np.int64]
    succ_idx: npt.NDArray[np.int64]
    attrs: Mapping[Hashable, dict[str, Any]]
    facts: ExecutionFacts
    has_facts: bool

    def __init__(self, nodes: Iterable[Hashable], edges: Iterable[tuple[Hashable, Hashable]],
                 cost: Mapping[Hashable, int], memory: Mapping[Hashable, int],
                 attrs: Mapping[Hashable, Mapping[str, Any]] | None = None,
                 facts: ExecutionFacts | None = None) -> None:
        nodes = list(nodes)
        if not nodes:
            raise GraphError("the graph is empty: a forward graph needs at least one node")
        for name, m in (("cost", cost), ("memory", memory), ("attrs", attrs)):
            if not isinstance(m, Mapping) and not (name == "attrs" and m is None):
                raise ArgumentTypeError(
                    f"{name} must be a mapping from node label to value, got "
                    f"{type(m).__name__}")
        pos: dict[Hashable, int] = {}
        for v in nodes:
            _check_hashable(v, "node label")
            if v is None:
                raise GraphError("None cannot be a node label")
            if v in pos:
                raise GraphError(f"node {v!r} is given twice")
            pos[v] = len(pos)
        edge_list, seen = [], set()
        for e in edges:
            try:
                v, w = e
            except (TypeError, ValueError):
                raise GraphError(f"an edge must be a pair (v, w), got {e!r}") from None
            for x in (v, w):
                _check_hashable(x, f"edge ({v!r}, {w!r}): node label")
                if x not in pos:
                    raise GraphError(f"edge ({v!r}, {w!r}) names unknown node {x!r}")
            if v == w:
                raise GraphError(f"self-loop on node {v!r}: the forward graph must be acyclic")
            if (v, w) not in seen:
                seen.add((v, w))
                edge_list.append((v, w))
        if all(pos[v] < pos[w] for v, w in edge_list):
            order = nodes  # keep the caller's order: node ids are then positions in `nodes`
        else:
            order = _topological_order(nodes, edge_list)
            if facts is not None:
                raise GraphError("execution facts are indexed by node position: list the nodes "
                                 "in a topological order")
        costs, mems = [], []
        for v in order:
            if v not in cost:
                raise GraphError(f"node {v!r} has no cost")
            if v not in memory:
                raise GraphError(f"node {v!r} has no memory")
            costs.append(_as_int(cost[v], "cost", v, positive=True))
            mems.append(_as_int(memory[v], "memory", v, positive=False))
        if sum(mems) > _MAX_TOTAL_MEMORY:
            raise GraphError(
                f"total memory {sum(mems)} bytes exceeds {_MAX_TOTAL_MEMORY} bytes (2**56); the "
                "DP's int64 sums of eq. (2) would overflow")
        if sum(costs) > _MAX_TOTAL_COST:
            raise GraphError(
                f"total cost {sum(costs)} exceeds {_MAX_TOTAL_COST} cost units; scale the costs "
                "down (the DP is indexed by overhead in cost units)"
            )
        node_attrs = {}
        for v in order:
            a = attrs.get(v, {}) if attrs else {}
            if not isinstance(a, Mapping):
                raise ArgumentTypeError(
                    f"attrs[{v!r}] must be a mapping of metadata, got {type(a).__name__}")
            node_attrs[v] = dict(a)
        self.labels = tuple(order)
        index = {v: i for i, v in enumerate(order)}
        self.index = MappingProxyType(index)
        self.n = len(order)
        self.cost = _readonly(np.asarray(costs, dtype=np.int64))
        self.memory = _readonly(np.asarray(mems, dtype=np.int64))
        self.attrs = MappingProxyType(node_attrs)
        preds: list[list[int]] = [[] for _ in order]
        succs: list[list[int]] = [[] for _ in order]
        for v, w in edge_list:
            succs[index[v]].append(index[w])
            preds[index[w]].append(index[v])
        self.pred_ptr, self.pred_idx = map(_readonly, _csr(preds))
        self.succ_ptr, self.succ_idx = map(_readonly, _csr(succs))
        self.has_facts = facts is not None
        if facts is None:
            facts = default_facts(self)
        else:
            facts.check(self)
        self.facts = facts
        # every attribute set so far is frozen; a subclass may add its own afterwards
        object.__setattr__(self, "_frozen", frozenset(self.__dict__))

    # -- immutability ---------------------------------------------------------------------------

    def __setattr__(self, name: str, value: Any) -> None:
        if name in self.__dict__.get("_frozen", ()):
            raise FrozenGraphError(
                f"cannot set Graph.{name}: a Graph is immutable; build a new one")
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        if name in self.__dict__.get("_frozen", ()):
            raise FrozenGraphError(
                f"cannot delete Graph.{name}: a Graph is immutable; build a new one")
        object.__delattr__(self, name)

    def __getstate__(self) -> dict[str, Any]:
        # plain containers (mapping proxies do not pickle), no planner caches
        state = {k: v for k, v in self.__dict__.items() if k not in _CACHES}
        state["index"] = dict(self.index)
        state["attrs"] = dict(self.attrs)
        return state

    def __setstate__(self, state: Mapping[str, Any]) -> None:
        state = dict(state)
        state["index"] = MappingProxyType(dict(state["index"]))
        state["attrs"] = MappingProxyType(dict(state["attrs"]))
        for k in ("cost", "memory", "pred_ptr", "pred_idx", "succ_ptr", "succ_idx"):
            state[k] = _readonly(np.array(state[k], dtype=np.int64))
        self.__dict__.update(state)

    # -- construction ---------------------------------------------------------------------------

    @classmethod
    def from_networkx(cls, G: nx.DiGraph, cost: str = "cost", memory: str = "memory") -> Graph:
        """Build a Graph from a :class:`networkx.DiGraph` whose nodes carry cost and memory.

        Parameters
        ----------
        G : networkx.DiGraph
            The forward graph; node attribute `cost` is T_v (positive integer, cost units) and
            `memory` is M_v (non-negative integer, bytes). Other node attributes are kept in
            :attr:`attrs`.
        cost, memory : str
            Names of the node attributes.

        Returns
        -------
        Graph

        Raises
        ------
        GraphError
            If `G` is not directed, or as :class:`Graph` does (cycle, bad or missing attribute,
            empty graph).
        """
        import networkx as nx

        if not isinstance(G, nx.DiGraph) or G.is_multigraph():
            raise GraphError(f"expected a networkx.DiGraph, got {type(G).__name__}")
        data = dict(G.nodes(data=True))
        c = {v: d[cost] for v, d in data.items() if cost in d}
        m = {v: d[memory] for v, d in data.items() if memory in d}
        attrs = {v: {k: x for k, x in d.items() if k not in (cost, memory)}
                 for v, d in data.items()}
        return cls(G.nodes, G.edges, c, m, attrs=attrs)

    def to_networkx(self) -> nx.DiGraph:
        """Return a :class:`networkx.DiGraph` copy with node attributes ``cost`` and ``memory``."""
        import networkx as nx

        G = nx.DiGraph()
        for i, v in enumerate(self.labels):
            G.add_node(v, cost=int(self.cost[i]), memory=int(self.memory[i]), **self.attrs[v])
        for i, v in enumerate(self.labels):
            for j in self.succ_idx[self.succ_ptr[i] : self.succ_ptr[i + 1]]:
                G.add_edge(v, self.labels[j])
        return G

    @classmethod
    def chain(cls, n: int, cost: int = 1, memory: int = 1) -> Graph:
        """Return the path graph 0 -> 1 -> ... -> n-1 with constant cost and memory.

        Parameters
        ----------
        n : int
            Number of nodes.
        cost : int, default 1
            T_v of every node, cost units.
        memory : int, default 1
            M_v of every node, bytes.
        """
        nodes = list(range(n))
        return cls(nodes, zip(nodes[:-1], nodes[1:]), {v: cost for v in nodes},
                   {v: memory for v in nodes})

    def with_facts(self, facts: ExecutionFacts) -> Graph:
        """Return a :class:`Graph` with the same nodes, edges, costs, memory and attrs and
        `facts`.

        Parameters
        ----------
        facts : ExecutionFacts
            Indexed by this graph's node ids.

        Raises
        ------
        GraphError
            If `facts` do not fit the graph (:meth:`ExecutionFacts.check`).

        Examples
        --------
        >>> g = ls.Graph.chain(3, memory=8)
        >>> h = g.with_facts(ls.activation_facts(g.facts))
        >>> h.facts == g.facts, h.has_facts, g.has_facts
        (True, True, False)
        """
        return Graph(self.labels, self.edges, dict(zip(self.labels, self.cost.tolist())),
                     dict(zip(self.labels, self.memory.tolist())), attrs=self.attrs,
                     facts=facts)

    # -- helpers --------------------------------------------------------------------------------

    @property
    def edges(self) -> list[tuple[Hashable, Hashable]]:
        """List of edges (v, w) as label pairs."""
        return [(self.labels[i], self.labels[j]) for i in range(self.n)
                for j in self.succ_idx[self.succ_ptr[i] : self.succ_ptr[i + 1]]]

    @property
    def n_words(self) -> int:
        """Number of uint64 words of a bitset over V."""
        return (self.n + 63) // 64

    def preds(self, i: int) -> npt.NDArray[np.int64]:
        """Ids of the predecessors of node id `i` (ndarray of int64).

        Parameters
        ----------
        i : int
            A node id.
        """
        return self.pred_idx[self.pred_ptr[i] : self.pred_ptr[i + 1]]

    def succs(self, i: int) -> npt.NDArray[np.int64]:
        """Ids of the successors of node id `i` (ndarray of int64).

        Parameters
        ----------
        i : int
            A node id.
        """
        return self.succ_idx[self.succ_ptr[i] : self.succ_ptr[i + 1]]

    def mask(self, nodes: Iterable[Hashable] | npt.NDArray[np.bool_]) -> npt.NDArray[np.bool_]:
        """Return the membership mask of a set of node labels.

        Parameters
        ----------
        nodes : iterable of hashable, or array_like of bool with shape (n,)

        Returns
        -------
        ndarray of bool, shape (n,)

        Raises
        ------
        GraphError
            If a label is not a node, or a boolean mask has the wrong shape.
        """
        if isinstance(nodes, np.ndarray) and nodes.dtype == bool:
            if nodes.shape != (self.n,):
                raise GraphError(f"mask has shape {nodes.shape}, expected ({self.n},)")
            return nodes.copy()
        out = np.zeros(self.n, dtype=bool)
        for v in nodes:
            try:
                out[self.index[v]] = True
            except (KeyError, TypeError):
                raise GraphError(f"{v!r} is not a node of the graph") from None
        return out

    def nodes_of(self, mask: npt.ArrayLike) -> frozenset[Hashable]:
        """Return the frozenset of labels whose entry in `mask` is True.

        Parameters
        ----------
        mask : array_like of bool, shape (n,)
            One entry per node id.
        """
        return frozenset(self.labels[i] for i in np.flatnonzero(mask))

    def total_cost(self) -> int:
        """T(V) in cost units."""
        return int(self.cost.sum())

    def total_memory(self) -> int:
        """M(V) in bytes."""
        return int(self.memory.sum())

    def fingerprint(self) -> tuple[Hashable, ...]:
        """A hashable value identifying the graph up to node order.

        It holds each node with its cost and memory, the edge set and the execution facts (with
        node ids replaced by labels); two graphs built from the same nodes, edges, costs, memory
        and facts listed in different orders have equal fingerprints.
        """
        nodes = frozenset(zip(self.labels, self.cost.tolist(), self.memory.tolist()))
        facts = self.facts.keyed(self.labels) if self.has_facts else None
        return nodes, frozenset(self.edges), facts

    def matches(self, other: object) -> bool:
        """Whether `other` is the same graph up to node order and measured workspace peaks.

        Parameters
        ----------
        other : object
            Any object; only a :class:`Graph` can match.

        Notes
        -----
        Equal nodes, costs (cost units), memory (bytes), edges and execution facts, leaving out
        the facts' measured ``forward_peak``/``backward_peak`` bytes and bytes outside the
        graph (``outside_forward``, ``outside_backward``). A strategy planned on one
        trace of a step binds to another trace of it (another process, another worker) when the
        two match.
        """
        if not isinstance(other, Graph):
            return False
        mine, theirs = self.fingerprint(), other.fingerprint()
        if mine[:2] != theirs[:2] or self.has_facts != other.has_facts:
            return False
        return (not self.has_facts or self.facts.keyed(self.labels, measured=False)
                == other.facts.keyed(other.labels, measured=False))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Graph) and self.fingerprint() == other.fingerprint()

    def __hash__(self) -> int:
        return hash(self.fingerprint())

    def __repr__(self) -> str:
        return (f"Graph(n={self.n}, edges={len(self.succ_idx)}, T(V)={self.total_cost()}, "
                f"M(V)={self.total_memory()} bytes)")


def _readonly(a):
    """A read-only copy of a 1-D array over immutable bytes: its WRITEABLE flag cannot be set
    back."""
    a = np.ascontiguousarray(a)
    return np.frombuffer(a.tobytes(), dtype=a.dtype)


def _check_hashable(v, what):
    try:
        hash(v)
    except TypeError:
        raise ArgumentTypeError(
            f"{what} {v!r} is not hashable ({type(v).__name__}); use str, int or tuple "
            "labels") from None


def _csr(lists):
    ptr = np.zeros(len(lists) + 1, dtype=np.int64)
    for i, x in enumerate(lists):
        ptr[i + 1] = ptr[i] + len(x)
    idx = np.fromiter((j for x in lists for j in sorted(x)), dtype=np.int64, count=int(ptr[-1]))
    return ptr, idx


def _topological_order(nodes, edges):
    """The topological order networkx's ``topological_sort`` gives for a DiGraph built by adding
    `nodes`, then `edges` (distinct pairs), in order: Kahn's algorithm by generations, children
    in edge order. It is written out here so that building a graph does not import networkx (a
    third of a second); networkx is imported only to name a cycle.

    Raises
    ------
    GraphError
        If the graph has a cycle; the message names one.
    """
    succ: dict[Hashable, list[Hashable]] = {v: [] for v in nodes}
    indegree = dict.fromkeys(nodes, 0)
    for v, w in edges:
        succ[v].append(w)
        indegree[w] += 1
    zero = [v for v in nodes if indegree[v] == 0]
    waiting = {v: d for v, d in indegree.items() if d > 0}
    order = []
    while zero:
        generation, zero = zero, []
        for v in generation:
            for w in succ[v]:
                waiting[w] -= 1
                if waiting[w] == 0:
                    zero.append(w)
                    del waiting[w]
        order.extend(generation)
    if waiting:
        import networkx as nx

        dg = nx.DiGraph()
        dg.add_nodes_from(nodes)
        dg.add_edges_from(edges)
        cycle = nx.find_cycle(dg)
        path = " -> ".join(repr(e[0]) for e in cycle) + f" -> {cycle[0][0]!r}"
        raise GraphError(f"the graph has a cycle: {path}")
    return order


def _graph_to_dict(G, attrs=True):
    """The JSON-ready fields of a graph: nodes, edges, cost, memory, facts and (optionally)
    attrs. Nodes are listed in id order, the ids the facts use."""
    data = {"nodes": list(G.labels), "edges": [list(e) for e in G.edges],
            "cost": G.cost.tolist(), "memory": G.memory.tolist(),
            "facts": G.facts.to_dict() if G.has_facts else None}
    if attrs:
        data["attrs"] = [G.attrs[v] for v in G.labels]
    return data


def _graph_from_dict(data):
    """Inverse of :func:`_graph_to_dict`.

    Raises
    ------
    KeyError, TypeError
        If an entry is missing or of the wrong type (callers turn these into their own errors).
    GraphError
        If the graph is invalid.
    """
    if not isinstance(data, dict):
        raise TypeError(f"a graph must be a JSON object, got {type(data).__name__}")
    for key in ("nodes", "edges", "cost", "memory"):
        if not isinstance(data[key], list):
            raise TypeError(f"{key!r} must be a list, got {type(data[key]).__name__}")
    nodes = data["nodes"]
    if not all(isinstance(e, list) for e in data["edges"]):
        raise TypeError("'edges' must be a list of [v, w] pairs")
    edges = [tuple(e) for e in data["edges"]]
    cost, memory = dict(zip(nodes, data["cost"])), dict(zip(nodes, data["memory"]))
    attrs = data.get("attrs")
    if attrs is not None and not (isinstance(attrs, list)
                                  and all(isinstance(a, dict) for a in attrs)):
        raise TypeError("'attrs' must be a list of JSON objects, one per node")
    facts = data.get("facts")
    if facts is not None:
        facts = ExecutionFacts.from_dict(facts)
    return Graph(nodes, edges, cost, memory, attrs=dict(zip(nodes, attrs)) if attrs else None,
                 facts=facts)

