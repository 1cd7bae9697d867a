"""The largest batch whose PyTorch training step fits a memory limit, with or without
recomputation.

:func:`max_batch_size` traces ``loss_fn(b)`` (:func:`torch_ext.trace`) at two small batch
sizes, extrapolates the graph in the batch size, predicts the largest batch whose plan fits
and confirms it, and that the next batch does not fit, with real steps under
:class:`RecomputeContext`. The search is :mod:`lowerset.batching` (shared with
``chainer_ext.max_batch_size``); this module supplies the trace, how a traced graph's node
attributes scale (input and output shapes, FLOPs), and the real step.

What "fits" means depends on the device:

- **CUDA**: the limit is enforced. The step runs with the caching allocator capped at
  ``memory_limit`` bytes (``torch.cuda.set_per_process_memory_fraction(memory_limit /
  total_memory)``, put back afterwards); it fits if it completes and its measured peak (bytes
  allocated at the start plus ``max_memory_allocated`` above them) is within the limit, and
  does not if PyTorch raises ``torch.cuda.OutOfMemoryError``. The cap applies to the memory the
  allocator reserves, rounding and fragmentation included, so a step can run out of memory
  with fewer bytes allocated than the limit; each trial records the most the allocator
  reserved during the step (``BatchTrial.held_peak``, ``max_memory_reserved``).
- **CPU**: nothing enforces the limit. The step fits if its measured whole-step peak is at most
  ``memory_limit``: the highest bytes in use during the step above the start (the profiler's
  memory events, :func:`torch_ext.peak_memory`) plus the resident bytes of the traced graph
  (parameters and inputs, ``graph.facts.resident``). Inputs that ``loss_fn`` allocates inside
  the step are then counted twice; slice a preallocated batch (``x[:b]``) to avoid it.

The parameters' gradients are set to None before each real step, as ``optimizer.zero_grad()``
does, and put back afterwards (on a GPU they wait on the host meanwhile, so that neither the
cap nor the measured peak holds them), and so are the random generators' states; the real
steps update BatchNorm's running statistics as training steps do, unless `model` is given
(its buffers are put back). Where the traced graphs say that gradients exist when the step
starts (``trace(..., accumulate_grads=True)``: gradient accumulation), each real step starts
with a zero gradient on every parameter the loss accumulates into, allocated before the
step is measured (on CUDA under the cap, in its base), and the prediction counts them as
resident.
"""

import contextlib
import functools
import gc
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, cast

import torch

import lowerset
from lowerset import batching
from lowerset.batching import PLANNERS, BatchSizeResult, BatchTrial  # noqa: F401

from . import _build
from ._autograd import reachable_nodes
from ._graph import TARGET_TOTAL_COST, TracedGraph
from .exceptions import BatchScalingError, NoBatchFitsError
from .executor import RecomputeContext
from .memory import peak_memory
from .trace import trace

__all__ = ["max_batch_size", "extrapolate", "BatchSizeResult", "BatchTrial",
           "BatchScalingError", "NoBatchFitsError", "PLANNERS"]


# -- extrapolation -------------------------------------------------------------------------------

# node attributes that scale with the batch size (the others must not change)
_SCALED = ("inputs", "outputs", "flops")


class _Torch(batching.FrontEnd):
    """torch_ext's traced graphs: attributes with shapes and FLOPs, a TracedGraph whose FLOP
    costs are in the unit of its own total."""

    scaling_error = BatchScalingError
    no_fit_error = NoBatchFitsError

    def scale_attrs(self, v, a1, a2, at):
        for k in set(a1) | set(a2):
            if k not in _SCALED and a1.get(k) != a2.get(k):
                raise at.error(f"node {v}: {k} is {a1.get(k)!r} at batch {at.b1} and "
                               f"{a2.get(k)!r} at batch {at.b2}; only sizes may change with "
                               "the batch size")
        a = dict(a1)
        a["inputs"] = [self._input(v, x1, x2, at) for x1, x2 in zip(a1["inputs"], a2["inputs"])]
        a["outputs"] = [[at.shape(s1, s2, f"node {v} output"), d, dev]
                        for (s1, d, dev), (s2, _, _) in zip(a1["outputs"], a2["outputs"])]
        a["flops"] = at.rounded(a1["flops"], a2["flops"], f"node {v} FLOPs")
        return a

    @staticmethod
    def _input(v, x1, x2, at):
        if x1[0] == "node" or x2[0] == "node":
            if x1 != x2:
                raise at.error(f"node {v}: its inputs are wired differently at batch sizes "
                               f"{at.b1} and {at.b2}")
            return list(x1)
        kind, s1, dtype, device = x1
        return [kind, at.shape(s1, x2[1], f"node {v} input"), dtype, device]

    def build(self, like, *, labels, edges, cost, memory, attrs, facts):
        flop_unit = like.flop_unit
        if like.cost_model == "flops":
            cost, flop_unit = _build.flop_costs({v: attrs[v]["flops"] for v in labels},
                                                TARGET_TOTAL_COST)
        return TracedGraph(labels, edges, cost, memory, attrs, facts=facts,
                           cost_model=like.cost_model, flop_unit=flop_unit,
                           time_unit=like.time_unit, device=like.device)


_FRONT = _Torch()


def extrapolate(graphs: Mapping[int, TracedGraph], batch_size: int) -> TracedGraph:
    """Return the traced graph of a training step at another batch size, from two traces.

    Parameters
    ----------
    graphs : dict of int to TracedGraph
        Graphs from :func:`torch_ext.trace` at two (or more) batch sizes; the two smallest are
        used.
    batch_size : int

    Returns
    -------
    TracedGraph
        The same operations; every byte count of the facts, M_v, every tensor shape and every
        node's FLOPs affine in the batch size through the two traces
        (:func:`lowerset.batching.extrapolate`); costs in FLOP units of the new total (or
        profiled times, extrapolated). :class:`RecomputeContext` accepts strategies planned
        on it at `batch_size`.

    Raises
    ------
    BatchScalingError
        If fewer than two graphs are given, or they differ in anything but sizes (operations,
        wiring, orders, what each backward reads, random or pinned operations), or a shape
        does not extrapolate to a non-negative integer.
    """
    return cast(TracedGraph, batching.extrapolate(graphs, batch_size, _FRONT))


# -- real runs -----------------------------------------------------------------------------------


def _parameters_of(loss):
    """The leaf tensors requiring a gradient that `loss`'s autograd graph accumulates into."""
    params = {}
    for fn in reachable_nodes(loss.grad_fn):
        if type(fn).__name__ == "AccumulateGrad":
            params[id(fn.variable)] = fn.variable
    return list(params.values())


class _CpuCap:
    """On the CPU: run the step, measure its whole-step peak, compare with the limit."""

    device = "cpu"

    def run(self, step, limit, resident):
        """Return (fits, measured whole-step peak, None)."""
        gc.collect()
        _prepare(step)
        measured = peak_memory(step, device="cpu").peak + resident
        return measured <= limit, measured, None


class _CudaCap:
    """On CUDA: run the step with the caching allocator capped at the limit; out of memory =
    no fit.

    `cuda` is the ``torch.cuda`` module (a stand-in in the tests); `measure(step)` returns the
    peak bytes above the allocated bytes at the start (default :func:`torch_ext.peak_memory`).
    """

    def __init__(self, device, cuda=None, measure=None):
        self.device = str(device)
        self.cuda = cuda or torch.cuda
        self.measure = measure or (lambda step: peak_memory(step, device=device).peak)
        self._index = torch.device(device).index

    def run(self, step, limit, resident):
        """Return (fits, measured peak or None, error message or None, the most bytes the
        caching allocator reserved during the step: ``max_memory_reserved``, its cached free
        blocks and segment rounding included, what the cap bounds)."""
        cuda, dev = self.cuda, self._index
        old = cuda.get_per_process_memory_fraction(dev)
        total = cuda.get_device_properties(dev).total_memory
        gc.collect()
        cuda.empty_cache()
        _prepare(step)
        base = cuda.memory_allocated(dev)
        cuda.set_per_process_memory_fraction(min(1.0, limit / total), dev)
        cuda.reset_peak_memory_stats(dev)
        try:
            peak = self.measure(step)
        except cuda.OutOfMemoryError as e:
            return False, None, f"{type(e).__name__}: {e}", cuda.max_memory_reserved(dev)
        finally:
            cuda.set_per_process_memory_fraction(old, dev)
            gc.collect()
            cuda.empty_cache()
        measured = base + int(peak)
        return measured <= limit, measured, None, cuda.max_memory_reserved(dev)


def _make_step(loss_fn, b, strategy, params, with_grads=()):
    """One training step at batch b (under `strategy`, or plain when None). Before it the
    parameters' gradients are None or, for those in `with_grads`, zeros, made by its
    ``prepare()``, which a cap calls before it measures (gradients that exist when the step
    starts); after it they are None, or, with `with_grads`, left until the next
    ``prepare()`` (freed inside the measure, memory allocated before it would make the
    profiler warn)."""
    def prepare():
        for p in params:
            p.grad = None
        for p in with_grads:
            p.grad = torch.zeros_like(p)

    def step():
        ctx = contextlib.nullcontext() if strategy is None else RecomputeContext(strategy)
        with ctx:
            loss = loss_fn(b)
            loss.backward()
        del loss
        for p in () if with_grads else params:
            p.grad = None
    step.prepare = prepare  # type: ignore[attr-defined]  # a function attribute (_prepare)
    return step


def _prepare(step):
    """Make the gradients `step` starts with (see :func:`_make_step`), if it has any."""
    prepare = getattr(step, "prepare", None)
    if prepare is not None:
        prepare()


class _KeepState:
    """The parameters' gradients, the random generators and, with a model, its buffers: put
    back on exit.

    The gradients wait on the host, set to None on the parameters, and go back to each
    parameter's device on exit (the same tensors on the CPU, copies on a GPU): a training step
    starts without them (``zero_grad``) or with zeros of its own (gradient accumulation), and
    kept on the GPU they would sit under the real steps' cap and in the measured base."""

    def __init__(self, params, model):
        self.grads = [(p, None if p.grad is None else p.grad.cpu()) for p in params]
        for p in params:
            p.grad = None
        self.rng = torch.get_rng_state()
        self.cuda_rng = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
        self.buffers = [] if model is None else [(b, b.detach().clone())
                                                 for b in model.buffers()]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for p, g in self.grads:
            p.grad = None if g is None else g.to(p.device)
        torch.set_rng_state(self.rng)
        if self.cuda_rng is not None:
            torch.cuda.set_rng_state_all(self.cuda_rng)
        with torch.no_grad():
            for b, values in self.buffers:
                b.copy_(values)
        return False


# -- the search ----------------------------------------------------------------------------------


def max_batch_size(
        loss_fn: Callable[[int], torch.Tensor], memory_limit: int | float | str,
        planner: str | Callable[[lowerset.Graph, int], lowerset.CanonicalStrategy] | None
        = "lowerset", *, method: str = "auto",
        params: torch.nn.Module | Iterable[torch.Tensor] | None = None,
        model: torch.nn.Module | None = None, trace_batches: Sequence[int] = (2, 4),
        max_batch: int = 1 << 16, traced: Mapping[int, TracedGraph] | None = None,
        max_steps: int | None = None, **trace_kwargs: Any) -> BatchSizeResult:
    """Return the largest batch whose PyTorch training step fits `memory_limit` bytes.

    See the module docstring for what "fits" means on the CPU and on CUDA, and
    :mod:`lowerset.batching` for the search (trace at small batches, predict with the
    schedule, confirm with real steps).

    Parameters
    ----------
    loss_fn : callable
        ``loss_fn(batch_size)`` runs the forward pass on a batch of that size and returns the
        loss (a one-element tensor; what :func:`torch_ext.trace` takes, given a batch size),
        in the model's mode (``model.train()`` first).
    memory_limit : int, float or str
        Bytes of the whole training step (forward, backward, parameters' gradients;
        parameters and inputs counted), or a size such as ``"11.4GB"``
        (:func:`lowerset.units.parse_size`).
    planner : None, "chen", "lowerset" or callable
        None: the plain step (no recomputation); "chen": Chen's sqrt(n)
        (:func:`lowerset.baselines.chen_sqrtn`); "lowerset": :func:`lowerset.solve` at
        `memory_limit`; a callable ``planner(graph, memory_limit)`` returns a
        :class:`lowerset.CanonicalStrategy` or raises :class:`lowerset.InfeasibleBudgetError`.
    method : {"auto", "exact", "ordered", "approx"}
        For "lowerset" (:func:`lowerset.solve`).
    params : torch.nn.Module or iterable of tensors, optional
        Whose gradients are set to None before each real step (or to zeros, see the module
        docstring); default `model`'s parameters, else the leaf tensors that the loss of one
        more forward pass at the smallest traced batch accumulates gradients into.
    model : torch.nn.Module, optional
        The model the step runs: where the trace finds its device (otherwise in `loss_fn`'s
        closure: pass `model` when `loss_fn` reaches the model through another function),
        checked not to be ``torch.compile``d, and its buffers put back after the real
        steps.
    trace_batches : sequence of int
        Batch sizes to trace, at least two; with three or more, the others check the
        extrapolation from the two smallest (:class:`BatchScalingError` if the plain step's
        peak is more than 5% off, or any output size differs).
    max_batch : int
        The search does not look beyond this batch size.
    traced : dict of int to TracedGraph, optional
        Graphs already traced for this `loss_fn` (``BatchSizeResult.traced``); the batch sizes
        of `trace_batches` missing from it are traced.
    max_steps : int or None
        Real runs that step away from the prediction, in each direction (steps of 1, 2, 4, ...
        batches, then a bisection; see :func:`lowerset.batching.search`); None (default): no
        bound.
    **trace_kwargs
        Passed to :func:`torch_ext.trace` (``cost_model="profile"``, ``measure_memory``,
        ``accumulate_grads=True`` for a step that starts with the gradients allocated).

    Returns
    -------
    lowerset.batching.BatchSizeResult
        ``batch_size``, ``strategy`` (None for the plain step) and ``measured_peak`` (bytes,
        the whole step, comparable with `memory_limit`), with the prediction and every real
        run; ``device`` is the traced graphs' ("cpu", "cuda:0").

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
        As :func:`torch_ext.trace`.

    Notes
    -----
    The search assumes that the predicted peak grows with the batch size. On CUDA, a step
    beyond the limit raises ``torch.cuda.OutOfMemoryError`` inside the step, which is caught
    (the step is abandoned, the context drops its state, the cap is put back and the cache
    emptied).

    References
    ----------
    .. [1] Kusumoto et al., NeurIPS 2019, Sec. 5.2 and Figure 4.

    Examples
    --------
    >>> r = max_batch_size(lambda b: F.cross_entropy(model(x[:b]), t[:b]), "4GiB",
    ...                    model=model)                                 # doctest: +SKIP
    >>> r.batch_size, r.measured_peak <= 4 * 2**30                      # doctest: +SKIP
    (96, True)
    """
    limit, batches = batching.check_arguments(memory_limit, planner, trace_batches)
    # a partial: the trace looks for the model and its device in loss_fn's own closure
    # TracedGraphs: trace's, the caller's, and _FRONT's (which builds TracedGraphs)
    graphs = cast(dict[int, TracedGraph], batching.traced_graphs(
        lambda b: trace(functools.partial(loss_fn, b), model=model, **trace_kwargs), batches,
        traced, _FRONT))
    params = _params(params, model, loss_fn, graphs)
    device = next(iter(graphs.values())).device
    cap = _CudaCap(device) if torch.device(device).type == "cuda" else _CpuCap()
    return _search(loss_fn, limit, planner, method, params, graphs, max_batch, max_steps, cap,
                   model)


def _params(params, model, loss_fn, traced):
    """The tensors whose gradients the real steps clear: `params`, `model`'s, or those one
    forward pass at the smallest traced batch reads."""
    if params is None and model is not None:
        params = model
    if params is None:
        return _parameters_of(loss_fn(min(traced)))
    if isinstance(params, torch.nn.Module):
        return list(params.parameters())
    return list(params)


def _accumulating(params, loss_fn, traced):
    """The parameters whose gradients exist when a real step starts: none, unless the traced
    graphs say that gradients exist then (``grads_at_start``); then those of `params` that
    the loss of one forward pass at the smallest traced batch accumulates into."""
    if not traced[min(traced)].facts.grads_at_start:
        return []
    reached = {id(p) for p in _parameters_of(loss_fn(min(traced)))}
    return [p for p in params if id(p) in reached]


def _search(loss_fn, limit, planner, method, params, traced, max_batch, max_steps, cap,
            model=None):
    """:func:`lowerset.batching.search` with PyTorch's real step (separate so that the device
    is injectable), the gradients, random generators and `model`'s buffers put back after."""
    def run(b, strategy, graph):
        return cap.run(_make_step(loss_fn, b, strategy, params, with_grads), limit,
                       graph.facts.resident)

    with _KeepState(params, model):
        with_grads = _accumulating(params, loss_fn, traced)
        return batching.search(traced, limit, run, planner, method, front=_FRONT,
                               max_batch=max_batch, max_steps=max_steps, device=cap.device)
