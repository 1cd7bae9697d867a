"""The largest batch whose training step fits a memory limit, with or without recomputation.

:func:`max_batch_size` answers the question people ask recomputation to solve: how large a batch
does my device hold? It works in three steps.

1. **Trace at small batches.** ``loss_fn(b)`` is traced (:func:`chainer_ext.trace`) at two small
   batch sizes (default 2 and 4; not 1, where Chainer's CPU convolutions take a path with a
   smaller workspace). Every byte count of the graph (outputs, states, workspace,
   inputs, M_v) and every array shape is extrapolated affinely in the batch size
   (:func:`extrapolate`); the structure (functions, wiring, orders, what each backward reads)
   must not change with it. A third traced batch checks the extrapolation.
2. **Predict.** At a batch size b the plan's schedule (:func:`lowerset.schedule`) predicts the
   whole-step peak, parameters and inputs included: the plain step's for ``planner=None``,
   Chen's sqrt(n) for ``"chen"``, and for ``"lowerset"`` the least peak of the planner's front
   (:func:`lowerset.pareto`), with the plan of least recomputation that fits the limit
   (:func:`lowerset.solve`). The largest b whose prediction fits is found with a few planner
   calls (a first guess from the slope of the peak between the traced batches, then doubling
   and bisection); no step runs meanwhile.
3. **Confirm with real runs.** One real training step (``loss_fn(b)`` and ``backward``, under
   :class:`chainer_ext.RecomputeHook` when there is a plan) runs at the predicted batch and one
   at the next batch. A step that does not fit moves the answer down by one (re-planned), a next
   batch that fits moves it up, until the answer fits and the next one does not.

What "fits" means depends on the device:

- **GPU**: the limit is enforced. The step runs with CuPy's memory pool limited to
  ``memory_limit`` bytes (``MemoryPool.set_limit``); it fits if it completes, and does not if
  CuPy raises ``cupy.cuda.memory.OutOfMemoryError``. The measured peak is the pool's highest
  ``used_bytes`` during the step, everything on the pool included.
- **CPU**: nothing enforces the limit (NumPy allocates what it is asked). The step fits if its
  measured whole-step peak is at most ``memory_limit``: the highest bytes in use during the
  step above the start (tracemalloc, :func:`chainer_ext.peak_memory`) plus the resident bytes of
  the traced graph (parameters and inputs, ``graph.facts.resident``). Inputs that ``loss_fn``
  allocates inside the step are then counted twice (they are small next to the activations);
  slice a preallocated batch (``x[:b]``) to avoid it.

The parameters' gradients are cleared before each real step, as ``model.cleargrads()`` does in
a training loop, and restored afterwards.
"""

import contextlib
import gc
import warnings
from dataclasses import dataclass, field

import chainer

import lowerset
from lowerset.units import parse_size

from . import _backend
from .exceptions import ChainerExtError
from .hook import RecomputeHook
from .memory import peak_memory
from .trace import TracedGraph, trace

__all__ = ["max_batch_size", "BatchSizeResult", "BatchTrial", "extrapolate", "predict",
           "least_peak",
           "BatchScalingError", "NoBatchFitsError", "PLANNERS"]

#: The named planners of :func:`max_batch_size` (a callable is accepted too).
PLANNERS = (None, "chen", "lowerset")

# relative difference allowed between the extrapolated and the traced plain-step peak at a
# third traced batch size (the measured workspace of a function varies a little)
_CHECK_RTOL = 0.05


class BatchScalingError(ChainerExtError, ValueError):
    """The traced graphs do not scale with the batch size (different structure, or sizes that
    are not affine in the batch size)."""


class NoBatchFitsError(ChainerExtError, lowerset.InfeasibleBudgetError):
    """Not even the smallest batch fits the memory limit.

    Attributes
    ----------
    budget : int
        The memory limit, bytes.
    min_budget : int or None
        The least whole-step peak at `batch_size` (bytes), predicted or measured.
    batch_size : int
    """

    def __init__(self, message, budget, min_budget, batch_size):
        lowerset.InfeasibleBudgetError.__init__(self, budget, min_budget)
        self.batch_size = batch_size
        self.args = (message,)

    def __str__(self):
        return self.args[0]


@dataclass
class BatchTrial:
    """One real training step run by :func:`max_batch_size`.

    Attributes
    ----------
    batch_size : int
    plan : str
        "plain", "chen", "lowerset", "lowerset (least peak)" or the callable planner's name.
    predicted_peak : int
        The schedule's whole-step peak, bytes.
    measured_peak : int or None
        Bytes, comparable with the limit (see the module docstring); None when the GPU ran out
        of memory.
    fits : bool
    error : str or None
        The out-of-memory message on a GPU.
    """

    batch_size: int
    plan: str
    predicted_peak: int
    measured_peak: object
    fits: bool
    error: object = None


@dataclass
class BatchSizeResult:
    """What :func:`max_batch_size` found.

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
        "cpu" or "gpu".
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
    traced : dict of int to TracedGraph
        The traced graphs by batch size (pass it as ``traced=`` to another call on the same
        ``loss_fn`` to skip tracing).
    predictions : dict of int to int
        Predicted whole-step peak (bytes) at every batch size the search looked at.
    trials : list of BatchTrial
        Every real run, in order.
    """

    batch_size: int
    strategy: object
    measured_peak: int
    predicted_peak: int
    memory_limit: int
    planner: str
    device: str
    predicted_batch_size: int
    next_trial: object
    confirmed: bool
    graph: object
    traced: dict
    predictions: dict = field(default_factory=dict)
    trials: list = field(default_factory=list)

    def __repr__(self):
        return (f"BatchSizeResult(batch_size={self.batch_size}, planner={self.planner!r}, "
                f"measured_peak={self.measured_peak}, predicted_peak={self.predicted_peak}, "
                f"memory_limit={self.memory_limit}, device={self.device!r})")


# -- extrapolation -------------------------------------------------------------------------------


def _affine(values, batches, b, what, exact):
    """The affine function of the batch size through (batches[i], values[i]), at `b`."""
    (b1, v1), (b2, v2) = (batches[0], values[0]), (batches[1], values[1])
    num = (v2 - v1) * (b - b1)
    if num % (b2 - b1):
        if exact:
            raise BatchScalingError(
                f"{what} is {v1} at batch {b1} and {v2} at batch {b2}, which gives no integer "
                f"at batch {b}; trace at batch sizes whose difference divides the others "
                "(for instance 1 and 2)")
        return max(0, int(round(v1 + num / (b2 - b1))))
    out = v1 + num // (b2 - b1)
    if out < 0 and not exact:
        return 0  # a measured size (workspace) that shrank between two small batches
    if out < 0:
        raise BatchScalingError(f"{what} extrapolates to {out} at batch {b} (from {v1} at batch "
                                f"{b1} and {v2} at batch {b2}); it does not scale with the batch")
    return int(out)


def _shape(s1, s2, batches, b, what):
    if len(s1) != len(s2):
        raise BatchScalingError(f"{what}: shapes {s1} and {s2} differ in rank between batch "
                                f"sizes {batches[0]} and {batches[1]}")
    return [_affine((x, y), batches, b, what, exact=True) for x, y in zip(s1, s2)]


def extrapolate(graphs, batch_size):
    """Return the traced graph of a training step at another batch size, from two traces.

    Parameters
    ----------
    graphs : dict of int to TracedGraph
        Graphs traced at two (or more) batch sizes; the two smallest are used.
    batch_size : int

    Returns
    -------
    TracedGraph
        The same structure; every byte count (outputs, states, forward and backward workspace,
        external arrays, M_v), every array shape and every profiled cost affine in the batch
        size through the two traces. It is exact for shapes (an error otherwise) and rounded
        for the measured workspace. :class:`RecomputeHook` accepts strategies planned on it at
        `batch_size`.

    Raises
    ------
    BatchScalingError
        If fewer than two graphs are given, or the graphs differ in anything but sizes (number
        of nodes, functions, wiring, orders, what each backward reads), or a shape does not
        extrapolate to a non-negative integer.
    """
    if len(graphs) < 2:
        raise BatchScalingError("extrapolation needs graphs traced at two batch sizes")
    batches = sorted(graphs)[:2]
    g1, g2 = graphs[batches[0]], graphs[batches[1]]
    b = int(batch_size)
    if b == batches[0] or b == batches[1]:
        return graphs[b]
    if g1.n != g2.n or g1.edges != g2.edges:
        raise BatchScalingError(
            f"the graphs traced at batch sizes {batches[0]} and {batches[1]} differ in structure "
            f"({g1.n} and {g2.n} nodes); the forward pass must apply the same functions at every "
            "batch size")
    f1, f2 = g1.facts.to_dict(), g2.facts.to_dict()
    for key in ("forward_order", "backward_order", "returned", "seeds"):
        if f1[key] != f2[key]:
            raise BatchScalingError(f"the {key} of the traced graphs differs between batch "
                                    f"sizes {batches[0]} and {batches[1]}")
    sizes = ("outputs", "state", "forward_peak", "backward_peak")
    nodes = []
    for v, (n1, n2) in enumerate(zip(f1["nodes"], f2["nodes"])):
        for k in n1:
            if k not in sizes and n1[k] != n2[k]:
                raise BatchScalingError(
                    f"node {v} ({g1.attrs[v].get('function')}): {k} is {n1[k]} at batch "
                    f"{batches[0]} and {n2[k]} at batch {batches[1]}; only sizes may change "
                    "with the batch size")
        d = dict(n1)
        d["outputs"] = [_affine((x, y), batches, b, f"node {v} output bytes", exact=False)
                        for x, y in zip(n1["outputs"], n2["outputs"])]
        for k in ("state", "forward_peak", "backward_peak"):
            d[k] = _affine((n1[k], n2[k]), batches, b, f"node {v} {k}", exact=False)
        nodes.append(d)
    ext = []
    for (k1, x1), (k2, x2) in zip(f1["externals"], f2["externals"]):
        if k1 != k2:
            raise BatchScalingError("the external arrays of the traced graphs differ in kind")
        ext.append([k1, _affine((x1, x2), batches, b, "external array bytes", exact=False)])
    if len(f1["externals"]) != len(f2["externals"]):
        raise BatchScalingError("the traced graphs use different numbers of external arrays")
    facts = dict(f1, nodes=nodes, externals=ext)
    attrs = {}
    for v in g1.labels:
        a1, a2 = g1.attrs[v], g2.attrs[v]
        if a1.get("function") != a2.get("function"):
            raise BatchScalingError(f"node {v} is {a1.get('function')} at batch {batches[0]} "
                                    f"and {a2.get('function')} at batch {batches[1]}")
        a = dict(a1)
        inputs = []
        for x1, x2 in zip(a1["inputs"], a2["inputs"]):
            if x1[0] == "node":
                if x1 != x2:
                    raise BatchScalingError(f"node {v}: its inputs are wired differently")
                inputs.append(list(x1))
            else:
                inputs.append([x1[0], _shape(x1[1], x2[1], batches, b, f"node {v} input"),
                               x1[2]])
        a["inputs"] = inputs
        a["outputs"] = [[_shape(s1, s2, batches, b, f"node {v} output"), d1]
                        for (s1, d1), (s2, _d2) in zip(a1["outputs"], a2["outputs"])]
        attrs[v] = a
    cost = {v: max(1, _affine((int(g1.cost[i]), int(g2.cost[i])), batches, b, "cost",
                              exact=False)) for i, v in enumerate(g1.labels)}
    memory = {v: _affine((int(g1.memory[i]), int(g2.memory[i])), batches, b, f"M_{v}",
                         exact=False) for i, v in enumerate(g1.labels)}
    return TracedGraph(list(g1.labels), g1.edges, cost, memory, attrs,
                       facts=lowerset.ExecutionFacts.from_dict(facts), outputs=g1.outputs,
                       cost_model=g1.cost_model, time_unit=g1.time_unit)


def _check_extrapolation(graphs):
    """With three or more traced batch sizes, compare the extrapolation from the two smallest
    with each other trace: exact shapes and bytes of outputs, states and inputs, and the plain
    step's predicted peak within 5%."""
    batches = sorted(graphs)
    for b in batches[2:]:
        e, t = extrapolate({k: graphs[k] for k in batches[:2]}, b), graphs[b]
        if e.facts.externals != t.facts.externals or [nf.outputs for nf in e.facts.nodes] != \
                [nf.outputs for nf in t.facts.nodes] or e.memory.tolist() != t.memory.tolist():
            raise BatchScalingError(
                f"the graph traced at batch {b} differs from its extrapolation from batch sizes "
                f"{batches[0]} and {batches[1]}: the sizes are not affine in the batch size")
        pe, pt = lowerset.schedule(e).peak, lowerset.schedule(t).peak
        if abs(pe - pt) > _CHECK_RTOL * pt:
            raise BatchScalingError(
                f"the plain step's peak at batch {b} is {pt} bytes traced but {pe} bytes "
                f"extrapolated from batch sizes {batches[0]} and {batches[1]} (more than "
                f"{_CHECK_RTOL:.0%} apart); trace at larger batch sizes")


# -- planners ------------------------------------------------------------------------------------


def _planner_name(planner):
    if planner is None:
        return "plain"
    if isinstance(planner, str):
        return planner
    return getattr(planner, "__name__", type(planner).__name__)


def least_peak(graph, memory_limit, planner="lowerset", method="auto"):
    """Return the least whole-step peak (bytes) a planner's plans reach on `graph`, or None.

    Plain step: its schedule's peak; "chen": Chen's plan's; "lowerset": the last plan of
    :func:`lowerset.pareto` (the least peak the planner finds); a callable: the peak of its plan
    at `memory_limit` (None if it raises :class:`lowerset.InfeasibleBudgetError`).
    """
    if planner is None:
        return lowerset.schedule(graph).peak
    if planner == "chen":
        return lowerset.baselines.chen_sqrtn(graph).schedule.peak
    if planner == "lowerset":
        return lowerset.pareto(graph, method)[-1].schedule.peak
    try:
        return planner(graph, memory_limit).schedule.peak
    except lowerset.InfeasibleBudgetError:
        return None


def predict(graph, memory_limit, planner="lowerset", method="auto"):
    """Plan one batch size: the plans to try, best first, and the least predicted peak.

    Parameters
    ----------
    graph : lowerset.Graph
        A traced (or extrapolated) graph at one batch size.
    memory_limit : int
        Bytes.
    planner : None, "chen", "lowerset" or callable
        As :func:`max_batch_size`.
    method : {"auto", "exact", "approx"}
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
    if planner is None:
        sched = lowerset.schedule(graph)
        plans = [("plain", None, sched.peak)]
    elif planner == "chen":
        s = lowerset.baselines.chen_sqrtn(graph)
        plans = [("chen", s, s.schedule.peak)]
    elif planner == "lowerset":
        # the fallback needs the least peak, not the least recomputation there (min_peak
        # searches for that, which can take seconds more)
        low = lowerset.pareto(graph, method)[-1]
        plans = []
        if low.schedule.peak <= memory_limit:
            s = lowerset.solve(graph, budget=memory_limit, method=method)
            plans.append(("lowerset", s, s.schedule.peak))
        if not plans or plans[0][1].lower_sets != low.lower_sets:
            plans.append(("lowerset (least peak)", low, low.schedule.peak))
    else:
        try:
            s = planner(graph, memory_limit)
        except lowerset.InfeasibleBudgetError:
            return [], None
        plans = [(_planner_name(planner), s, s.schedule.peak)]
    return plans, min(p for _, _, p in plans)


# -- real runs -----------------------------------------------------------------------------------


def _parameters_of(loss):
    """The Parameters the computation of `loss` (a Variable) reads, by walking its graph."""
    params, seen, stack = {}, set(), [loss.creator_node]
    while stack:
        f = stack.pop()
        if f is None or id(f) in seen:
            continue
        seen.add(id(f))
        for node in f.inputs:
            var = node.get_variable_or_none()
            if isinstance(var, chainer.Parameter):
                params[id(var)] = var
            stack.append(node.creator_node)
    return list(params.values())


class _CpuCap:
    """On CPU: run the step, measure its whole-step peak, compare with the limit."""

    device = "cpu"

    def run(self, step, limit, resident):
        """Return (fits, measured whole-step peak, error message)."""
        gc.collect()
        measured = peak_memory(step, device="cpu").peak + resident
        return measured <= limit, measured, None


class _GpuCap:
    """On GPU: run the step with CuPy's pool limited to the limit; out of memory = no fit.

    `cupy` is the CuPy module (a stand-in in the tests); `measure(step)` returns the peak bytes
    above the pool's level at the start (default :func:`chainer_ext.peak_memory`).
    """

    device = "gpu"

    def __init__(self, cupy, measure=None):
        self.cupy = cupy
        self.measure = measure or (lambda step: peak_memory(step, device="gpu").peak)

    def run(self, step, limit, resident):
        """Return (fits, measured peak of the pool or None, error message)."""
        pool = self.cupy.get_default_memory_pool()
        old = pool.get_limit()
        gc.collect()
        pool.free_all_blocks()
        base = pool.used_bytes()
        pool.set_limit(size=int(limit))
        try:
            peak = self.measure(step)
        except self.cupy.cuda.memory.OutOfMemoryError as e:
            return False, None, f"{type(e).__name__}: {e}"
        finally:
            pool.set_limit(size=old)
            gc.collect()
            pool.free_all_blocks()
        measured = base + int(peak)
        return measured <= limit, measured, None


def _make_step(loss_fn, b, strategy, params):
    def step():
        for p in params:
            p.cleargrad()
        hook = contextlib.nullcontext() if strategy is None else RecomputeHook(strategy)
        with hook:
            loss = loss_fn(b)
            loss.backward()
        del loss
        for p in params:
            p.cleargrad()
    return step


# -- the search ----------------------------------------------------------------------------------


def max_batch_size(loss_fn, memory_limit, planner="lowerset", *, method="auto", params=None,
                   trace_batches=(2, 4), max_batch=1 << 16, traced=None, device=None,
                   max_steps=8, **trace_kwargs):
    """Return the largest batch whose training step fits `memory_limit` bytes.

    See the module docstring for the three steps (trace at small batches, predict with the
    schedule, confirm with real runs) and for what "fits" means on CPU and GPU.

    Parameters
    ----------
    loss_fn : callable
        ``loss_fn(batch_size)`` runs the forward pass on a batch of that size and returns the
        loss Variable (what :func:`chainer_ext.trace` takes, given a batch size), under the
        caller's configuration (``chainer.using_config("train", True)`` around the call when
        the model needs it).
    memory_limit : int, float or str
        Bytes of the whole training step (forward, backward, parameter gradients; parameters
        and inputs counted), or a size such as ``"11.4GB"`` (:func:`lowerset.units.parse_size`).
    planner : None, "chen", "lowerset" or callable
        None: the plain step (no recomputation); "chen": Chen's sqrt(n)
        (:func:`lowerset.baselines.chen_sqrtn`); "lowerset": :func:`lowerset.solve` at
        `memory_limit`; a callable ``planner(graph, memory_limit)`` returns a
        :class:`lowerset.CanonicalStrategy` or raises :class:`lowerset.InfeasibleBudgetError`.
    method : {"auto", "exact", "approx"}
        For "lowerset" (:func:`lowerset.solve`).
    params : chainer.Link or iterable of chainer.Parameter, optional
        Whose gradients are cleared before each real step; default the Parameters the forward
        pass reads.
    trace_batches : sequence of int
        Batch sizes to trace, at least two (default 2 and 4: Chainer's CPU convolution takes
        another code path at batch 1, whose workspace does not extrapolate); with three or
        more, the others
        check the extrapolation from the two smallest (:class:`BatchScalingError` if the plain
        step's peak is more than 5% off, or any shape or output size differs).
    max_batch : int
        The search does not look beyond this batch size.
    traced : dict of int to TracedGraph, optional
        Graphs already traced for this `loss_fn` (``BatchSizeResult.traced``); the batch sizes
        of `trace_batches` missing from it are traced.
    device : {"cpu", "gpu"}, optional
        Default: where the traced loss lives.
    max_steps : int
        Real runs allowed to move the answer away from the prediction, in each direction.
    **trace_kwargs
        Passed to :func:`chainer_ext.trace` (for instance ``cost_model="profile"``).

    Returns
    -------
    BatchSizeResult
        ``batch_size``, ``strategy`` (None for the plain step) and ``measured_peak`` (bytes,
        the whole step, comparable with `memory_limit`), with the prediction and every real
        run.

    Raises
    ------
    lowerset.ArgumentError
        If `memory_limit` is not a size, `planner` is unknown, or `trace_batches` has fewer
        than two distinct positive sizes.
    BatchScalingError
        If the traced graphs do not extrapolate (see :func:`extrapolate`).
    NoBatchFitsError
        If the smallest traced batch is predicted not to fit, or no batch fits in real runs;
        carries the least peak (``min_budget``).
    TraceError
        As :func:`chainer_ext.trace`.

    Notes
    -----
    The search assumes that the predicted peak grows with the batch size. The real runs use
    the plan predicted at each batch size; on a GPU, a step beyond the limit raises CuPy's
    out-of-memory error inside the step, which is caught (the step is abandoned, the hook
    drops its state and the pool's limit is restored).

    References
    ----------
    .. [1] Kusumoto et al., NeurIPS 2019, Sec. 5.2 and Figure 4 (largest batch size per
       method on an 11.4 GB GPU).

    Examples
    --------
    >>> r = max_batch_size(lambda b: model(x[:b], t[:b]), "4GiB")   # doctest: +SKIP
    >>> r.batch_size, r.measured_peak <= 4 * 2**30                  # doctest: +SKIP
    (96, True)
    """
    if isinstance(memory_limit, str) or isinstance(memory_limit, (int, float)):
        limit = parse_size(memory_limit)
    else:
        raise lowerset.ArgumentTypeError(f"memory_limit must be bytes or a size string, got "
                                         f"{type(memory_limit).__name__}")
    if not (planner in PLANNERS or callable(planner)):
        raise lowerset.ArgumentError(f"unknown planner {planner!r}; expected None, 'chen', "
                                     "'lowerset' or a callable planner(graph, memory_limit)")
    batches = sorted({int(b) for b in trace_batches})
    if len(batches) < 2 or batches[0] < 1:
        raise lowerset.ArgumentError(f"trace_batches needs two distinct positive batch sizes, "
                                     f"got {tuple(trace_batches)!r}")
    traced = dict(traced or {})
    seen_device, found = [], []

    def traced_call(b):
        def fn():
            loss = loss_fn(b)
            seen_device.append(_backend.device_of([loss.array]))
            if not found:
                found.extend(_parameters_of(loss))
            return loss
        return fn

    for b in batches:
        if b not in traced:
            traced[b] = trace(traced_call(b), **trace_kwargs)
    if len(traced) > 2:
        _check_extrapolation(traced)
    if device is None:
        device = seen_device[0] if seen_device else "cpu"
    if params is None:
        if not found:  # every graph came from `traced`: run one forward pass to find them
            found.extend(_parameters_of(loss_fn(min(traced))))
        params = found
    elif isinstance(params, chainer.Link):
        params = list(params.params())
    else:
        params = list(params)
    if device == "gpu":  # pragma: no cover - GPU
        _backend.require_cupy("max_batch_size on a GPU")
        cap = _GpuCap(_backend.cupy)
    else:
        cap = _CpuCap()
    return _search(loss_fn, limit, planner, method, params, traced, max_batch, max_steps, cap)


def _search(loss_fn, limit, planner, method, params, traced, max_batch, max_steps, cap):
    """Steps 2 and 3 of :func:`max_batch_size` (separate so that the device is injectable)."""
    name = _planner_name(planner)
    graphs, plans, predictions = {}, {}, {}

    def graph(b):
        if b not in graphs:
            graphs[b] = traced[b] if b in traced else extrapolate(traced, b)
        return graphs[b]

    def planned(b):
        if b not in plans:
            plans[b] = predict(graph(b), limit, planner, method)
        return plans[b]

    def peak(b):
        if b not in predictions:
            # a callable planner's least peak is that of its one plan: plan once per batch
            predictions[b] = (planned(b)[1] if callable(planner) else
                              least_peak(graph(b), limit, planner, method))
        return predictions[b]

    def fits(b):
        return peak(b) is not None and peak(b) <= limit

    b0, b1 = sorted(traced)[:2]
    lo = b0
    while not fits(lo) and lo > 1:
        lo -= 1  # below the traced sizes: extrapolated
    if not fits(lo):
        least = peak(lo)
        raise NoBatchFitsError(
            f"batch size {lo} does not fit {limit} bytes with planner {name}: its least "
            f"predicted whole-step peak is {least} bytes" if least is not None else
            f"batch size {lo} does not fit {limit} bytes: planner {name} finds no plan", limit,
            least, lo)
    # first guess: the peak is about affine in the batch size
    guess = lo + 1
    if lo == b0 and peak(b1) is not None and peak(b1) > peak(b0):
        guess = int(b0 + (limit - peak(b0)) * (b1 - b0) / (peak(b1) - peak(b0)))
    guess = min(max(guess, lo + 1), max_batch)
    hi = None  # smallest batch known not to fit
    if guess > lo and fits(guess):
        lo = guess
        step = 1
        while lo < max_batch:
            b = min(lo + step, max_batch)
            if not fits(b):
                hi = b
                break
            lo, step = b, step * 2
    elif guess > lo:
        hi = guess
    if hi is not None:
        if hi - 1 > lo and fits(hi - 1):  # the guess is usually one off
            lo = hi - 1
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if fits(mid):
                lo = mid
            else:
                hi = mid
    predicted_batch = lo

    trials = []

    def real(b):
        """Run the plans of batch b until one fits; return (trial, strategy) of the last run."""
        last = None
        for plan_name, s, peak in planned(b)[0]:
            step = _make_step(loss_fn, b, s, params)
            resident = graph(b).facts.resident
            ok, measured, err = cap.run(step, limit, resident)
            last = BatchTrial(b, plan_name, int(peak), measured, bool(ok), err)
            trials.append(last)
            if ok:
                return last, s
        return last, None

    saved = [(p, p.grad) for p in params]
    try:
        b = predicted_batch
        trial, strategy = real(b)
        moves = 0
        while trial is None or not trial.fits:
            moves += 1
            b -= 1
            if b < 1 or moves > max_steps:
                raise NoBatchFitsError(
                    f"no batch size from {predicted_batch} down to {b + 1} fits {limit} bytes "
                    f"in real runs with planner {name} (the prediction was {predicted_batch}); "
                    f"the last run measured {trial and trial.measured_peak} bytes", limit,
                    trial and trial.measured_peak, b + 1)
            trial, strategy = real(b)
        best = (b, trial, strategy)
        next_trial, moves, confirmed = None, 0, b >= max_batch
        while b < max_batch:
            if moves >= max_steps:
                warnings.warn(f"max_batch_size: batch {b} fits in a real run, {moves} more than "
                              f"predicted ({predicted_batch}); stopped after max_steps="
                              f"{max_steps} steps up: batch {b + 1} was not tried",
                              RuntimeWarning, stacklevel=3)
                break
            nt, ns = real(b + 1)
            next_trial = nt
            if nt is None or not nt.fits:
                confirmed = True
                break
            b, moves = b + 1, moves + 1
            best = (b, nt, ns)
            next_trial = None
            confirmed = b >= max_batch
    finally:
        for p, g in saved:
            p.grad = g
    b, trial, strategy = best
    sched_peak = trial.predicted_peak
    return BatchSizeResult(
        batch_size=b, strategy=strategy, measured_peak=int(trial.measured_peak),
        predicted_peak=sched_peak, memory_limit=limit, planner=name, device=cap.device,
        predicted_batch_size=predicted_batch, next_trial=next_trial, confirmed=confirmed,
        graph=graph(b), traced=traced, predictions=dict(sorted(predictions.items())),
        trials=trials)

