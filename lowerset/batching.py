"""The largest batch whose training step fits a memory limit: the framework-free part of a front
end's ``max_batch_size`` (``chainer_ext.max_batch_size``, ``torch_ext.max_batch_size``).

A front end supplies two things: a trace of the step at a batch size (a :class:`Graph` with
execution facts), and one real training step at a batch size, plainly or under a plan, that
says whether it fits the limit and what it measured. Everything else lives here, once:

1. **Extrapolate.** Graphs traced at two small batch sizes are extrapolated affinely in the
   batch size (:func:`extrapolate`): every byte count of the facts (outputs, states, workspace,
   external arrays, M_v) and every cost; the structure (nodes, wiring, orders, what each
   backward reads) must not change with it. How a front end's node attributes (shapes) scale
   and which graph type it builds is its :class:`FrontEnd`. A third traced batch checks the
   extrapolation (:func:`check_extrapolation`).
2. **Predict.** At a batch size b the plan's schedule (:func:`lowerset.schedule`) predicts the
   whole-step peak (:func:`predict`, :func:`least_peak`). The largest b whose prediction fits
   is found with a few planner calls: a first guess from the slope of the peak between the two
   traced batches, then doubling and bisection; no step runs meanwhile.
3. **Confirm.** One real step runs at the predicted batch and one at the next. Where the real
   steps disagree with the prediction (an allocator's rounding and cached blocks count against
   an enforced limit; a library picks its workspace by batch size), the search steps away from
   the prediction by 1, 2, 4, ... batches (each re-planned) until the real steps change their
   answer, then bisects between the last batch that fits and the first that does not, so the
   answer fits and the next batch does not (:func:`search`).

References
----------
.. [1] Kusumoto et al., NeurIPS 2019, Sec. 5.2 and Figure 4 (largest batch size per method on
   an 11.4 GB GPU).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from . import baselines
from .exceptions import (
    ArgumentError,
    ArgumentTypeError,
    BatchScalingError,
    InfeasibleBudgetError,
    NoBatchFitsError,
)
from .execution import ExecutionFacts
from .graph import Graph
from .planner import pareto, solve
from .scheduling import schedule
from .strategy import CanonicalStrategy
from .units import parse_size

__all__ = ["PLANNERS", "BatchTrial", "BatchSizeResult", "Affine", "FrontEnd", "extrapolate",
           "check_extrapolation", "least_peak", "predict", "planner_name", "check_arguments",
           "traced_graphs", "search", "BatchScalingError", "NoBatchFitsError"]

#: The named planners of ``max_batch_size`` (a callable is accepted too).
PLANNERS = (None, "chen", "lowerset")

# relative difference allowed between the extrapolated and the traced plain-step peak at a
# third traced batch size (the measured workspace of a function varies a little)
_CHECK_RTOL = 0.05

#: A planner as ``max_batch_size`` takes it: a name of :data:`PLANNERS`, or a callable
#: ``planner(graph, memory_limit)`` returning a strategy.
Planner: TypeAlias = "str | Callable[[Graph, int], CanonicalStrategy] | None"

# NodeFacts fields that hold bytes (the others must not change with the batch size)
_NODE_SIZES = ("outputs", "state", "forward_peak", "backward_peak", "grad_sizes")

# ExecutionFacts fields that hold bytes
_FACT_SIZES = ("nodes", "externals", "external_sizes")


@dataclass
class BatchTrial:
    """One real training step run by the search.

    Attributes
    ----------
    batch_size : int
    plan : str
        "plain", "chen", "lowerset", "lowerset (least peak)" or the callable planner's name.
    predicted_peak : int
        The schedule's whole-step peak, bytes.
    measured_peak : int or None
        Bytes, comparable with the limit; None when the device ran out of memory.
    fits : bool
    error : str or None
        The out-of-memory message on a device that enforces the limit.
    held_peak : int or None
        Bytes the device's allocator held, its cached free blocks and their rounding included:
        what a GPU's limit bounds, where `measured_peak` counts the bytes in use (the front
        end says when it reads it); None where not read (the CPU).
    """

    batch_size: int
    plan: str
    predicted_peak: int
    measured_peak: int | None
    fits: bool
    error: str | None = None
    held_peak: int | None = None


@dataclass
class BatchSizeResult:
    """What the search found.

    Attributes
    ----------
    batch_size : int
        The largest batch whose step fits (confirmed by a real run).
    strategy : lowerset.CanonicalStrategy or None
        The plan to train with at `batch_size` (planned on :attr:`graph`); None for the plain
        step.
    measured_peak : int
        Whole-step bytes of the real run at `batch_size`, comparable with `memory_limit`.
    predicted_peak : int
        The schedule's whole-step peak of `strategy` (or of the plain step) at `batch_size`.
    memory_limit : int
    planner : str
    device : str
        Where the real steps ran ("cpu", "gpu", "cuda:0").
    predicted_batch_size : int
        The largest batch the prediction alone allowed.
    next_trial : BatchTrial or None
        The real run at ``batch_size + 1`` that did not fit; None when no plan exists there
        (a callable planner that raised) or `batch_size` is `max_batch`.
    confirmed : bool
        True when the run at `batch_size` fits and the next batch does not (or has no plan, or
        `batch_size` is `max_batch`); False when `max_steps` real runs up from the prediction
        all fitted (a warning says so).
    graph : lowerset.Graph
        The extrapolated traced graph at `batch_size` (what `strategy` was planned on).
    traced : dict of int to Graph
        The traced graphs by batch size (pass it as ``traced=`` to another call on the same
        step to skip tracing).
    predictions : dict of int to int
        Predicted whole-step peak (bytes) at every batch size the search looked at.
    trials : list of BatchTrial
        Every real run, in order.
    """

    batch_size: int
    strategy: CanonicalStrategy | None
    measured_peak: int
    predicted_peak: int
    memory_limit: int
    planner: str
    device: str
    predicted_batch_size: int
    next_trial: BatchTrial | None
    confirmed: bool
    graph: Graph
    traced: dict[int, Graph]
    predictions: dict[int, int] = field(default_factory=dict)
    trials: list[BatchTrial] = field(default_factory=list)

    def __repr__(self) -> str:
        return (f"BatchSizeResult(batch_size={self.batch_size}, planner={self.planner!r}, "
                f"measured_peak={self.measured_peak}, predicted_peak={self.predicted_peak}, "
                f"memory_limit={self.memory_limit}, device={self.device!r})")


# -- extrapolation -------------------------------------------------------------------------------


class Affine:
    """The affine function of the batch size through its values at two traced batch sizes,
    evaluated at `batch_size`.

    Parameters
    ----------
    batches : (int, int)
        The two traced batch sizes, b1 < b2.
    batch_size : int
    error : type
        The exception raised (a subclass of :class:`BatchScalingError`).

    Examples
    --------
    >>> at = Affine((2, 4), 7)
    >>> at.exact(10, 20, "bytes"), at.rounded(10, 15, "bytes"), at.shape([2, 3], [4, 3], "x")
    (35, 22, [7, 3])
    """

    def __init__(self, batches: Iterable[int], batch_size: int,
                 error: type[BatchScalingError] = BatchScalingError) -> None:
        self.b1, self.b2 = (int(b) for b in batches)
        self.b = int(batch_size)
        self.error = error

    def _num(self, v1, v2):
        return (v2 - v1) * (self.b - self.b1)

    def exact(self, v1: int, v2: int, what: str) -> int:
        """The value at the batch size: a non-negative integer, or `error` naming `what`.

        Parameters
        ----------
        v1, v2 : int
            The value at the two traced batch sizes.
        what : str
            What the value is, for the error message.
        """
        num, den = self._num(v1, v2), self.b2 - self.b1
        if num % den:
            raise self.error(
                f"{what} is {v1} at batch {self.b1} and {v2} at batch {self.b2}, which gives no "
                f"integer at batch {self.b}; trace at batch sizes whose difference divides the "
                "others (for instance 1 and 2)")
        out = v1 + num // den
        if out < 0:
            raise self.error(f"{what} extrapolates to {out} at batch {self.b} (from {v1} at batch "
                             f"{self.b1} and {v2} at batch {self.b2}); it does not scale with "
                             "the batch")
        return int(out)

    def rounded(self, v1: int, v2: int, what: str) -> int:
        """The value at the batch size, rounded to an integer, 0 where it would be negative (a
        measured size: workspace that shrank between two small batches).

        Parameters
        ----------
        v1, v2 : int
            The value at the two traced batch sizes.
        what : str
            Unused (the same signature as :meth:`exact`).
        """
        num, den = self._num(v1, v2), self.b2 - self.b1
        if num % den:
            return max(0, int(round(v1 + num / den)))
        return max(0, int(v1 + num // den))

    def shape(self, s1: Sequence[int], s2: Sequence[int], what: str) -> list[int]:
        """An array shape at the batch size (each dimension :meth:`exact`).

        Parameters
        ----------
        s1, s2 : sequence of int
            The shape at the two traced batch sizes.
        what : str
            What the array is, for the error message.
        """
        if len(s1) != len(s2):
            raise self.error(f"{what}: shapes {s1} and {s2} differ in rank between batch sizes "
                             f"{self.b1} and {self.b2}")
        return [self.exact(x, y, what) for x, y in zip(s1, s2)]


class FrontEnd:
    """What the extrapolation and the search need to know of a front end's traced graphs.

    The defaults fit a plain :class:`lowerset.Graph`: node attributes must be equal at both
    traced batch sizes, and the result is a :class:`lowerset.Graph`. A front end subclasses it
    for the shapes its node attributes record, the graph type it builds, and its own
    subclasses of the two errors.

    Attributes
    ----------
    scaling_error : type
        Raised by :func:`extrapolate` (a subclass of :class:`BatchScalingError`).
    no_fit_error : type
        Raised by :func:`search` (a subclass of :class:`NoBatchFitsError`).
    """

    scaling_error: type[BatchScalingError] = BatchScalingError
    no_fit_error: type[NoBatchFitsError] = NoBatchFitsError

    def scale_attrs(self, v: Hashable, a1: Mapping[str, Any], a2: Mapping[str, Any],
                    at: Affine) -> dict[str, Any]:
        """The attributes of node `v` at ``at.b``; raise ``at.error`` when they do not scale.

        Parameters
        ----------
        v : hashable
            The node's label.
        a1, a2 : mapping
            Its attributes at the two traced batch sizes.
        at : Affine
            The batch sizes.
        """
        if a1 != a2:
            raise at.error(f"node {v}: its attributes are {a1!r} at batch {at.b1} and {a2!r} at "
                           f"batch {at.b2}; only sizes may change with the batch size")
        return dict(a1)

    def build(self, like: Graph, *, labels: Sequence[Hashable],
              edges: Iterable[tuple[Hashable, Hashable]], cost: Mapping[Hashable, int],
              memory: Mapping[Hashable, int], attrs: Mapping[Hashable, Mapping[str, Any]],
              facts: ExecutionFacts) -> Graph:
        """The graph at the new batch size.

        Parameters
        ----------
        like : Graph
            The graph traced at the smaller batch size.
        labels, edges, cost, memory, attrs, facts
            The new graph's, as :class:`lowerset.Graph` takes them.
        """
        return Graph(labels, edges, cost, memory, attrs=attrs, facts=facts)


_PLAIN = FrontEnd()


def extrapolate(graphs: Mapping[int, Graph], batch_size: int,
                front: FrontEnd | None = None) -> Graph:
    """Return the traced graph of a training step at another batch size, from two traces.

    Parameters
    ----------
    graphs : dict of int to Graph
        Graphs traced at two (or more) batch sizes, with execution facts; the two smallest are
        used.
    batch_size : int
    front : FrontEnd, optional
        How node attributes scale and which graph type to build (default: attributes must be
        equal; a :class:`lowerset.Graph`).

    Returns
    -------
    Graph
        The same structure; every byte count of the facts (outputs, states, forward and
        backward workspace, external arrays and their sizes), M_v and every cost affine in
        the batch size through the two traces: rounded for measured sizes and costs, and 0
        where a measured size would be negative. A graph traced at `batch_size` itself (one
        of the two smallest) is returned as it is.

    Raises
    ------
    BatchScalingError
        (``front.scaling_error``) If fewer than two graphs are given, or the graphs differ in
        anything but sizes (number of nodes, edges, orders, returned values, what each backward
        reads, node attributes as `front` says).

    Examples
    --------
    >>> g = {b: ls.Graph.chain(3, memory=8 * b) for b in (2, 4)}
    >>> extrapolate(g, 10).memory.tolist()
    [80, 80, 80]
    """
    front = front or _PLAIN
    if len(graphs) < 2:
        raise front.scaling_error("extrapolation needs graphs traced at two batch sizes")
    batches = sorted(graphs)[:2]
    g1, g2 = graphs[batches[0]], graphs[batches[1]]
    b = int(batch_size)
    if b in batches:
        return graphs[b]
    at = Affine(batches, b, front.scaling_error)
    if g1.n != g2.n or g1.edges != g2.edges or list(g1.labels) != list(g2.labels):
        raise at.error(
            f"the graphs traced at batch sizes {at.b1} and {at.b2} differ in structure "
            f"({g1.n} and {g2.n} nodes); the forward pass must apply the same functions at every "
            "batch size")
    facts = _scale_facts(g1.facts.to_dict(), g2.facts.to_dict(), at)
    attrs = {v: front.scale_attrs(v, g1.attrs[v], g2.attrs[v], at) for v in g1.labels}
    cost = {v: max(1, at.rounded(int(g1.cost[i]), int(g2.cost[i]), "cost"))
            for i, v in enumerate(g1.labels)}
    memory = {v: at.rounded(int(g1.memory[i]), int(g2.memory[i]), f"M_{v}")
              for i, v in enumerate(g1.labels)}
    return front.build(g1, labels=list(g1.labels), edges=g1.edges, cost=cost, memory=memory,
                       attrs=attrs, facts=ExecutionFacts.from_dict(facts))


def _scale_facts(f1, f2, at):
    """The facts' dict at ``at.b`` from the facts' dicts at the two traced batch sizes."""
    for key in f1:
        if key not in _FACT_SIZES and f1[key] != f2[key]:
            raise at.error(f"the {key} of the traced graphs differs between batch sizes "
                           f"{at.b1} and {at.b2}")
    nodes = [_scale_node(v, n1, n2, at) for v, (n1, n2) in enumerate(zip(f1["nodes"],
                                                                          f2["nodes"]))]
    if [k for k, _ in f1["externals"]] != [k for k, _ in f2["externals"]]:
        raise at.error(f"the external arrays of the traced graphs differ in number or kind "
                       f"between batch sizes {at.b1} and {at.b2}")
    ext = [[k, at.rounded(x1, x2, "external array bytes")]
           for (k, x1), (_, x2) in zip(f1["externals"], f2["externals"])]
    s1, s2 = f1.get("external_sizes", []), f2.get("external_sizes", [])
    if len(s1) != len(s2):
        raise at.error("the traced graphs record the sizes of different numbers of external "
                       "arrays")
    sizes = [at.rounded(x1, x2, "external array size") for x1, x2 in zip(s1, s2)]
    return dict(f1, nodes=nodes, externals=ext, external_sizes=sizes)


def _scale_node(v, n1, n2, at):
    for k in n1:
        if k not in _NODE_SIZES and n1[k] != n2[k]:
            raise at.error(f"node {v}: {k} is {n1[k]} at batch {at.b1} and {n2[k]} at batch "
                           f"{at.b2}; only sizes may change with the batch size")
    d = dict(n1)
    d["outputs"] = [at.rounded(x, y, f"node {v} output bytes")
                    for x, y in zip(n1["outputs"], n2["outputs"])]
    for k in ("state", "forward_peak", "backward_peak"):
        d[k] = at.rounded(n1[k], n2[k], f"node {v} {k}")
    g1, g2 = n1.get("grad_sizes", []), n2.get("grad_sizes", [])
    if len(g1) != len(g2):
        raise at.error(f"node {v}: the traced graphs record the gradient sizes of different "
                       "numbers of arguments")
    d["grad_sizes"] = [at.rounded(x, y, f"node {v} gradient bytes") for x, y in zip(g1, g2)]
    return d


def check_extrapolation(graphs: Mapping[int, Graph], front: FrontEnd | None = None) -> None:
    """Compare the extrapolation from the two smallest traced batch sizes with each other
    traced graph.

    Parameters
    ----------
    graphs : dict of int to Graph
        Three or more traced graphs (with two, nothing is checked).
    front : FrontEnd, optional

    Raises
    ------
    BatchScalingError
        (``front.scaling_error``) If a traced graph's external arrays, output bytes or M_v
        differ from the extrapolation, or its plain step's predicted peak differs by more than
        5%.
    """
    front = front or _PLAIN
    batches = sorted(graphs)
    for b in batches[2:]:
        e, t = extrapolate({k: graphs[k] for k in batches[:2]}, b, front), graphs[b]
        if e.facts.externals != t.facts.externals or [nf.outputs for nf in e.facts.nodes] != \
                [nf.outputs for nf in t.facts.nodes] or e.memory.tolist() != t.memory.tolist():
            raise front.scaling_error(
                f"the graph traced at batch {b} differs from its extrapolation from batch sizes "
                f"{batches[0]} and {batches[1]}: the sizes are not affine in the batch size")
        pe, pt = schedule(e).peak, schedule(t).peak
        if abs(pe - pt) > _CHECK_RTOL * pt:
            raise front.scaling_error(
                f"the plain step's peak at batch {b} is {pt} bytes traced but {pe} bytes "
                f"extrapolated from batch sizes {batches[0]} and {batches[1]} (more than "
                f"{_CHECK_RTOL:.0%} apart); trace at larger batch sizes")


# -- planners ------------------------------------------------------------------------------------


def planner_name(planner: Planner) -> str:
    """"plain" for None, the string itself, or a callable's ``__name__``.

    Parameters
    ----------
    planner : None, str or callable
        As :func:`least_peak` takes it.
    """
    if planner is None:
        return "plain"
    if isinstance(planner, str):
        return planner
    return getattr(planner, "__name__", type(planner).__name__)


def least_peak(graph: Graph, memory_limit: int, planner: Planner = "lowerset",
               method: str = "auto") -> int | None:
    """Return the least whole-step peak (bytes) a planner's plans reach on `graph`, or None.

    Plain step (`planner` None): its schedule's peak; "chen": Chen's plan's; "lowerset": the
    last plan of :func:`lowerset.pareto` (the least peak the planner finds); a callable: the
    peak of its plan at `memory_limit` (None if it raises
    :class:`lowerset.InfeasibleBudgetError`).

    Parameters
    ----------
    graph : Graph
        The traced step.
    memory_limit : int
        Bytes; a callable planner's budget.
    planner : None, "chen", "lowerset" or callable, default "lowerset"
        Whose plans.
    method : str, default "auto"
        The planner method of "lowerset" (:func:`lowerset.pareto`).

    Examples
    --------
    >>> least_peak(ls.Graph.chain(4, memory=10), 10**6, None) > 0
    True
    """
    if planner is None:
        return schedule(graph).peak
    if planner == "chen":
        return baselines.chen_sqrtn(graph).schedule.peak
    if planner == "lowerset":
        return pareto(graph, method)[-1].schedule.peak
    try:  # an unknown name fails here (check_arguments refuses it first)
        return planner(graph, memory_limit).schedule.peak  # type: ignore[operator]
    except InfeasibleBudgetError:
        return None


def predict(graph: Graph, memory_limit: int, planner: Planner = "lowerset", method: str = "auto",
            ) -> tuple[list[tuple[str, CanonicalStrategy | None, int]], int | None]:
    """Plan one batch size: the plans to try, best first, and the least predicted peak.

    Parameters
    ----------
    graph : lowerset.Graph
        A traced (or extrapolated) graph at one batch size.
    memory_limit : int
        Bytes.
    planner : None, "chen", "lowerset" or callable
        None: the plain step; "chen": :func:`lowerset.baselines.chen_sqrtn`; "lowerset":
        :func:`lowerset.solve` at `memory_limit`; a callable ``planner(graph, memory_limit)``
        returns a :class:`lowerset.CanonicalStrategy` or raises
        :class:`lowerset.InfeasibleBudgetError`.
    method : {"auto", "exact", "ordered", "approx"}
        For "lowerset" (:func:`lowerset.solve`).

    Returns
    -------
    plans : list of (str, CanonicalStrategy or None, int)
        ``(name, strategy, predicted peak)``: for None the plain step; for "chen" Chen's plan;
        for "lowerset" the plan of least recomputation within the limit (when one is
        predicted to fit) and the plan of least peak; for a callable its plan (none if it raises
        :class:`lowerset.InfeasibleBudgetError`).
    least_peak : int or None
        The least predicted whole-step peak among them (None if there is no plan).
    """
    plans: list[tuple[str, CanonicalStrategy | None, int]]
    if planner is None:
        plans = [("plain", None, schedule(graph).peak)]
    elif planner == "chen":
        s = baselines.chen_sqrtn(graph)
        plans = [("chen", s, s.schedule.peak)]
    elif planner == "lowerset":
        # the fallback needs the least peak, not the least recomputation there (min_peak
        # searches for that, which can take seconds more)
        low = pareto(graph, method)[-1]
        plans = []
        if low.schedule.peak <= memory_limit:
            s = solve(graph, budget=memory_limit, method=method)
            plans.append(("lowerset", s, s.schedule.peak))
        if not plans or plans[0][1] is None or plans[0][1].lower_sets != low.lower_sets:
            plans.append(("lowerset (least peak)", low, low.schedule.peak))
    else:
        try:  # an unknown name fails here (check_arguments refuses it first)
            s = planner(graph, memory_limit)  # type: ignore[operator]
        except InfeasibleBudgetError:
            return [], None
        plans = [(planner_name(planner), s, s.schedule.peak)]
    return plans, min(p for _, _, p in plans)


# -- the search ----------------------------------------------------------------------------------


def check_arguments(memory_limit: int | float | str, planner: Planner,
                    trace_batches: Iterable[int]) -> tuple[int, list[int]]:
    """Validate the arguments a front end's ``max_batch_size`` shares.

    Parameters
    ----------
    memory_limit : int, float or str
        Bytes, or a size such as ``"6MB"``.
    planner : None, str or callable
        One of :data:`PLANNERS`, or a callable.
    trace_batches : iterable of int
        The batch sizes to trace.

    Returns
    -------
    limit : int
        Bytes (:func:`lowerset.units.parse_size`).
    batches : list of int
        The distinct batch sizes to trace, ascending.

    Raises
    ------
    lowerset.ArgumentTypeError
        If `memory_limit` is neither a number nor a string.
    lowerset.ArgumentError
        If `memory_limit` is not a size, `planner` is not in :data:`PLANNERS` nor callable, or
        `trace_batches` has fewer than two distinct positive sizes.

    Examples
    --------
    >>> check_arguments("6MB", None, (4, 2))
    (6000000, [2, 4])
    """
    if not isinstance(memory_limit, (str, int, float)) or isinstance(memory_limit, bool):
        raise ArgumentTypeError(f"memory_limit must be bytes or a size string, got "
                                f"{type(memory_limit).__name__}")
    limit = parse_size(memory_limit)
    if not (planner in PLANNERS or callable(planner)):
        raise ArgumentError(f"unknown planner {planner!r}; expected None, 'chen', 'lowerset' or "
                            "a callable planner(graph, memory_limit)")
    batches = sorted({int(b) for b in trace_batches})
    if len(batches) < 2 or batches[0] < 1:
        raise ArgumentError(f"trace_batches needs two distinct positive batch sizes, got "
                            f"{tuple(trace_batches)!r}")
    return limit, batches


def traced_graphs(trace_at: Callable[[int], Graph], batches: Iterable[int],
                  traced: Mapping[int, Graph] | None = None,
                  front: FrontEnd | None = None) -> dict[int, Graph]:
    """Trace the step at each batch size not in `traced` and check the extrapolation.

    Parameters
    ----------
    trace_at : callable
        ``trace_at(b)`` returns the graph of the step traced at batch size b.
    batches : iterable of int
    traced : dict of int to Graph, optional
        Graphs already traced.
    front : FrontEnd, optional

    Returns
    -------
    dict of int to Graph
        `traced` and the new graphs.

    Raises
    ------
    BatchScalingError
        From :func:`check_extrapolation` (three or more graphs).
    """
    out = dict(traced or {})
    for b in batches:
        if b not in out:
            out[b] = trace_at(b)
    if len(out) > 2:
        check_extrapolation(out, front)
    return out


class _Predictions:
    """The graph, the plans and the predicted least peak at each batch size, each made once."""

    def __init__(self, traced, limit, planner, method, front):
        self.traced, self.limit, self.planner, self.method = traced, limit, planner, method
        self.front = front
        self.graphs, self.plans, self.peaks = {}, {}, {}

    def graph(self, b):
        if b not in self.graphs:
            self.graphs[b] = (self.traced[b] if b in self.traced
                              else extrapolate(self.traced, b, self.front))
        return self.graphs[b]

    def planned(self, b):
        if b not in self.plans:
            self.plans[b] = predict(self.graph(b), self.limit, self.planner, self.method)
        return self.plans[b]

    def peak(self, b):
        if b not in self.peaks:
            # a callable planner's least peak is that of its one plan: plan once per batch
            self.peaks[b] = (self.planned(b)[1] if callable(self.planner) else
                             least_peak(self.graph(b), self.limit, self.planner, self.method))
        return self.peaks[b]

    def fits(self, b):
        return self.peak(b) is not None and self.peak(b) <= self.limit


def _predicted_batch(pred, max_batch, name):
    """The largest batch size whose predicted peak fits (a guess from the slope between the
    two smallest traced sizes, then doubling and bisection)."""
    b0, b1 = sorted(pred.traced)[:2]
    lo = b0
    while not pred.fits(lo) and lo > 1:
        lo -= 1  # below the traced sizes: extrapolated
    if not pred.fits(lo):
        least = pred.peak(lo)
        raise pred.front.no_fit_error(
            f"batch size {lo} does not fit {pred.limit} bytes with planner {name}: its least "
            f"predicted whole-step peak is {least} bytes" if least is not None else
            f"batch size {lo} does not fit {pred.limit} bytes: planner {name} finds no plan",
            pred.limit, least, lo)
    # first guess: the peak is about affine in the batch size
    guess = lo + 1
    if lo == b0 and pred.peak(b1) is not None and pred.peak(b1) > pred.peak(b0):
        guess = int(b0 + (pred.limit - pred.peak(b0)) * (b1 - b0)
                    / (pred.peak(b1) - pred.peak(b0)))
    guess = min(max(guess, lo + 1), max_batch)
    hi = None  # smallest batch known not to fit
    if guess > lo and pred.fits(guess):
        lo, step = guess, 1
        while lo < max_batch:
            b = min(lo + step, max_batch)
            if not pred.fits(b):
                hi = b
                break
            lo, step = b, step * 2
    elif guess > lo:
        hi = guess
    if hi is not None:
        if hi - 1 > lo and pred.fits(hi - 1):  # the guess is usually one off
            lo = hi - 1
        # invariant: lo fits, hi does not
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if pred.fits(mid) else (lo, mid)
    return lo


def search(traced: dict[int, Graph], limit: int,
           run: Callable[[int, CanonicalStrategy | None, Graph], tuple[Any, ...]],
           planner: Planner = "lowerset", method: str = "auto", *, front: FrontEnd | None = None,
           max_batch: int = 1 << 16, max_steps: int | None = None,
           device: str = "cpu") -> BatchSizeResult:
    """Return the largest batch whose training step fits `limit` bytes: predicted on the
    extrapolated graphs, confirmed with real steps (see the module docstring).

    Parameters
    ----------
    traced : dict of int to Graph
        The step traced at two or more batch sizes (:func:`traced_graphs`).
    limit : int
        Bytes of the whole training step.
    run : callable
        ``run(b, strategy, graph)`` runs one real training step at batch size b, plainly
        (`strategy` None) or under `strategy` (planned on `graph`, the graph at b), and
        returns ``(fits, measured whole-step bytes or None, error message or None)``, and
        optionally, fourth, the bytes the device's allocator held (``BatchTrial.held_peak``).
    planner : None, "chen", "lowerset" or callable
        As :func:`predict`.
    method : {"auto", "exact", "ordered", "approx"}
        For "lowerset".
    front : FrontEnd, optional
        The front end's graphs and errors.
    max_batch : int
        The search does not look beyond this batch size.
    max_steps : int or None
        Real runs that step away from the prediction, in each direction (steps of 1, 2, 4, ...
        batches; the bisection after them adds at most log2 of the last step). None
        (default): no bound, so the steps reach batch 1 or `max_batch` within log2 of the
        distance. A real step that runs out of memory ends early, and an allocator that holds
        more than the bytes in use can put the answer far below the prediction (over a third
        below on a GPU under CuPy's pool limit: the Figure 4 benchmark page).
    device : str
        Recorded in the result.

    Returns
    -------
    BatchSizeResult

    Raises
    ------
    NoBatchFitsError
        (``front.no_fit_error``) If the smallest traced batch (or a smaller one) is predicted
        not to fit, or no batch fits in real runs within `max_steps` steps below the
        prediction.
    BatchScalingError
        From :func:`extrapolate`.

    Warns
    -----
    RuntimeWarning
        When `max_steps` real runs up from the prediction all fit (``confirmed`` is False).
    """
    front = front or _PLAIN
    name = planner_name(planner)
    pred = _Predictions(traced, limit, planner, method, front)
    predicted = _predicted_batch(pred, max_batch, name)
    trials = []

    def real(b):
        """Run the plans of batch b until one fits; return (trial, strategy) of the last run.

        Parameters
        ----------
        b : int
            The batch size.
        """
        last = None
        for plan_name, s, peak in pred.planned(b)[0]:
            ok, measured, err, *held = run(b, s, pred.graph(b))
            last = BatchTrial(b, plan_name, int(peak), measured, bool(ok), err, *held)
            trials.append(last)
            if ok:
                return last, s
        return last, None

    b, trial, strategy, above = _confirm_down(real, predicted, limit, name, max_steps, front)
    b, trial, strategy, next_trial, confirmed = _confirm_up(
        real, b, trial, strategy, above, predicted, max_batch, max_steps)
    return BatchSizeResult(
        batch_size=b, strategy=strategy, measured_peak=int(trial.measured_peak),
        predicted_peak=trial.predicted_peak, memory_limit=limit, planner=name, device=device,
        predicted_batch_size=predicted, next_trial=next_trial, confirmed=confirmed,
        graph=pred.graph(b), traced=traced, predictions=dict(sorted(pred.peaks.items())),
        trials=trials)


def _confirm_down(real, predicted, limit, name, max_steps, front):
    """From the predicted batch down, the largest batch whose real step fits: steps of 1, 2, 4,
    ... below the prediction until one fits (at most `max_steps` of them, or down to batch 1
    where it is None), then a bisection between it and the smallest batch that did not.

    Returns
    -------
    b, trial, strategy : the answer, its trial and plan
    above : BatchTrial or None
        The trial of b + 1 where a real run showed it does not fit (None if b is the
        prediction).
    """
    trial, strategy = real(predicted)
    if trial is not None and trial.fits:
        return predicted, trial, strategy, None
    hi, above, b, step, moves = predicted, trial, predicted, 1, 0
    while True:
        moves += 1
        if b == 1 or (max_steps is not None and moves > max_steps):
            measured = trial and trial.measured_peak
            last = ("the last batch had no plan" if trial is None else
                    f"the last run measured {measured} bytes" if measured is not None else
                    f"the last run measured nothing: {trial.error or 'no error given'}")
            raise front.no_fit_error(
                f"no batch size from {predicted} down to {b} fits {limit} bytes in real runs "
                f"with planner {name} (the prediction was {predicted}); {last}", limit,
                measured, b)
        b = max(1, predicted - step)
        trial, strategy = real(b)
        if trial is not None and trial.fits:
            break
        hi, above, step = b, trial, 2 * step
    return _bisect_real(real, b, trial, strategy, hi, above)


def _confirm_up(real, b, trial, strategy, above, predicted, max_batch, max_steps):
    """From a batch that fits, the largest batch whose real step fits: steps of 1, 2, 4, ...
    above it while they fit (at most `max_steps` of them where it is not None, never past
    `max_batch`), then a bisection between the last that fits and the first that does not.

    Returns
    -------
    b, trial, strategy : the answer, its trial and plan
    next_trial : BatchTrial or None
        The trial of b + 1 (it does not fit), None when not run.
    confirmed : bool
        Whether b + 1 was shown not to fit, or b is `max_batch`.
    """
    if above is not None:   # _confirm_down ran b + 1 already
        return b, trial, strategy, above, True
    start, step, moves = b, 1, 0
    while b < max_batch:
        if max_steps is not None and moves >= max_steps:
            # stacklevel: this function, search, the front end's _search and max_batch_size
            warnings.warn(f"max_batch_size: batch {b} fits in a real run, {b - predicted} more "
                          f"than predicted ({predicted}); stopped after max_steps={max_steps} "
                          f"steps up: batch {b + 1} was not tried", RuntimeWarning, stacklevel=5)
            return b, trial, strategy, None, False
        nb = min(start + step, max_batch)
        nt, ns = real(nb)
        moves += 1
        if nt is None or not nt.fits:
            b, trial, strategy, above = _bisect_real(real, b, trial, strategy, nb, nt)
            return b, trial, strategy, above, True
        b, trial, strategy, step = nb, nt, ns, 2 * step
    return b, trial, strategy, None, True


def _bisect_real(real, lo, trial, strategy, hi, above):
    """Bisect real runs between batch `lo`, which fits (its `trial` and `strategy`), and `hi` >
    lo, which does not (its trial `above`): the largest that fits, its trial and plan, and the
    trial of the batch after it."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        t, s = real(mid)
        if t is not None and t.fits:
            lo, trial, strategy = mid, t, s
        else:
            hi, above = mid, t
    return lo, trial, strategy, above
