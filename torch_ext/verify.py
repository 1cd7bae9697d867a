"""Check once that a model trains the same under a plan: one plain step and one step under
:class:`RecomputeContext` from the same starting state, compared bitwise
(:mod:`lowerset.verifying` makes the report)."""

from collections.abc import Callable, Iterable, Mapping

import torch

import lowerset
from lowerset.exceptions import ArgumentTypeError
from lowerset.verifying import VerificationError, VerifyReport, compare

from . import _ops
from ._compat import TorchDispatchMode, WeakIdKeyDictionary
from .executor import RecomputeContext

__all__ = ["verify", "VerifyReport", "VerificationError"]


def verify(step: Callable[[], torch.Tensor],
           strategy: lowerset.Strategy | list[lowerset.Strategy]
           | tuple[lowerset.Strategy, ...], *, model: torch.nn.Module | None = None,
           params: torch.nn.Module | Mapping[str, torch.Tensor] | Iterable[torch.Tensor]
           | None = None, raise_on_mismatch: bool = False, check: bool = True) -> VerifyReport:
    """Run `step` once plainly and once under ``RecomputeContext(strategy)`` from the same
    state, and compare the loss, the parameters' gradients and the buffers bitwise.

    Each run starts from the state before the call: the parameters, their gradients, the
    buffers and the random generators (the CPU generator and, once CUDA is initialized, every
    CUDA device's) are saved first and put back before the planned run. Afterwards they are
    put back again: ``verify`` leaves the model as it was before the call (no step is taken;
    each parameter keeps its gradient tensor, with its values before the call). Where the
    strategy's graph has gradients at the start (``trace(..., accumulate_grads=True)``), a
    parameter whose gradient is None gets a zero gradient for both runs, so that both add
    into one as gradient accumulation does (it is None again afterwards).

    Parameters
    ----------
    step : callable
        Takes no argument and runs one forward pass, returning the loss (a one-element
        tensor); ``verify`` calls ``backward()`` on it. It runs in the model's mode (call
        ``model.train()`` first for dropout and BatchNorm's batch statistics).
    strategy : lowerset.CanonicalStrategy or lowerset.DropSetStrategy, or a sequence of them
        Planned on :func:`torch_ext.trace` of the same step; a sequence holds one strategy per
        branch of the step's code (:class:`RecomputeContext`), planned on traces with the
        same gradients at the start.
    model : torch.nn.Module, optional
        Names the parameters (``named_parameters``) and the buffers (``named_buffers``:
        BatchNorm's ``running_mean``, ``running_var``, ``num_batches_tracked``).
    params : torch.nn.Module, dict of str to tensor or iterable of tensors, optional
        The parameters to compare, if not `model`'s (an iterable's are named ``param#<i>``).
        Without `model`, the buffers are the tensors the plain step's operations write in
        place among those made before the step; without `model` and `params`, the parameters
        are the leaf tensors requiring a gradient that the step's operations read. Both are
        named ``<operation>#<position>[<argument>]`` after the first operation (in dispatch
        order) that reads them, for instance ``aten.convolution.default#0[1]``; to find the
        buffers, the plain run copies each tensor made before the step that it reads without
        a gradient (the batch too).
    raise_on_mismatch : bool
        Raise :class:`VerificationError` (an ``AssertionError``) instead of returning a report
        that is not ok.
    check : bool
        Run the planned step with ``RecomputeContext(check=True)``: each recomputed value is
        compared with a fingerprint of the value its operation made in the forward pass, and
        the first difference raises :class:`~torch_ext.RecomputationError`, naming the
        operation (where the gradients would only show that something differs).

    Returns
    -------
    lowerset.verifying.VerifyReport
        Values named ``"loss"``, ``"grad <parameter>"`` (parameter order), ``"buffer <name>"``;
        a gradient that is None in both runs is equal. ``recomputed`` is the context's
        ``last_step["recomputed"]``; ``events_equal`` compares its recorded events with the
        schedule's (of the branch the step took, in the order the context runs them:
        ``RecomputeContext.expected_events``).

    Raises
    ------
    VerificationError
        With `raise_on_mismatch`, if the report is not ok.
    TypeError
        If `strategy` is not a :class:`lowerset.CanonicalStrategy` or a
        :class:`lowerset.DropSetStrategy` (from the context).
    lowerset.ArgumentTypeError
        If `params` is not one of the types above.
    StrategyMismatchError
        If the step does not match the strategy's graph (from the context).
    RecomputationError
        With `check`, if a recomputed value differs from the forward pass's (from the
        context); the model is put back as it was first.

    Examples
    --------
    >>> report = verify(lambda: F.cross_entropy(model(x), t), plan, model=model)  # doctest: +SKIP
    >>> report.ok, report.first_mismatch  # doctest: +SKIP
    >>> report.max_abs_diff, report.events_equal  # doctest: +SKIP
    (True, None, 0.0, True)
    """
    ctx = RecomputeContext(strategy, record=True, model=model, check=check)
    state = _State(model, params, bool(ctx.strategy.graph.facts.grads_at_start))
    state.save_start()
    try:
        loss = state.run_plain(step)
        plain = state.result(loss)
        del loss
        state.restore_start()
        with ctx:
            loss = step()
            loss.backward()
        planned = state.result(loss)
        del loss
    finally:
        state.restore_start(final=True)
    report = compare(plain, planned, _diff, events_equal=ctx.events == ctx.expected_events,
                     recomputed=ctx.last_step["recomputed"])
    if raise_on_mismatch and not report.ok:
        raise VerificationError(report)
    return report


# -- state ----------------------------------------------------------------------------------------


class _State:
    """The parameters (with their gradients), the buffers and the random generators of a
    step: saved at the start, put back before the planned run and at the end. With
    `start_grads`, a parameter without a gradient gets a zero one for both runs."""

    rng: "_Random"   # from save_start()

    def __init__(self, model, params, start_grads=False):
        self.start_grads = start_grads
        self.params = _named_params(model, params)   # name -> tensor
        self.buffers = {} if model is None else dict(model.named_buffers())
        self.watch_buffers = model is None
        self.found = {}                                # name -> (tensor, value before)
        self.saved = []                                # _Saved of each parameter and buffer

    def save_start(self):
        self.rng = _Random.save()
        self.saved = [_Saved(t, self.start_grads) for t in self.params.values()]
        self.saved += [_Saved(t) for t in self.buffers.values()]

    def run_plain(self, step):
        """The plain step, watched where parameters or buffers are to be found; return the
        loss."""
        watch = None
        if not self.params or self.watch_buffers:
            watch = _Watch(find_params=not self.params, start_grads=self.start_grads)
            with watch:
                loss = step()
        else:
            loss = step()
        if watch is not None:
            self.params.update(watch.params)
            self.saved += watch.saved
        loss.backward()
        if watch is not None and self.watch_buffers:
            self.found = watch.changed()
        return loss

    def restore_start(self, final=False):
        """Put the start state back (`final`: as before the call, gradients that were None
        included)."""
        self.rng.restore()
        with torch.no_grad():
            for s in self.saved:
                s.restore(final)
            for t, before in self.found.values():
                _put(t, before)

    def result(self, loss):
        out = {"loss": loss.detach().clone()}
        for k, p in self.params.items():
            out["grad " + k] = None if p.grad is None else p.grad.detach().clone()
        for k, b in self.buffers.items():
            out["buffer " + k] = b.detach().clone()
        for k, (t, _) in self.found.items():
            out["buffer " + k] = t.detach().clone()
        return out


class _Saved:
    """A tensor's values and, for a parameter, its gradient tensor and that one's values; with
    `start_grad`, a parameter without a gradient gets a zero one now, for the runs."""

    def __init__(self, t, start_grad=False):
        self.t = t
        self.values = t.detach().clone()
        self.grad = t.grad if t.requires_grad else None
        self.grad_values = None if self.grad is None else self.grad.detach().clone()
        self.start = self.grad
        if start_grad and t.requires_grad and self.grad is None:
            self.start = t.grad = torch.zeros_like(t)

    def restore(self, final=False):
        """Put the values back (under ``torch.no_grad()``), and the same gradient tensor with
        its values: the one the runs start with, or (`final`) the one before the call."""
        _put(self.t, self.values)
        if self.t.requires_grad:
            if self.grad is not None:
                _put(self.grad, self.grad_values)
            elif self.start is not None:
                self.start.zero_()
            self.t.grad = self.grad if final else self.start


def _put(t, values):
    """Write `values` into `t` where they differ (writing bumps its version counter)."""
    if not _same_bits(t, values):
        t.detach().copy_(values)


def _named_params(model, params):
    src = model if params is None else params
    if src is None:
        return {}
    if isinstance(src, torch.nn.Module):
        return dict(src.named_parameters())
    if isinstance(src, dict):
        return dict(src)
    if isinstance(src, torch.Tensor):
        raise ArgumentTypeError("params must be a Module, a dict of tensors or an iterable of "
                                "tensors, got one tensor: pass [tensor]")
    try:
        return {f"param#{i}": p for i, p in enumerate(src)}
    except TypeError:
        raise ArgumentTypeError(f"params must be a Module, a dict of tensors or an iterable of "
                                f"tensors, got {type(src).__name__}") from None


class _Random:
    """The CPU generator's state and, once CUDA is initialized, every CUDA device's."""

    cpu: torch.Tensor
    cuda: list[torch.Tensor] | None

    @classmethod
    def save(cls):
        self = cls()
        self.cpu = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
        return self

    def restore(self):
        torch.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)


# -- the plain run's watch ------------------------------------------------------------------------


class _Watch(TorchDispatchMode):
    """Sees the plain forward pass: the tensors made before the step that its operations read,
    each at its first read: leaves requiring a gradient (the parameters, with their state
    saved) and the others (copied, to find those the step writes in place)."""

    def __init__(self, find_params, start_grads=False):
        super().__init__()
        self.find_params = find_params
        self.start_grads = start_grads
        self.made = WeakIdKeyDictionary()    # tensors the step's operations returned
        self.seen = WeakIdKeyDictionary()
        self.params, self.saved, self.copies = {}, [], {}
        self.index = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        for i, t in enumerate(_ops.call_tensors(args, kwargs)):
            if t in self.made or t in self.seen:
                continue
            self.seen[t] = True
            name = f"{func}#{self.index}[{i}]"
            if t.requires_grad and t.is_leaf:
                if self.find_params:
                    self.params[name] = t
                    self.saved.append(_Saved(t, self.start_grads))
            else:
                self.copies[name] = (t, t.detach().clone())
        out = func(*args, **kwargs)
        for o in _ops.output_tensors(out):
            self.made[o] = True
        self.index += 1
        return out

    def changed(self):
        """Name -> (tensor, value before) of the tensors the step wrote in place."""
        return {k: (t, before) for k, (t, before) in self.copies.items()
                if not _same_bits(t, before)}


# -- comparison -----------------------------------------------------------------------------------


def _raw(t):
    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def _same_bits(a, b):
    return (a.shape == b.shape and a.dtype == b.dtype and a.device == b.device
            and torch.equal(_raw(a), _raw(b)))


def _diff(a, b):
    """(whether two tensors differ bitwise (NaN-safe: raw bytes), their largest absolute
    difference in float64: inf if shapes, dtypes or devices differ, or every difference is
    NaN)."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return (a != b), (0.0 if a == b else float("inf"))
    if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device:
        return True, float("inf")
    if _same_bits(a, b):
        return False, 0.0
    d = (a.detach().to("cpu", torch.float64) - b.detach().to("cpu", torch.float64)).abs()
    d = d[~torch.isnan(d)]
    return True, float(d.max()) if d.numel() else float("inf")
