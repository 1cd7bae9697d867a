"""Execute the schedule of a canonical strategy (paper, Sec. 3) in a Chainer training step.

The hook lets Chainer build its usual graph and run its usual backward pass. It walks the events
of ``lowerset.schedule(strategy)`` in step with Chainer: each ``forward`` and ``backward`` event
is a function application or backward call that Chainer makes (the hook checks that it is the
expected one); between them, the hook performs the events that are its own (``drop``,
``free_value``, ``free_state``, ``recompute``) and notes the ones that are Chainer's rules
(``seed_grad``, ``free_grad``). Every decision — what to keep, drop, recompute and free, and
when — is the schedule's; the hook only carries it out.
"""

import contextlib
import threading
from types import TracebackType

import chainer
import numpy as np

import lowerset

from . import _backend, _effects, _freed
from . import _chainer_internals as _ci
from ._backend import Array
from .exceptions import HookUsageError, StrategyMismatchError
from .trace import array_attr_ids, forward_state, get_state, output_arrays, output_attrs, set_state

__all__ = ["RecomputeHook", "LivenessHook"]



def _fmt_sig(name, shapes):
    return f"{name}({', '.join(f'{tuple(s)}:{d}' for s, d in shapes)})"


def _matches(items, sig):
    """Whether `items` (arrays or variable nodes; None matches any entry) have the shapes and
    dtypes of `sig`, a tuple of (shape, dtype). A loop: this runs for every function."""
    if len(items) != len(sig):
        return False
    for a, (shape, dtype) in zip(items, sig):
        if a is not None and (a.shape != shape or a.dtype != dtype):
            return False
    return True


def _nbytes(arrays):
    return int(sum(a.nbytes for a in arrays if a is not None))


class RecomputeHook(chainer.FunctionHook):
    """Run a training step under the schedule of a canonical strategy (paper, Sec. 3).

    This hook overrides ``forward_preprocess``, ``forward_postprocess``, ``backward_preprocess``
    and ``backward_postprocess``. Register it globally with ``with hook:`` around one or more
    training steps (a forward pass and its backward pass each; registering it on a single
    function with ``FunctionNode.add_hook`` is not supported). Function applications are matched
    to the strategy's graph by position in forward order, so the graph must come from
    :func:`chainer_ext.trace` of the same model, batch size and input shapes. A step ends when
    its backward pass has run every backward call of the schedule; after that, applications
    that do not match function 0 of the graph (metrics such as ``F.accuracy``) are not part of a
    step, and the next application that matches it starts the next step.

    Parameters
    ----------
    strategy : lowerset.CanonicalStrategy, lowerset.DropSetStrategy or None
        A strategy planned on a graph from :func:`chainer_ext.trace` (or that graph loaded from
        JSON). ``None`` (with `graph`) recomputes nothing: only liveness analysis (the strategy
        [V]).
    record : bool
        Keep the events executed in :attr:`events` (each with the bytes of the arrays it made or
        freed, measured on the real arrays), to compare with ``lowerset.schedule(strategy)``.
    name : str, optional
        Hook name (unique among registered hooks); default ``"RecomputeHook"``.
    graph : lowerset.Graph, optional
        The traced graph, needed only when `strategy` is None.

    Attributes
    ----------
    strategy : lowerset.CanonicalStrategy or lowerset.DropSetStrategy
    schedule : lowerset.Schedule
        What the hook executes.
    events : list of lowerset.Event
        With ``record=True``: the events of the last step, as executed.
    last_iteration : dict
        After each ``with`` block: ``"discarded"`` (labels dropped in forward), ``"recomputed"``
        (labels recomputed in backward, each at most once) and ``"freed"`` (labels freed by
        liveness analysis), in the order it happened.

    Raises
    ------
    TypeError
        If `strategy` is not a CanonicalStrategy or a DropSetStrategy (or None without
        `graph`).
    StrategyMismatchError
        If the strategy's graph was not recorded by :func:`chainer_ext.trace`; and, while
        running, before the hook drops anything for a function application, if that application
        differs from the graph (function class, input or output shapes and dtypes, wiring,
        number of functions), or Chainer's backward pass runs its functions in another order
        than the traced one.
    HookUsageError
        If another RecomputeHook is already registered (nesting), the hook is in use in another
        thread, or the hook is added to a single function.

    Notes
    -----
    - A dropped value that no backward step needs is not recomputed: the realised overhead is
      at most the planned one (eq. 1).
    - Recomputation calls each function's ``forward`` under the configuration captured when it
      first ran, with ``chainer.config.in_recomputing`` set, and with what its first forward
      changed besides its outputs set back for the duration (the graph's ``attrs[v]["restore"]``
      paths, found by :func:`chainer_ext.trace`): running statistics and counters are not
      updated a second time, and NumPy's random state is replayed. A function whose forward
      reuses the random draws it keeps (``NodeFacts.stochastic``: Dropout's mask) keeps them
      until its backward; a pinned function (``NodeFacts.pinned``) is never recomputed.
    - Intermediate Variables the caller still holds lose their arrays when the schedule drops
      or frees them in forward (a recomputation puts them back); the outputs of the traced
      callable are never freed. Such a Variable keeps its shape and dtype: a floating-point one
      holds a one-element stand-in (:mod:`chainer_ext._freed`) whose values raise
      :class:`HookUsageError` when read.
    - If the forward pass ends inside the ``with`` block without a backward pass, the dropped
      values are recomputed at exit, so a backward pass outside the block still works (without
      savings).
    - If an exception leaves the ``with`` block, the hook drops its per-step state and can be
      used again; the model is untouched.
    - A Variable the caller still holds during the backward pass (the logits, to compute
      accuracy after ``backward()``) keeps its array when the schedule frees the value, as in a
      plain run: the hook drops its own references only. Values the traced step kept after its
      forward pass, or read under ``no_backprop_mode``, are never freed (see
      :func:`chainer_ext.trace`); any other value the schedule frees or drops in forward holds
      the stand-in (or None) after the step.
    - A second backward pass over a step's graph raises :class:`HookUsageError` in the first
      function whose retained arrays or state the hook freed: run the forward pass again.
    - Chainer's hooks are per thread; a RecomputeHook holds one step's state, so entering one
      hook in a second thread while it is in use raises :class:`HookUsageError` (make one hook
      per thread).

    Examples
    --------
    >>> graph = trace(lambda: F.softmax_cross_entropy(model(x), t))   # doctest: +SKIP
    >>> hook = RecomputeHook(lowerset.solve(graph, budget=2**30), record=True)  # doctest: +SKIP
    >>> with hook:                                                     # doctest: +SKIP
    ...     loss = F.softmax_cross_entropy(model(x), t)
    ...     loss.backward()
    >>> hook.events == list(hook.schedule.events)                      # doctest: +SKIP
    True

    References
    ----------
    .. [1] Kusumoto et al., NeurIPS 2019, Sec. 3 (canonical strategy, liveness analysis).
    """

    name = "RecomputeHook"
    strategy: lowerset.Strategy
    schedule: lowerset.Schedule
    events: list[lowerset.Event]
    last_iteration: dict[str, list[int]]
    _owner: int | None  # the thread using the hook (unset: none yet)

    def __init__(self, strategy: lowerset.Strategy | None = None, *,
                 record: bool = False, name: str | None = None,
                 graph: lowerset.Graph | None = None) -> None:
        if strategy is None:
            if graph is None:
                raise TypeError("RecomputeHook(None) needs graph= (liveness analysis only)")
            strategy = lowerset.CanonicalStrategy(graph, [set(graph.labels)], method="none")
        if not isinstance(strategy, lowerset.STRATEGY_TYPES):
            raise TypeError(f"strategy must be a lowerset.CanonicalStrategy or a "
                            f"lowerset.DropSetStrategy, got {type(strategy).__name__}")
        if name is not None:
            self.name = name
        self.strategy = strategy
        self.record = bool(record)
        self._prepare(strategy.graph)
        self.schedule = lowerset.schedule(strategy)
        g = strategy.graph
        plan = lowerset.EventCursor(self.schedule).plan
        self._may_recompute = {v for kind, v, _ in plan if kind == "recompute"}
        # the nodes whose forward-made state the hook looks for (a free_state event frees it;
        # record=True counts its bytes); the others skip scanning their attributes
        self._state_nodes = (set(range(g.n)) if self.record else
                             {v for kind, v, _ in plan if kind == "free_state"})
        self._alias_nodes = _nodes_freed_late(plan)
        self.events = []
        self.last_iteration = {"discarded": [], "recomputed": [], "freed": []}
        self._reset()

    # -- static checks ----------------------------------------------------------------------------

    def _prepare(self, g):
        n = g.n
        if (not g.has_facts or list(g.labels) != list(range(n))
                or any(k not in g.attrs[v] for v in g.labels
                       for k in ("function", "inputs", "outputs"))):
            raise StrategyMismatchError(
                "the strategy's graph was not recorded by chainer_ext.trace (its nodes need the "
                "labels 0..n-1, execution facts and the attrs 'function', 'inputs', 'outputs'); "
                "plan on trace(...) or load the strategy with load_strategy(path, graph=traced)")
        A = [g.attrs[j] for j in range(n)]
        self._n = n
        self._facts = g.facts.nodes
        self._names = [a["function"] for a in A]
        self._args = [[tuple(x) for x in a["inputs"]] for a in A]
        self._in_sig = []
        for j in range(n):
            sig = []
            for x in self._args[j]:
                if x[0] == "node":
                    shp, dt = A[x[1]]["outputs"][x[2]]
                else:
                    shp, dt = x[1], x[2]
                sig.append((tuple(shp), np.dtype(dt)))
            self._in_sig.append(tuple(sig))
        self._out_sig = [tuple((tuple(s_), np.dtype(d)) for s_, d in a["outputs"]) for a in A]
        self._ret_out = [tuple(f.reads_outputs) for f in self._facts]
        # (node, k) -> the nodes whose backward reads that value
        self._readers = {}
        for u, f in enumerate(self._facts):
            for p in f.reads_args:
                x = self._args[u][p]
                if x[0] == "node":
                    self._readers.setdefault((x[1], x[2]), set()).add(u)
            for k in f.reads_outputs:
                self._readers.setdefault((u, k), set()).add(u)
        # what a recomputation sets back to its value before the forward (see _effects)
        self._restore_paths = [tuple(tuple(p) for p in a.get("restore", ())) for a in A]
        self._returned = set(g.facts.returned)
        self._types = _backend.array_types()
        self._spent_fns = {}  # node -> its _spent_backward, made once

    # -- per-step state ---------------------------------------------------------------------------

    def _reset(self):
        self._phase = "idle"    # idle -> forward -> backward -> done (-> forward: next step)
        self._depth = 0         # nesting of forward applications
        self._bdepth = 0        # nesting of backward steps
        self._pos = 0           # next function application in forward order
        self._cursor = lowerset.EventCursor(self.schedule)
        self._pending = None
        self._funcs = [None] * self._n
        self._func_pos = {}
        self._held = {}         # (node, k) -> array: the values the schedule holds now
        self._ext = {}
        self._cfg = {}
        self._pre = {}          # node -> values of its restore paths before its forward
        self._before = self._in_ids = None
        self._state = [()] * self._n
        self._out_attrs = {}    # node -> {k: names of its attributes that are output k}
        self._backward_ran = set()
        self._had = {}
        self._gy = None
        self._current = None
        self._log = {"discarded": [], "recomputed": [], "freed": []}
        self._rec = []
        self._spent = set()     # nodes whose backward lost what it reads (freed values/state)

    def __enter__(self) -> "RecomputeHook":
        for h in chainer.get_function_hooks().values():
            if isinstance(h, RecomputeHook):
                raise HookUsageError(
                    f"RecomputeHook {h.name!r} is already registered; RecomputeHooks cannot be "
                    "nested (each would drop values the other needs)")
        with _OWNERS_LOCK:
            owner = getattr(self, "_owner", None)
            if owner is not None:
                raise HookUsageError(
                    f"this RecomputeHook is in use in thread {owner} (Chainer's hooks are "
                    "per thread, and a RecomputeHook holds the state of the step it runs): "
                    "make one RecomputeHook per thread, e.g. RecomputeHook(strategy) in each")
            self._owner = threading.get_ident()
        try:
            self._reset()
            self._phase = "forward"
            return super().__enter__()
        except BaseException:
            self._owner = None
            raise

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            if exc_type is None and self._phase == "forward" and self._pos:
                self._complete_pending()
                self._restore_dropped()
        finally:
            if self._phase != "done":
                self._publish()
            self._reset()
            self._owner = None
            super().__exit__(exc_type, exc, tb)

    def _publish(self):
        self.last_iteration = self._log
        if self.record:
            self.events = self._rec

    def _finish_step(self):
        """The backward pass is over: publish the step's log and events, make the functions whose
        backward lost what it reads raise a clear error on a second backward pass, and drop the
        step's state (the next function application matching function 0 starts a new step)."""
        self._publish()
        for v in self._spent:
            f = self._funcs[v]
            if f is not None:
                spent = self._spent_fns.get(v)
                if spent is None:
                    spent = self._spent_fns[v] = _spent_backward(v, self._names[v])
                f.backward = spent
        for f in self._funcs:
            if f is not None:
                f._chainer_ext_step_done = True
        self._reset()
        self._phase = "done"

    def _starts_step(self, function, in_data):
        """Whether this application is function 0 of the graph (class and input signature)."""
        return (type(function).__name__ == self._names[0]
                and _matches(in_data, self._in_sig[0]))

    def added(self, function: chainer.FunctionNode | None) -> None:
        """Chainer's FunctionHook callback on registration: only global registration.

        Parameters
        ----------
        function : chainer.FunctionNode or None
            None for a global registration (``with hook:``), the function otherwise (refused).
        """
        if function is not None:
            raise HookUsageError("register RecomputeHook globally with `with hook:`; adding it "
                                 "to a single function is not supported")

    # -- the schedule -----------------------------------------------------------------------------

    def _expect(self, kind, j):
        """The next event must be Chainer's `kind` of node `j`; step past it."""
        if self._cursor.expect(kind, j):
            return
        nxt = self._cursor.peek()
        what = ("the end of the step" if nxt is None
                else f"{nxt[0]} of function {nxt[1]} ({self._names[nxt[1]]})")
        raise StrategyMismatchError(
            f"Chainer ran the {kind} of function {j} ({self._names[j]}) where the schedule "
            f"expects {what}: the step differs from the traced one; re-trace and re-plan",
            position=j)

    def _run_own_events(self, recompute=True):
        """Carry out the events up to Chainer's next call (with `recompute` False, up to the
        next recomputation: Chainer holds the arrays of the backward call that just ended until
        it starts the next one, so recomputation waits for that)."""
        for kind, v, ks in self._cursor.own_events(recompute):
            if kind in ("drop", "free_value"):
                self._free_value(v, ks, kind)
            elif kind == "free_state":
                self._free_state(v)
            elif kind == "recompute":
                self._recompute(v)
            elif kind == "seed_grad" and self.record:
                self._note("seed_grad", v, _nbytes([self._held.get((v, ks[0]))]), ks)
            elif kind == "free_grad" and self.record:
                self._note("free_grad", v, _nbytes(self._gy))
                self._gy = None

    def _note(self, kind, v, nbytes, outputs=()):
        """Record an executed event (callers check ``self.record`` first, so that a hook that
        does not record computes no byte counts)."""
        self._rec.append(lowerset.Event(kind, v, int(nbytes), tuple(outputs)))

    # -- forward ----------------------------------------------------------------------------------

    def forward_preprocess(self, function: chainer.FunctionNode,
                           in_data: tuple[Array, ...]) -> None:
        """Chainer's callback before each forward application: check its class and input
        signature against the graph's next function, finish the previous one (its schedule
        events) and keep what its recomputation will need.

        Parameters
        ----------
        function : chainer.FunctionNode
            The function application.
        in_data : tuple of array
            Its input arrays.
        """
        phase = self._phase
        if phase not in ("forward", "done"):
            return   # idle, or a function applied by a backward step
        if self._depth:
            self._depth += 1
            return
        backprop = _ci.config_entry("enable_backprop")
        if phase == "done" and backprop and self._starts_step(function, in_data):
            self._reset()
            self._phase = phase = "forward"
        if phase == "done" or not backprop:
            self._depth = 1   # not a node (trace skips these too), or outside a step
            return
        j = self._pos
        name = type(function).__name__
        if j >= self._n:
            raise StrategyMismatchError(
                f"function {j} ({name}) is beyond the {self._n} functions of the strategy's "
                "graph: the forward pass changed (re-trace and re-plan), or a function the "
                "trace did not see runs between the forward and the backward pass (compute "
                "metrics such as F.accuracy after backward(), or under "
                "chainer.no_backprop_mode())", position=j)
        exp = self._in_sig[j]
        if name != self._names[j] or not _matches(in_data, exp):
            got = [(a.shape, a.dtype) for a in in_data]
            raise StrategyMismatchError(
                f"function {j} in forward order is {_fmt_sig(name, got)}, but the strategy's "
                f"graph has {_fmt_sig(self._names[j], exp)}: the strategy was planned for "
                "another model, batch size or input shape, or the forward pass changed; "
                "re-trace and re-plan", position=j)
        # the previous function is complete now: check it, then run the schedule up to here
        self._complete_pending()
        self._depth = 1
        self._funcs[j] = function
        self._func_pos[id(function)] = j
        if j in self._state_nodes:
            self._before = array_attr_ids(function, self._types)
            self._in_ids = {id(a) for a in in_data}
        if j in self._may_recompute:
            self._ext[j] = {p: a for p, a in enumerate(in_data)
                            if self._args[j][p][0] != "node"}
            self._cfg[j] = _ci.capture_config() + (("in_recomputing", True),)
            if self._restore_paths[j]:
                self._pre[j] = [_effects.capture(function, p, self._types)
                                for p in self._restore_paths[j]]
        self._pos = j + 1
        self._pending = j

    def forward_postprocess(self, function: chainer.FunctionNode,
                            in_data: tuple[Array, ...]) -> None:
        """Chainer's callback after each forward application: leaves the function (the
        functions it applies inside are not nodes).

        Parameters
        ----------
        function : chainer.FunctionNode
            The function application.
        in_data : tuple of array
            Its input arrays.
        """
        if self._phase not in ("forward", "done"):
            return
        self._depth -= 1

    def _complete_pending(self):
        j = self._pending
        if j is None:
            return
        self._pending = None
        f = self._funcs[j]
        name = self._names[j]
        if f.outputs is None:
            raise StrategyMismatchError(f"function {j} ({name}) has no outputs recorded",
                                        position=j)
        outs = output_arrays(f)
        nodes = [ref() for ref in f.outputs]
        if not _matches(nodes, self._out_sig[j]):
            sig = tuple((nd.shape, np.dtype(nd.dtype)) if nd is not None else exp
                        for nd, exp in zip(nodes, self._out_sig[j]))
            raise StrategyMismatchError(
                f"function {j} ({name}) returned {sig}, but the strategy's graph has "
                f"{self._out_sig[j]}; re-trace and re-plan", position=j)
        self._check_wiring(j, f)
        if self._before is not None:
            self._state[j] = tuple(forward_state(
                f, self._before, self._in_ids | {id(a) for a in outs if a is not None},
                self._types))
            self._before = self._in_ids = None
        if j in self._alias_nodes:
            self._out_attrs[j] = output_attrs(f, outs, self._types)
        for k, a in enumerate(outs):
            if a is not None:
                self._held[j, k] = a
        self._expect("forward", j)
        if self.record:
            made = sum(self._value_bytes(j, k, a) for k, a in enumerate(outs))
            made += _nbytes(get_state(f, a) for a in self._state[j])
            self._note("forward", j, made, range(len(self._out_sig[j])))
        del outs, nodes
        self._run_own_events(recompute=False)

    def _check_wiring(self, j, f):
        for p, x in enumerate(self._args[j]):
            creator = f.inputs[p].creator_node
            cpos = self._func_pos.get(id(creator)) if creator is not None else None
            if x[0] == "node":
                ok = cpos == x[1] and creator.outputs[x[2]]() is f.inputs[p]
            else:
                ok = cpos is None
            if not ok:
                raise StrategyMismatchError(
                    f"input {p} of function {j} ({self._names[j]}) is wired differently from "
                    f"the strategy's graph (expected {list(x)}); re-trace and re-plan",
                    position=j)

    # -- backward ---------------------------------------------------------------------------------

    def backward_preprocess(self, function: chainer.FunctionNode, in_data: tuple[Array, ...],
                            out_grad: tuple[Array | None, ...]) -> None:
        """Chainer's callback before each backward application: at the first, check that the
        whole forward pass ran; run the schedule's events up to this backward step (the
        recomputations it needs) and check that it is the one the schedule expects.

        Parameters
        ----------
        function : chainer.FunctionNode
            The function application.
        in_data : tuple of array
            Its input arrays.
        out_grad : tuple of array or None
            The gradients of its outputs (None for an output without one).
        """
        if self._phase == "idle":
            return
        if self._phase == "done":
            self._check_after_step(function)
            return
        if self._phase == "forward":
            if self._pos != self._n:
                raise StrategyMismatchError(
                    f"backward started after {self._pos} of the {self._n} functions of the "
                    "strategy's graph: the forward pass changed; re-trace and re-plan",
                    position=self._pos)
            self._complete_pending()
            self._phase = "backward"
        self._bdepth += 1
        if self._bdepth != 1:
            return
        j = self._func_pos.get(id(function))
        if j is None:
            raise StrategyMismatchError(
                f"Chainer ran the backward of a function ({type(function).__name__}) that the "
                "traced forward pass did not apply; re-trace and re-plan")
        self._current = j
        self._run_own_events()
        self._expect("backward", j)
        if self.record:  # the output gradients, for the bytes of this call and its free_grad
            self._gy = [g for g in out_grad if g is not None]
            self._note("backward", j, _nbytes(self._gy))

    def backward_postprocess(self, function: chainer.FunctionNode, in_data: tuple[Array, ...],
                             out_grad: tuple[Array | None, ...]) -> None:
        """Chainer's callback after each backward application: run the schedule's events
        after it (frees), and end the step after the last.

        Parameters
        ----------
        function : chainer.FunctionNode
            The function application.
        in_data : tuple of array
            Its input arrays.
        out_grad : tuple of array or None
            The gradients of its outputs (None for an output without one).
        """
        if self._phase != "backward":
            return
        self._bdepth -= 1
        if self._bdepth:
            return
        self._backward_ran.add(self._current)
        self._current = None
        self._run_own_events(recompute=False)
        if self._cursor.done:
            self._finish_step()

    def _check_after_step(self, function):
        """A backward call after the step ended: a second backward pass over the step's graph
        (its functions that lost what they read raise then), or a backward over functions
        applied outside a step."""
        if getattr(function, "_chainer_ext_step_done", False):
            return
        raise StrategyMismatchError(
            f"Chainer ran the backward of {type(function).__name__}, applied after the previous "
            f"step ended but not as part of a new step (a step starts with "
            f"{_fmt_sig(self._names[0], self._in_sig[0])}, function 0 of the strategy's "
            "graph): either the forward pass changed (re-trace and re-plan), or a backward "
            "pass over functions applied after a step runs inside the `with` block (run it "
            "outside)")

    # -- the hook's own events --------------------------------------------------------------------

    def _free_value(self, v, ks, kind):
        f = self._funcs[v]
        freed = []
        retained = _ci.retained_output_data(f)
        if retained is not None:
            retained = list(retained)
        for k in ks:
            freed.append(self._held.pop((v, k), None))
            readers = self._readers.get((v, k))
            if readers:
                self._spent |= readers
            node = f.outputs[k]()
            if node is not None:
                # a consumer retained it for its backward: a recomputation must put it back
                self._had[v, k] = _ci.node_data(node) is not None
                _ci.set_node_data(node, None)
                var = node.get_variable_or_none()
                # in backward, a Variable still alive is the caller's (the forward's locals are
                # gone): it keeps its array, as in a plain run (logits read for accuracy)
                if var is not None and self._phase != "backward":
                    held = _ci.var_array(var)   # keeps shape and dtype readable (_freed)
                    _ci.set_var_array(var, None if held is None else _freed.stand_in(held))
            if retained is not None and k in self._ret_out[v]:
                retained[self._ret_out[v].index(k)] = None
            if kind == "drop" or v in self._backward_ran:
                # an attribute of the function that is the output would keep its memory alive:
                # after a drop the recomputation sets it again, after the backward nothing
                # reads it
                for name in self._out_attrs.get(v, {}).get(k, ()):
                    set_state(f, name, None)
        if retained is not None:
            _ci.set_retained_output_data(f, tuple(retained))
        if self.record:
            self._note(kind, v, sum(self._value_bytes(v, k, a) for k, a in zip(ks, freed)), ks)
        self._log["discarded" if kind == "drop" else "freed"].append(v)

    def _value_bytes(self, v, k, array):
        """Bytes of output k of node v; an unused output the caller dropped at once (no array
        held) counts as the traced size, as in the schedule."""
        return array.nbytes if array is not None else self._facts[v].outputs[k]

    def _free_state(self, v):
        f = self._funcs[v]
        if self._state[v]:
            self._spent.add(v)
        if self.record:
            self._note("free_state", v, _nbytes(get_state(f, a) for a in self._state[v]))
        for a in self._state[v]:
            set_state(f, a, None)

    def _recompute(self, v):
        f = self._funcs[v]
        xs = []
        for p, x in enumerate(self._args[v]):
            a = self._held.get((x[1], x[2])) if x[0] == "node" else self._ext[v][p]
            if a is None:  # pragma: no cover - the schedule recomputes inputs first
                raise RuntimeError(f"internal error: input {p} of function {v} "
                                   f"({self._names[v]}) is not available for recomputation")
            xs.append(a)
        before = array_attr_ids(f, self._types) if self.record else None
        ys = self._run_forward(v, f, tuple(xs))
        if self.record:
            self._note("recompute", v, self._remade_bytes(v, f, before, xs, ys), range(len(ys)))
        del xs
        for k, y in enumerate(ys):
            self._held[v, k] = y
        self._restore(v, ys)
        self._log["recomputed"].append(v)

    def _remade_bytes(self, v, f, before, xs, ys):
        """Bytes a recomputation of node `v` made: its outputs and the forward-made state it set
        (`before`: :func:`array_attr_ids` taken before it ran)."""
        state = forward_state(f, before, {id(a) for a in xs} | {id(y) for y in ys},
                              self._types)
        if self._facts[v].stochastic:  # its state is kept: what it makes again replaces it
            state = [a for a in state if a not in self._state[v]]
        return _nbytes(ys) + _nbytes(get_state(f, a) for a in state)

    def _run_forward(self, v, f, xs):
        """Run the forward of node `v` again: under its configuration, with what its first forward
        changed besides its outputs set back for the duration (running statistics, counters,
        NumPy's random state: the draws are replayed and the side effect is not repeated)."""
        paths = self._restore_paths[v]
        swap = (_effects.swapped(f, paths, self._pre.pop(v), self._types) if paths
                else contextlib.nullcontext())
        with _ci.using_configs(self._cfg[v]), \
                chainer.using_device(chainer.backend.get_device_from_array(*xs)), swap:
            return f.forward(xs)

    def _restore(self, v, ys):
        """Put recomputed outputs back where Chainer's backward looks for them."""
        f = self._funcs[v]
        for k, ref in enumerate(f.outputs):
            node = ref()
            if node is None:
                continue
            if self._had.get((v, k)):
                _ci.set_node_data(node, ys[k])
            var = node.get_variable_or_none()
            if var is not None:
                _ci.set_var_array(var, ys[k])
        if self._ret_out[v]:
            _ci.set_retained_output_data(f, tuple(ys[k] for k in self._ret_out[v]))

    def _restore_dropped(self):
        """Forward ended without a backward pass: recompute what the backward pass would have
        recomputed, so a backward pass outside the ``with`` block finds every value."""
        for v in sorted(self._may_recompute):
            if all((v, k) in self._held for k in range(len(self._out_sig[v]))):
                continue
            todo = [v]
            while todo:
                u = todo[-1]
                missing = [x[1] for x in self._args[u]
                           if x[0] == "node" and (x[1], x[2]) not in self._held]
                if missing:
                    todo.extend(missing)
                    continue
                todo.pop()
                if not all((u, k) in self._held for k in range(len(self._out_sig[u]))):
                    xs = tuple(self._held[x[1], x[2]] if x[0] == "node" else self._ext[u][p]
                               for p, x in enumerate(self._args[u]))
                    ys = self._run_forward(u, self._funcs[u], xs)
                    for k, y in enumerate(ys):
                        self._held[u, k] = y
                    self._restore(u, ys)


def _nodes_freed_late(plan):
    """Nodes with an output that the plan drops, or frees after the node's backward: where an
    attribute of the function that is that output must go with it (see ``_free_value``)."""
    done, out = set(), set()
    for kind, v, _ in plan:
        if kind == "backward":
            done.add(v)
        elif kind == "drop" or (kind == "free_value" and v in done):
            out.add(v)
    return out


_OWNERS_LOCK = threading.Lock()


def _spent_backward(v, name):
    """A ``backward`` for function `v` whose retained arrays or state the hook freed."""
    def backward(*args, **kwargs):
        raise HookUsageError(
            f"a second backward pass over a step run under RecomputeHook: function {v} "
            f"({name}) no longer has the arrays its backward reads (the hook freed them after "
            "the first backward pass, as the plan does); run the forward pass again before "
            "each backward pass, or sum the losses and call backward once")
    return backward


def LivenessHook(graph: lowerset.Graph, *, name: str | None = None,
                 record: bool = False) -> RecomputeHook:
    """Return a hook that only does liveness analysis (no recomputation): the ablation.

    Parameters
    ----------
    graph : TracedGraph
        From :func:`chainer_ext.trace`.
    name : str, optional
        Hook name.
    record : bool
        As for :class:`RecomputeHook`.

    Returns
    -------
    RecomputeHook
        ``RecomputeHook(None, graph=graph)``: the one-segment strategy [V].

    Raises
    ------
    StrategyMismatchError
        If `graph` was not recorded by :func:`chainer_ext.trace`.
    """
    return RecomputeHook(None, graph=graph, name=name, record=record)
