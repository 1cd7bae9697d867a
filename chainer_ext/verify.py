"""Check once that a model trains the same under a strategy: one plain step and one step under
:class:`RecomputeHook` from the same starting state, compared bitwise."""

from collections.abc import Callable, Iterable, Mapping

import chainer
import numpy as np

import lowerset
from lowerset.verifying import VerificationError, VerifyReport, compare

from . import _backend, _effects
from ._chainer_internals import grad_or_none
from .hook import RecomputeHook

__all__ = ["verify", "VerifyReport", "VerificationError"]

#: The seed of the CuPy generators both runs draw from (any fixed value: the runs must agree).
_CUPY_SEED = 0


def verify(step: Callable[[], chainer.Variable], strategy: lowerset.Strategy, *,
           model: chainer.Link | None = None,
           params: (chainer.Link | Iterable[chainer.Parameter]
                    | Mapping[str, chainer.Parameter] | None) = None,
           raise_on_mismatch: bool = False) -> VerifyReport:
    """Run `step` once plainly and once under ``RecomputeHook(strategy)`` from the same state,
    and compare the loss, the gradients and the persistent values bitwise.

    Each run starts from the state before the call: parameters, their gradients, persistent
    values and NumPy's global random state are saved first and put back before the hooked run.
    Afterwards they are put back again: ``verify`` leaves the model as it was before the call
    (no step is taken). CuPy's global generators cannot be saved, so each run draws from new
    ones seeded alike (:func:`chainer_ext._effects.seeded_cupy_random`) and the caller's are put
    back afterwards, not advanced.

    Parameters
    ----------
    step : callable
        Takes no argument and runs one forward pass, returning the loss Variable; ``verify``
        calls ``backward()`` on it. It runs under the caller's configuration (set
        ``chainer.using_config("train", True)`` around ``verify`` or inside `step`).
    strategy : lowerset.CanonicalStrategy or lowerset.DropSetStrategy
        Planned on :func:`chainer_ext.trace` of the same step.
    model : chainer.Link, optional
        Names the parameters (``namedparams`` paths) and persistent values (``namedlinks`` and
        each link's persistent names, BatchNormalization's ``avg_mean`` for instance).
    params : chainer.Link or iterable of chainer.Parameter or dict, optional
        The parameters to compare, if not `model`'s. Without `model` and `params`, the
        parameters are those the step's graph uses, named ``"<Function>#<position>/<name>"``,
        and the persistent values are the arrays the step's functions update in place (named
        ``"<Function>#<position>.<attribute>"``).
    raise_on_mismatch : bool
        Raise :class:`VerificationError` (an ``AssertionError``) instead of returning a report
        that is not ok.

    Returns
    -------
    lowerset.verifying.VerifyReport
        Values named ``"loss"``, ``"grad <parameter>"`` (parameter order), ``"persistent
        <name>"``; ``recomputed`` is ``hook.last_iteration["recomputed"]``.

    Raises
    ------
    VerificationError
        With `raise_on_mismatch`, if the report is not ok.
    StrategyMismatchError
        If the step does not match the strategy's graph (from the hook).
    """
    state = _State(model, params)
    state.save_start()
    try:
        with _effects.seeded_cupy_random(_CUPY_SEED):
            loss, watch = _run(step, None)
        state.adopt(watch)
        plain = state.result(loss)
        state.restore_start()
        hook = RecomputeHook(strategy, record=True)
        with _effects.seeded_cupy_random(_CUPY_SEED):
            loss, _ = _run(step, hook)
        hooked = state.result(loss)
    finally:
        state.restore_start()
    report = _compare(plain, hooked, hook)
    if raise_on_mismatch and not report.ok:
        raise VerificationError(report)
    return report


# -- state ----------------------------------------------------------------------------------------


class _State:
    """Parameters, gradients, persistent values and NumPy's random state of a step."""

    def __init__(self, model, params):
        self.params = _named_params(model, params)      # name -> Parameter
        self.persist = _named_persistents(model)        # name -> (owner, attribute)
        self.found = {}                                 # name -> (array, value before)
        self.start = None

    def save_start(self):
        self.start = (np.random.get_state(),
                      {k: _copy(grad_or_none(p)) for k, p in self.params.items()},
                      {k: _copy(p.array) for k, p in self.params.items()},
                      {k: _copy(getattr(o, a)) for k, (o, a) in self.persist.items()})

    def adopt(self, watch):
        """Take what a plain run found: the arrays its functions updated in place (without
        `model`), and its parameters with their gradients before it (without `model` and
        `params`)."""
        if not self.persist:
            self.found = watch.changed
        if self.params:
            return
        self.params = watch.params
        rng, _, _, persist = self.start
        self.start = (rng, dict(watch.grads), {k: _copy(p.array) for k, p in
                                               self.params.items()}, persist)

    def restore_start(self):
        rng, grads, arrays, persist = self.start
        np.random.set_state(rng)
        for k, p in self.params.items():
            _put(p, "array", arrays[k])
            p.grad = _copy(grads[k])
        for k, (o, a) in self.persist.items():
            _put(o, a, persist[k])
        for a, before in self.found.values():
            a[...] = before

    def result(self, loss):
        out = {"loss": _copy(loss.array)}
        for k, p in self.params.items():
            out["grad " + k] = _copy(grad_or_none(p))
        for k, (o, a) in self.persist.items():
            out["persistent " + k] = _copy(getattr(o, a))
        for k, (a, _) in self.found.items():
            out["persistent " + k] = a.copy()
        return out


def _named_params(model, params):
    src = model if params is None else params
    if src is None:
        return {}
    if isinstance(src, chainer.Link):
        return dict(src.namedparams())
    if isinstance(src, dict):
        return dict(src)
    return {f"{p.name}#{i}": p for i, p in enumerate(src)}


def _named_persistents(model):
    if model is None:
        return {}
    return {f"{path}/{name}": (link, name) for path, link in model.namedlinks()
            for name in sorted(link._persistent)}


def _copy(v):
    if v is None:
        return None
    if isinstance(v, _backend.array_types()):
        return v.copy()
    return v


def _put(obj, attr, value):
    now = getattr(obj, attr)
    if value is not None and now is not None and isinstance(now, _backend.array_types()) \
            and now.shape == value.shape:
        now[...] = value
    else:
        setattr(obj, attr, _copy(value))


# -- one run --------------------------------------------------------------------------------------


class _Watch(chainer.FunctionHook):
    """Finds the parameters a plain step uses (with their gradients before backward) and the
    arrays its functions update in place (with their values before)."""

    name = "chainer_ext_verify"

    def __init__(self):
        self.funcs, self.params, self.grads, self.changed = [], {}, {}, {}
        self._depth, self._types = 0, _backend.array_types()
        self._copies = []

    def forward_preprocess(self, function, in_data):
        self._depth += 1
        if self._depth == 1 and chainer.config.enable_backprop:
            arrays = [(f"{type(function).__name__}#{len(self.funcs)}.{k}", v, v.copy())
                      for obj in _effects.roots(function).values()
                      for k, v in vars(obj).items() if isinstance(v, self._types)]
            self._copies.append(arrays)
            self.funcs.append(function)

    def forward_postprocess(self, function, in_data):
        self._depth -= 1
        if self._depth == 0 and self.funcs and self.funcs[-1] is function:
            for name, v, before in self._copies.pop():
                if not _effects.same_bits(v, before):
                    self.changed[name] = (v, before)

    def collect_params(self):
        """Read the inputs of the functions seen (Chainer sets them after the hooks run)."""
        seen = set()
        for i, f in enumerate(self.funcs):
            for node in f.inputs:
                var = node.get_variable_or_none()
                if isinstance(var, chainer.Parameter) and id(var) not in seen:
                    seen.add(id(var))
                    name = f"{type(f).__name__}#{i}/{var.name}"
                    self.params[name], self.grads[name] = var, _copy(grad_or_none(var))
        self.funcs = []


def _run(step, hook):
    """One step: plain (watched, see :class:`_Watch`) if `hook` is None, else under `hook`.
    Return the loss Variable and the watch (None under a hook)."""
    if hook is not None:
        with hook:
            loss = step()
            loss.backward()
        return loss, None
    watch = _Watch()
    with watch:
        loss = step()
    watch.collect_params()
    loss.backward()
    return loss, watch


# -- comparison -----------------------------------------------------------------------------------


def _diff(a, b):
    """(whether two values that are not None differ bitwise, their max absolute difference:
    inf if the shapes or dtypes differ)."""
    if not isinstance(a, _backend.array_types()):
        return (a != b), (0.0 if a == b else float("inf"))
    if type(a) is not type(b) or a.shape != b.shape or a.dtype != b.dtype:
        return True, float("inf")
    if _effects.same_bits(a, b):
        return False, 0.0
    d = np.abs(_to_numpy(a).astype(np.float64) - _to_numpy(b).astype(np.float64))
    return True, float(np.nanmax(d)) if d.size and not np.isnan(d).all() else float("inf")


def _to_numpy(a):
    return a.get() if _backend.is_cupy_array(a) else np.asarray(a)


def _compare(plain, hooked, hook):
    """The report of :func:`lowerset.verifying.compare` on the two runs' values."""
    return compare(plain, hooked, _diff, events_equal=hook.events == list(hook.schedule.events),
                   recomputed=hook.last_iteration["recomputed"])
