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
   at the next batch. Where they disagree with the prediction, the search steps away from it by
   1, 2, 4, ... batches (re-planned) and bisects (:func:`lowerset.batching.search`), until the
   answer fits and the next batch does not.

What "fits" means depends on the device:

- **GPU**: the limit is enforced. The step runs with CuPy's memory pool limited to
  ``memory_limit`` bytes (``MemoryPool.set_limit``); it fits if it completes, and does not if
  CuPy raises ``cupy.cuda.memory.OutOfMemoryError``. The measured peak is the pool's
  ``used_bytes`` at the start plus the highest bytes of the blocks the step allocates and still
  holds (:func:`chainer_ext.peak_memory`), everything on the pool included. Each trial also
  records the bytes the pool holds at the step's end or at its out-of-memory error
  (``BatchTrial.held_peak``, ``MemoryPool.total_bytes``): its cached free blocks are in them,
  and in what the limit bounds.
- **CPU**: nothing enforces the limit (NumPy allocates what it is asked). The step fits if its
  measured whole-step peak is at most ``memory_limit``: the highest bytes in use during the
  step above the start (tracemalloc, :func:`chainer_ext.peak_memory`) plus the resident bytes of
  the traced graph (parameters and inputs, ``graph.facts.resident``). Inputs that ``loss_fn``
  allocates inside the step are then counted twice (they are small next to the activations);
  slice a preallocated batch (``x[:b]``) to avoid it.

The parameters' gradients are cleared before each real step, as ``model.cleargrads()`` does in
a training loop, and restored afterwards; on a GPU they wait on the host meanwhile, so that
neither the limit nor the measured peak holds them.

The search itself (extrapolation, prediction, confirmation) is :mod:`lowerset.batching`,
shared with :mod:`torch_ext`; this module supplies Chainer's trace, its traced graphs'
attributes and the real step.
"""

import contextlib
import gc
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, cast

import chainer

import lowerset
from lowerset import batching
from lowerset.batching import PLANNERS, BatchSizeResult, BatchTrial, least_peak, predict  # noqa: F401

from . import _backend
from ._backend import Device
from ._chainer_internals import grad_or_none
from .exceptions import ChainerExtError
from .hook import RecomputeHook
from .memory import peak_memory
from .trace import TracedGraph, trace

__all__ = ["max_batch_size", "BatchSizeResult", "BatchTrial", "extrapolate", "predict",
           "least_peak",
           "BatchScalingError", "NoBatchFitsError", "PLANNERS"]


class BatchScalingError(ChainerExtError, lowerset.BatchScalingError):
    """The traced graphs do not scale with the batch size (different structure, or sizes that
    are not affine in the batch size)."""


class NoBatchFitsError(ChainerExtError, lowerset.NoBatchFitsError):
    """Not even the smallest batch fits the memory limit.

    Attributes
    ----------
    budget : int
        The memory limit, bytes.
    min_budget : int or None
        The least whole-step peak at `batch_size` (bytes), predicted or measured.
    batch_size : int
    """


# -- extrapolation -------------------------------------------------------------------------------


class _Chainer(batching.FrontEnd):
    """Chainer's traced graphs: node attributes with input and output shapes, TracedGraph."""

    scaling_error = BatchScalingError
    no_fit_error = NoBatchFitsError

    def scale_attrs(self, v, a1, a2, at):
        if a1.get("function") != a2.get("function"):
            raise at.error(f"node {v} is {a1.get('function')} at batch {at.b1} and "
                           f"{a2.get('function')} at batch {at.b2}")
        a = dict(a1)
        inputs = []
        for x1, x2 in zip(a1["inputs"], a2["inputs"]):
            if x1[0] == "node":
                if x1 != x2:
                    raise at.error(f"node {v}: its inputs are wired differently")
                inputs.append(list(x1))
            else:
                inputs.append([x1[0], at.shape(x1[1], x2[1], f"node {v} input"), x1[2]])
        a["inputs"] = inputs
        a["outputs"] = [[at.shape(s1, s2, f"node {v} output"), d1]
                        for (s1, d1), (s2, _d2) in zip(a1["outputs"], a2["outputs"])]
        return a

    def build(self, like, *, labels, edges, cost, memory, attrs, facts):
        return TracedGraph(labels, edges, cost, memory, attrs, facts=facts, outputs=like.outputs,
                           cost_model=like.cost_model, time_unit=like.time_unit)


_FRONT = _Chainer()


def extrapolate(graphs: Mapping[int, TracedGraph], batch_size: int) -> TracedGraph:
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
        size through the two traces (:func:`lowerset.batching.extrapolate`). It is exact for
        shapes (an error otherwise) and rounded for the measured workspace.
        :class:`RecomputeHook` accepts strategies planned on it at `batch_size`.

    Raises
    ------
    BatchScalingError
        If fewer than two graphs are given, or the graphs differ in anything but sizes (number
        of nodes, functions, wiring, orders, what each backward reads), or a shape does not
        extrapolate to a non-negative integer.
    """
    # _FRONT.build makes a TracedGraph (lowerset.batching types the result as its base, Graph)
    return cast(TracedGraph, batching.extrapolate(graphs, batch_size, _FRONT))


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
        """Return (fits, measured peak of the pool or None, error message, bytes the pool
        holds at the step's end or at its out-of-memory error).

        The held bytes (``MemoryPool.total_bytes``) include the pool's cached free blocks, which
        it gives back to the device only where an allocation would pass the limit: what the
        limit bounds."""
        pool = self.cupy.get_default_memory_pool()
        old = pool.get_limit()
        gc.collect()
        pool.free_all_blocks()
        base = pool.used_bytes()
        pool.set_limit(size=int(limit))
        try:
            peak = self.measure(step)
            held = pool.total_bytes()
        except self.cupy.cuda.memory.OutOfMemoryError as e:
            return False, None, f"{type(e).__name__}: {e}", pool.total_bytes()
        finally:
            pool.set_limit(size=old)
            gc.collect()
            pool.free_all_blocks()
        measured = base + int(peak)
        return measured <= limit, measured, None, held


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


def max_batch_size(
        loss_fn: Callable[[int], chainer.Variable], memory_limit: int | float | str,
        planner: str | Callable[[lowerset.Graph, int], lowerset.CanonicalStrategy] | None
        = "lowerset", *, method: str = "auto",
        params: chainer.Link | Iterable[chainer.Parameter] | None = None,
        trace_batches: Sequence[int] = (2, 4), max_batch: int = 1 << 16,
        traced: Mapping[int, TracedGraph] | None = None, device: Device | None = None,
        max_steps: int | None = None, **trace_kwargs: Any) -> BatchSizeResult:
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
    method : {"auto", "exact", "ordered", "approx"}
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
        Default: where the loss lives, as the traced calls return it (where `traced` holds
        every batch: one forward pass at its smallest batch).
    max_steps : int or None
        Real runs that step away from the prediction, in each direction (steps of 1, 2, 4, ...
        batches, then a bisection; see :func:`lowerset.batching.search`); None (default): no
        bound.
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
    limit, batches = batching.check_arguments(memory_limit, planner, trace_batches)
    seen_device: list[Device] = []
    found: list[chainer.Parameter] = []

    def traced_call(b):
        def fn():
            loss = loss_fn(b)
            seen_device.append(_backend.device_of([loss.array]))
            if not found:
                found.extend(_parameters_of(loss))
            return loss
        return fn

    graphs = batching.traced_graphs(lambda b: trace(traced_call(b), **trace_kwargs), batches,
                                    traced, _FRONT)
    if device is None and not seen_device or params is None and not found:
        # every graph came from `traced`: one forward pass finds the device and the parameters
        traced_call(min(graphs))()
    if device is None:
        device = seen_device[0]
    if params is None:
        params = found
    elif isinstance(params, chainer.Link):
        params = list(params.params())
    else:
        params = list(params)
    cap: _GpuCap | _CpuCap
    if device == "gpu":  # pragma: no cover - GPU
        _backend.require_cupy("max_batch_size on a GPU")
        cap = _GpuCap(_backend.cupy)
    else:
        cap = _CpuCap()
    return _search(loss_fn, limit, planner, method, params, graphs, max_batch, max_steps, cap)


def _search(loss_fn, limit, planner, method, params, traced, max_batch, max_steps, cap):
    """Steps 2 and 3 of :func:`max_batch_size` (separate so that the device is injectable):
    :func:`lowerset.batching.search` with Chainer's real step, the gradients put back after."""
    def run(b, strategy, graph):
        return cap.run(_make_step(loss_fn, b, strategy, params), limit, graph.facts.resident)

    with _gradients_set_aside(params):
        return batching.search(traced, limit, run, planner, method, front=_FRONT,
                               max_batch=max_batch, max_steps=max_steps, device=cap.device)


@contextlib.contextmanager
def _gradients_set_aside(params):
    """Hold the parameters' gradients on the host and clear them while the block runs, then put
    them back on each parameter's device (the same arrays on the CPU, copies on a GPU).

    A training step starts without the previous step's gradients (``cleargrads``); kept on the
    GPU, they would sit in CuPy's pool under the real steps' limit and in the measured base."""
    host = chainer.backend.CpuDevice()
    saved = [(p, grad_or_none(p)) for p in params]
    saved = [(p, None if g is None else host.send(g)) for p, g in saved]
    for p in params:
        p.cleargrad()
    try:
        yield
    finally:
        for p, g in saved:
            p.grad = None if g is None else p.device.send(g)
