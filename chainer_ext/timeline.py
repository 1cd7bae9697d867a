"""The measured memory timeline of one training step, on the events of its schedule.

:func:`measure_timeline` runs a step (plain, or under :class:`RecomputeHook`) and samples the bytes
in use after every outermost forward and backward call, on CPU with :mod:`tracemalloc` and on
GPU from CuPy's pool. Each sample is placed at the index of the matching ``forward`` or
``backward`` event of the schedule, so ``lowerset.plot.timeline(schedule, measured=...)`` draws
it over the predicted timeline. Recomputations and frees happen inside the hook's callbacks and
are not sampled on their own: a sample after a backward call includes the values the hook frees
in that callback (the schedule's next events) and the output gradients Chainer still holds until
the next backward call starts, so single samples differ from the schedule by a few percent of
the peak.
"""

import contextlib
import tracemalloc
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import chainer
import numpy as np
import numpy.typing as npt

import lowerset

from . import _backend
from .hook import RecomputeHook

__all__ = ["measure_timeline", "MeasuredTimeline"]


@dataclass
class MeasuredTimeline:
    """Bytes in use, measured, at some events of a schedule.

    Attributes
    ----------
    index : ndarray of int64
        Event indexes (into ``schedule.events``), ascending.
    bytes : ndarray of int64
        Whole-step bytes in use right after each of those events: the level above the start of
        the step plus the resident bytes (parameters and inputs) of the graph.
    peak : int
        The step's measured peak (highest point between samples included), whole-step bytes.
    """

    index: npt.NDArray[np.int64]
    bytes: npt.NDArray[np.int64]
    peak: int


class _Sampler(chainer.FunctionHook):
    name = "chainer_ext_timeline"

    def __init__(self, read):
        self.read = read
        self.forward_pos, self.samples = {}, []
        self._depth = self._bdepth = 0
        self._n = 0

    def forward_preprocess(self, function, in_data):
        self._depth += 1

    def forward_postprocess(self, function, in_data):
        self._depth -= 1
        if self._depth or self._bdepth or not chainer.config.enable_backprop:
            return
        self.forward_pos[id(function)] = self._n
        self.samples.append(("forward", self._n, self.read()))
        self._n += 1

    def backward_preprocess(self, function, in_data, out_grad):
        self._bdepth += 1

    def backward_postprocess(self, function, in_data, out_grad):
        self._bdepth -= 1
        if self._bdepth:
            return
        j = self.forward_pos.get(id(function))
        if j is not None:
            self.samples.append(("backward", j, self.read()))


def measure_timeline(loss_fn: Callable[[], chainer.Variable],
                     plan: lowerset.Strategy | lowerset.Graph, *,
                     params: chainer.Link | Iterable[chainer.Parameter] | None = None
                     ) -> MeasuredTimeline:
    """Run one training step and return its memory measured at the schedule's events.

    Parameters
    ----------
    loss_fn : callable
        Takes no argument, runs the forward pass and returns the loss Variable (what
        :func:`chainer_ext.trace` took for `plan`'s graph).
    plan : lowerset.CanonicalStrategy, lowerset.DropSetStrategy or lowerset.Graph
        A strategy (the step runs under :class:`RecomputeHook`) or the traced graph (the plain
        step).
    params : chainer.Link or iterable of chainer.Parameter, optional
        Whose gradients are cleared before the step.

    Returns
    -------
    MeasuredTimeline

    Raises
    ------
    TypeError
        If `plan` is neither a strategy nor a graph.
    RuntimeError
        On CPU, if tracemalloc is already tracing.
    StrategyMismatchError
        As :class:`RecomputeHook`.

    Examples
    --------
    >>> m = measure_timeline(lambda: model(x, t), strategy, params=model)   # doctest: +SKIP
    >>> lowerset.plot.timeline(strategy.schedule, measured=m)              # doctest: +SKIP
    """
    hook: contextlib.AbstractContextManager[Any]
    if isinstance(plan, lowerset.STRATEGY_TYPES):
        graph, hook = plan.graph, RecomputeHook(plan)
    elif isinstance(plan, lowerset.Graph):
        graph, hook = plan, contextlib.nullcontext()
    else:
        raise TypeError(f"plan must be a lowerset.CanonicalStrategy, a lowerset.DropSetStrategy "
                        f"or a lowerset.Graph, got {type(plan).__name__}")
    sched = lowerset.schedule(plan)
    where = {}
    for i, e in enumerate(sched.events):
        if e.kind in ("forward", "backward"):
            where[e.kind, graph.index[e.node]] = i
    if params is not None:
        params = list(params.params()) if isinstance(params, chainer.Link) else list(params)
        for p in params:
            p.cleargrad()
    gpu = any(_backend.is_cupy_array(p.array) for p in params or ())
    if gpu:  # pragma: no cover - GPU
        probe = _backend.pool_peak_hook()
        stack = contextlib.ExitStack()
        stack.enter_context(probe)
        base = 0  # the probe counts the blocks handed out since it was entered

        def read():
            return probe.current
    else:
        if tracemalloc.is_tracing():
            raise RuntimeError("tracemalloc is already tracing; stop it before measuring")
        tracemalloc.start()
        stack = contextlib.ExitStack()
        stack.callback(tracemalloc.stop)
        base = tracemalloc.get_traced_memory()[0]

        def read():
            return tracemalloc.get_traced_memory()[0]
    sampler = _Sampler(read)
    with stack:
        with hook, sampler:  # the sampler after the hook: it sees the hook's frees
            loss = loss_fn()
            loss.backward()
        peak = probe.peak if gpu else tracemalloc.get_traced_memory()[1]
    del loss
    resident = graph.facts.resident
    pts = sorted((where[k, j], b) for k, j, b in sampler.samples if (k, j) in where)
    idx = np.array([i for i, _ in pts], dtype=np.int64)
    val = np.array([b - base + resident for _, b in pts], dtype=np.int64)
    return MeasuredTimeline(index=idx, bytes=val, peak=int(peak - base + resident))
