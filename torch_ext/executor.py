"""Execute the schedule of a canonical strategy (paper, Sec. 3) in an eager PyTorch step.

:class:`RecomputeContext` is a context manager around the forward and the backward pass, in the
manner of non-reentrant ``torch.utils.checkpoint``: autograd builds its usual graph and runs its
usual backward pass, in its usual order, so the gradients' sums happen in the same order as in
a plain step. Inside the block:

- a ``TorchDispatchMode`` sees each operation of the forward pass, checks it against the traced
  one (operation, argument shapes, dtypes, devices and wiring) and keeps its outputs as the
  schedule's values;
- ``saved_tensors_hooks`` give autograd a handle instead of each value it saves, so that the
  schedule alone decides how long a value lives; the unpack hook hands the value back in the
  backward pass;
- pre- and post-hooks on the traced operations' autograd nodes perform the schedule's own
  events (``drop``, ``free_value``, ``recompute``) between the backward calls, which autograd
  makes in the traced order. Only the nodes with such events beside their backward call are
  hooked (about one in four on a transformer's step; every one with ``record``): the cursor
  passes the backward calls between them (:func:`torch_ext._branches.watched_calls`);
- when the forward pass ends, a ``TorchFunctionMode`` waits for the call that starts the
  backward pass (``Tensor.backward``, ``torch.autograd.backward`` or ``grad``) and runs it
  with the dispatch mode set aside: the dispatch mode has nothing to check in the backward
  pass, and each ATen call it sees costs a call into Python (6-8% of a Hugging Face model's
  CPU step).

Every decision (what to keep, drop, recompute and free, and when) is the schedule's
(:func:`lowerset.schedule`); :class:`lowerset.EventCursor` walks it.
"""

import collections
import threading
import weakref
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any, Literal

import torch
from torch.overrides import TorchFunctionMode

import lowerset
from lowerset.exceptions import ArgumentTypeError

from . import _ops
from ._branches import NOTES, Branches
from ._compat import (
    TorchDispatchMode,
    current_autograd_node,
    current_dispatch_mode,
    current_function_mode,
    pop_dispatch_mode_temporarily,
)
from ._fingerprint import describe_difference, fingerprint
from ._guards import check_not_compiled
from .exceptions import CONTEXT, HookUsageError, RecomputationError, StrategyMismatchError

__all__ = ["RecomputeContext"]

_ACTIVE = threading.local()

#: The key under which a hooked autograd node's ``metadata`` names its graph node.
_KEY = "lowerset.executor"


class _Handle:
    """What autograd keeps instead of a saved value: the value's node and output index."""

    __slots__ = ("v", "k")

    def __init__(self, v, k):
        self.v, self.k = v, k


class RecomputeContext:
    """Run training steps under the schedule of a canonical strategy (paper, Sec. 3).

    Use it around the forward and the backward pass of each step::

        with RecomputeContext(plan):
            loss = loss_fn(model(x), y)
            loss.backward()

    Operations are matched to the strategy's graph by position in dispatch order, so the graph
    must come from :func:`torch_ext.trace` of the same model, batch shape and device. A step
    ends when its backward pass has run every backward call of the schedule; one ``with``
    block may hold several steps (the next dispatch of the graph's first operation starts the
    next one), and one context may be entered again for each step.

    A step whose code branches on its batch's values runs other operations on other batches
    of one shape (Hugging Face models skip the attention mask where a batch has no padding).
    Give such a step a strategy per branch, each planned on a trace of a batch that takes it
    (within the same budget): the context checks each operation of the forward pass against
    every branch's graph still open and runs the schedule of the one the step takes. Until
    the step shows its branch (its first operation that differs), it drops what every open
    schedule drops, and holds back the rest until then.

    Parameters
    ----------
    strategy : lowerset.CanonicalStrategy or lowerset.DropSetStrategy, a sequence of them, or None
        Planned on a graph from :func:`torch_ext.trace` (or that graph loaded from JSON); a
        sequence holds one strategy per branch of the step's code (where several graphs
        match a whole step, the first is run). ``None`` (with `graph`) recomputes nothing:
        liveness analysis only (the strategy [V]).
    record : bool
        Keep the events executed in :attr:`events` (bytes measured on the real tensors), to
        compare with ``lowerset.schedule(strategy).events``.
    graph : torch_ext.TracedGraph, optional
        The traced graph, needed only when `strategy` is None.
    model : torch.nn.Module, optional
        Checked not to be ``torch.compile``d; a :class:`StrategyMismatchError` then says when
        its train/eval mode differs from the one :func:`torch_ext.trace` recorded (given
        ``model=`` there too).
    check : bool
        Take a fingerprint of each value the schedule may recompute when its operation first
        runs (:func:`torch_ext._fingerprint.fingerprint`: sums of its bytes, no copy; not of
        ``torch.empty``-like outputs, whose memory the call does not write) and
        compare each recomputation with it, raising :class:`RecomputationError` at the first
        difference. For testing a plan (:func:`torch_ext.verify` turns it on): it reads every
        such value once more in each pass and allocates two int64 temporaries of its size, so
        a measured peak is not the schedule's.

    Attributes
    ----------
    strategy : lowerset.CanonicalStrategy or lowerset.DropSetStrategy
    schedule : lowerset.Schedule
        What the context executes: of the branch the step under way (or the last one) takes,
        the first strategy's before a step shows its branch.
    events : list of lowerset.Event
        With ``record=True``: the events of the last step, as executed.
    last_step : dict
        ``"dropped"``, ``"recomputed"`` and ``"freed"``: node labels, in the order it happened.

    Raises
    ------
    TypeError
        If `strategy` is not a strategy (``lowerset.STRATEGY_TYPES``) or a non-empty sequence
        of them (or None without `graph`).
    StrategyMismatchError
        If a strategy's graph was not recorded by :func:`torch_ext.trace`; while running,
        before anything is dropped for an operation, if the operation differs from the graph
        (from every branch's graph, the first one's difference reported)
        (name, argument shapes, dtypes, devices, wiring, outputs, number of operations: a
        data-dependent branch took another way, the model moved to another device), or
        autograd runs the hooked backward calls in another order. The message names the likely
        cause where it shows: the model's train/eval mode (with `model`), autocast, another
        dtype, device or shape of an input or a parameter; for a difference in the forward
        pass, it lists the operations around it, the traced step's beside this step's
        (``error.traced``, ``error.actual``), with the lines of the user's code they came
        from where the trace recorded them (``trace(..., debug=True)``). A strategy that
        drops nothing is not checked (see Notes) unless `record` or `check` is on.
    RecomputationError
        With `check`, in the backward pass, if a recomputed value differs from the value its
        operation made in the forward pass (naming the node, its operation and the output).
    HookUsageError
        If a RecomputeContext is already active in this thread or this one in another thread;
        in the backward pass, if a value the schedule freed is asked for again (a second
        backward pass over one step, ``retain_graph=True``).
    TorchExtError
        If `model` (or a module the step closes over) is ``torch.compile``d.

    Notes
    -----
    - Recomputation runs the recorded operation again on the same arguments under
      ``torch.no_grad()``. An operation drawing random numbers (dropout's ``bernoulli_``) runs
      with the generator state it had in the forward pass, set back afterwards (as non-reentrant
      checkpoint does); an operation writing an external array (BatchNorm's running
      statistics) writes a copy, so running statistics are updated once.
    - An in-place operation and the value it overwrites are dropped together or kept together
      (``NodeFacts.inplace``); a node the trace pinned (``graph.attrs[v]["pinned"]``) is never
      recomputed.
    - A value the model's code still holds is freed when the code drops it
      (``NodeFacts.held_until``): the schedule counts it until then.
    - If the forward pass ends inside the block without a backward pass, the dropped values
      are recomputed at exit so that a backward pass outside the block still works.
    - A strategy that drops nothing (of every branch: [V], or ``solve`` at a budget the plain
      step fits) leaves nothing to check or run: without `record` and `check` the block runs
      the step as it is, with no dispatch mode and no hooks, at the plain step's time and
      peak (which its schedule predicts), and :attr:`last_step` stays empty.

    References
    ----------
    .. [1] Kusumoto et al., NeurIPS 2019, Sec. 3 (canonical strategy, liveness analysis).
    """

    record: bool
    check: bool
    events: list[lowerset.Event]
    last_step: dict[str, list[int]]
    _log: dict[str, list[int]]
    _recent: collections.deque[tuple[int, Any, int | None, Any]]
    _modes: list[AbstractContextManager[Any]]
    _owner: int | None

    def __init__(self, strategy: lowerset.Strategy | list[lowerset.Strategy]
                 | tuple[lowerset.Strategy, ...] | None = None, *,
                 record: bool = False, graph: lowerset.Graph | None = None,
                 model: torch.nn.Module | None = None, check: bool = False) -> None:
        if model is not None:
            check_not_compiled(None, model, HookUsageError)
        self.record = bool(record)
        self.check = bool(check)
        self._branches = Branches(_strategies(strategy, graph), model, watch_all=self.record)
        self.events = []
        self.last_step = {"dropped": [], "recomputed": [], "freed": []}
        self._owner = None
        self._backward_start = _BackwardStart(self)
        self._watching = False
        # a schedule that drops nothing leaves nothing to check or run: the step runs as is
        self._idle = not (self.record or self.check) and not any(
            e.kind == "drop" for b in self._branches.all for e in b.schedule.events)
        self._reset()

    # -- per-step state ---------------------------------------------------------------------------

    @property
    def strategy(self) -> lowerset.Strategy:
        """The strategy this context runs: the branch of the step (the first open
        branch until the step shows which)."""
        return self._branches.active.strategy

    @property
    def schedule(self) -> lowerset.Schedule:
        """The Schedule of :attr:`strategy`."""
        return self._branches.active.schedule

    @property
    def expected_events(self) -> list[lowerset.Event]:
        """The schedule's events in the order this context runs them (to compare with
        :attr:`events`): the drops of a schedule held back until the step showed its branch
        come where they ran."""
        return self._branches.active.expected_events()

    @property
    def _check(self):
        return self._branches.active.check

    @property
    def _cursor(self):
        return self._branches.active.cursor

    def _reset(self):
        self._phase = "idle"   # idle -> forward -> between -> backward -> done; mismatched
        self._branches.reset()
        self._held = {}         # (v, k) -> tensor: the values the schedule holds
        self._bytes = {}        # (v, k) -> bytes of the held value (record: the events' bytes)
        self._made = {}         # (v, k) -> bytes of the value the forward pass made (record)
        self._value_of = _ValueIds()
        self._calls = {}        # v -> Call: what a recomputation of v needs
        self._prints = {}       # v -> fingerprints of its outputs in the forward pass (check)
        self._pending = []      # (v, watched before, after, weakrefs of outputs): to hook
        self._hooked_before = set()  # graph nodes whose autograd node has the pre-hook
        self._hooked_after = set()   # ... the post-hook
        self._gy = 0
        self._log = {"dropped": [], "recomputed": [], "freed": []}
        self._rec = []
        self._in_hook = False
        self._ops_run = 0       # forward operations checked in this step
        # (index, func, node, arguments' (shape, dtype, device) where not a node) of the last
        # operations checked: this step's side of a StrategyMismatchError
        self._recent = collections.deque(maxlen=CONTEXT + 1)

    def __enter__(self) -> "RecomputeContext":
        if getattr(_ACTIVE, "context", None) is not None:
            raise HookUsageError("a RecomputeContext is already active in this thread; "
                                 "RecomputeContexts cannot be nested (each would drop values "
                                 "the other needs)")
        if self._owner is not None:
            raise HookUsageError(
                f"this RecomputeContext is in use in thread {self._owner}; it holds the state "
                "of the step it runs: make one RecomputeContext per thread")
        self._owner = threading.get_ident()
        _ACTIVE.context = self
        self._reset()
        self._branches.enter()
        self._phase = "forward"
        self._modes = [] if self._idle else [
            _Dispatch(self), torch.autograd.graph.saved_tensors_hooks(self._pack, self._unpack)]
        for m in self._modes:
            m.__enter__()
        return self

    def _watch_backward(self):
        """The forward pass has ended: push :class:`_BackwardStart` for the backward call."""
        if not self._watching:
            self._backward_start.__enter__()
            self._watching = True

    def _unwatch(self):
        """Pop :class:`_BackwardStart` where it is the innermost function mode (elsewhere:
        inside its own call, or below a mode the user's code entered, it stays until the next
        step or the end of the block)."""
        if self._watching and current_function_mode() is self._backward_start:
            self._backward_start.__exit__(None, None, None)
            self._watching = False

    def _backward_call(self, func, args, kwargs):
        """Run `func`, a call that starts a backward pass, without the dispatch mode where the
        forward pass has ended and the mode is the innermost one (hooking the autograd nodes
        of the last operations first, which the next dispatch would otherwise do)."""
        if self._phase != "between" or current_dispatch_mode() is not self._modes[0]:
            return func(*args, **kwargs)
        self._hook_pending()
        with pop_dispatch_mode_temporarily():
            return func(*args, **kwargs)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> Literal[False]:
        try:
            self._unwatch()
            for m in reversed(self._modes):
                m.__exit__(exc_type, exc, tb)
            if exc_type is None and self._phase in ("forward", "between") and not self._idle:
                self._restore_dropped()
            if self._phase != "done":
                self._publish()
            if exc_type is not None:
                self._reset()
        finally:
            self._owner = None
            _ACTIVE.context = None
        return False

    def _publish(self):
        self.last_step = self._log
        if self.record:
            self.events = self._rec

    def _note(self, kind, v, nbytes, outputs=()):
        self._rec.append(lowerset.Event(kind, v, int(nbytes), tuple(outputs)))

    # -- forward -------------------------------------------------------------------------------

    def _dispatch(self, func, args, kwargs):
        if self._pending and not self._in_hook:
            self._hook_pending()
        if (self._phase == "done" and torch.is_grad_enabled()
                and current_autograd_node() is None
                and self._branches.starts_step(func, args, kwargs)):
            self._unwatch()
            self._reset()
            self._phase = "forward"
        if self._phase != "forward" or self._in_hook:
            return func(*args, **kwargs)
        try:
            call = self._branches.before(func, args, kwargs, self._value_of)
            v = call.node
            self._recent.append((self._ops_run, func, v,
                                 None if v is not None else _measure(call.tensors)))
            self._ops_run += 1
            if v is None:   # an operation on external arrays only (absorbed)
                out = func(*args, **kwargs)
            else:
                out = self._forward(call, func, args, kwargs)
        except StrategyMismatchError as e:
            # the step is not the traced one: the operations that run while it unwinds (a
            # profiler's record_function exit) pass unchecked, so the first error is the one
            # the user sees
            self._phase = "mismatched"
            self._add_recent(e)
            raise
        if self._branches.forward_ended():
            self._phase = "between"
            self._run_events(self._branches.forward_events())   # those a branch held back
            self._watch_backward()
        return out

    def _forward(self, call, func, args, kwargs):
        v, tensors = call.node, call.tensors
        may_recompute = self._branches.may_recompute(v)
        if may_recompute:
            self._calls[v] = call.capture(func, args, kwargs)
        out = func(*args, **kwargs)
        outs = _ops.output_tensors(out)
        if self.check and may_recompute and not _ops.makes_uninitialized(func):
            self._prints[v] = [fingerprint(o) for o in outs]
        self._branches.after(v, outs, tensors)
        for k, o in enumerate(outs):
            # an alias, not the tensor itself: PyTorch's factory functions hand the caller a
            # detached copy of a result something else holds (an extra aten.detach)
            self._held[v, k] = o.detach()
            self._value_of[o] = (v, k)
        if not self._branches.expect("forward", v):
            raise self._out_of_order("forward", v)
        if self.record:   # the bytes measured on the tensors, for the events recorded
            sizes = _ops.output_bytes(outs, tensors)
            for k, (b, _) in enumerate(sizes):
                self._bytes[v, k] = self._made[v, k] = b
            self._note("forward", v, sum(b for b, _ in sizes),
                       range(len(self._check.facts[v].outputs)))
        del tensors
        before, after = self._branches.watched(v)
        if before or after:
            self._pending.append((v, before, after, [_weak(o) for o in outs]))
        del outs
        self._run_events(self._branches.forward_events())
        return out

    def _hook_pending(self):
        """Hook the autograd nodes of the operations whose outputs have them by now: a
        pre-hook where a schedule has events to run before the node's backward call, a
        post-hook where it has some after (:func:`torch_ext._branches.watched_calls`)."""
        for v, before, after, refs in self._pending:
            for r in refs:
                t = r()
                fn = None if t is None else t.grad_fn
                if fn is not None and _KEY not in fn.metadata:
                    fn.metadata[_KEY] = v   # on the node itself: no reference to it here
                    if before:
                        self._hooked_before.add(v)
                        fn.register_prehook(self._prehook(v))
                    if after:
                        self._hooked_after.add(v)
                        fn.register_hook(self._posthook(v))
                    break
        self._pending = []

    def _restore_dropped(self):
        """The forward pass ended without a backward pass: recompute the dropped values so
        that a backward pass outside the block finds every value."""
        self._hook_pending()
        for v in sorted(self._calls):
            self._ensure(v)
        self._phase = "done"

    def _ensure(self, v):
        for k in range(len(self._check.facts[v].outputs)):
            if (v, k) not in self._held:
                for s, _ in self._check.facts[v].args:
                    if s >= 0:
                        self._ensure(s)
                self._recompute(v, note=False)
                return

    # -- saved tensors ------------------------------------------------------------------------

    def _pack(self, t):
        if self._pending:   # autograd saves an output after giving it its node
            self._hook_pending()
        ref = self._value_of.get(t)
        return t if ref is None else _Handle(*ref)

    def _unpack(self, packed):
        if not isinstance(packed, _Handle):
            return packed
        t = self._held.get((packed.v, packed.k))
        if t is None:
            raise HookUsageError(
                f"the backward pass asks for output {packed.k} of node {packed.v} "
                f"({self._check.name(packed.v)}), which the schedule has freed: a second "
                "backward pass over a step run under RecomputeContext (retain_graph=True) is "
                "not supported; run the forward pass again before each backward pass")
        return t

    # -- backward -------------------------------------------------------------------------------

    def _prehook(self, v):
        def pre(grad_outputs):
            if self._phase in ("forward", "between"):
                self._start_backward()
            if self._phase != "backward" or v not in self._branches.active.backward_nodes:
                return None
            self._pass_unwatched(v)
            self._run_own_events()
            if not self._cursor.expect("backward", v):
                raise self._out_of_order("backward", v)
            if self.record:  # the outputs' sizes, as measured in the forward pass
                self._gy = sum(self._made[v, k] for k, g in enumerate(grad_outputs)
                               if g is not None)
                self._note("backward", v, self._gy)
            return None
        return pre

    def _posthook(self, v):
        def post(grad_inputs, grad_outputs):
            if self._phase != "backward" or v not in self._branches.active.backward_nodes:
                return None
            if v not in self._hooked_before and not (self._pass_unwatched(v)
                                                     and self._cursor.expect("backward", v)):
                raise self._out_of_order("backward", v)
            self._run_own_events(recompute=False)
            if self._cursor.done:
                self._finish_step()
            return None
        return post

    def _pass_unwatched(self, v):
        """Step the cursor past the backward calls before `v`'s that ran unhooked (nothing
        beside them to run) and the notes between them; whether `v`'s call is then next."""
        hooked_before, hooked_after = self._hooked_before, self._hooked_after
        return self._cursor.pass_to("backward", v, lambda e: e[0] in NOTES or (
            e[0] == "backward" and e[1] not in hooked_before and e[1] not in hooked_after))

    def _start_backward(self):
        check = self._check
        if not check.forward_done:
            e = StrategyMismatchError(
                f"the backward pass started after {check.nodes_seen} of the "
                f"{check.n} operations of the strategy's graph: the forward pass changed "
                "(re-trace and re-plan)", position=check.nodes_seen,
                operation=check.position, traced=check.traced_records(check.position))
            self._add_recent(e)
            raise e
        self._phase = "backward"

    def _add_recent(self, error):
        """Put this step's operations before the one that differs in front of
        ``error.actual``: those the ring buffer kept, seen by the branch that reports it."""
        if error.operation is None:
            return
        check = self._check
        before = [check.actual_record(*entry) for entry in self._recent
                  if error.operation - CONTEXT <= entry[0] < error.operation]
        error.actual = tuple(before) + error.actual

    def _finish_step(self):
        self._publish()
        self._held.clear()
        self._calls.clear()
        self._prints.clear()
        self._phase = "done"

    def _out_of_order(self, kind, v):
        nxt = self._cursor.peek()
        if kind == "backward" and nxt is not None and nxt[0] == "backward" \
                and any(self._branches.watched(nxt[1])) \
                and nxt[1] not in self._hooked_before | self._hooked_after:
            return HookUsageError(
                f"the backward of node {nxt[1]} ({self._check.name(nxt[1])}) ran before the "
                "context could hook its autograd node: start the backward pass inside the "
                "block with loss.backward() or torch.autograd.backward/grad without an "
                "explicit gradient (or run any operation between the forward and the backward "
                "pass)")
        what = ("the end of the step" if nxt is None
                else f"the {nxt[0]} of node {nxt[1]} ({self._check.name(nxt[1])})")
        return StrategyMismatchError(
            f"PyTorch ran the {kind} of node {v} ({self._check.name(v)}) where the schedule "
            f"expects {what}: the step differs from the traced one; re-trace and re-plan",
            position=v)

    # -- the executor's own events --------------------------------------------------------------

    def _run_own_events(self, recompute=True):
        self._run_events(self._cursor.own_events(recompute))

    def _run_events(self, events):
        for kind, v, ks in events:
            if kind in ("drop", "free_value"):
                self._free(kind, v, ks)
            elif kind == "recompute":
                self._recompute(v)
            elif kind == "seed_grad" and self.record:  # the size of the value it seeds
                self._note("seed_grad", v, self._made.get((v, ks[0]), 0), ks)
            elif kind == "free_grad" and self.record:
                self._note("free_grad", v, self._gy)
            elif kind == "free_state":  # pragma: no cover - traced graphs have no state
                raise StrategyMismatchError(f"node {v} has saved state, which a PyTorch trace "
                                            "never records: the graph is not torch_ext's")

    def _free(self, kind, v, ks):
        for k in ks:
            self._held.pop((v, k), None)
        if self.record:
            outputs = self._check.facts[v].outputs
            self._note(kind, v, sum(self._bytes.pop((v, k), outputs[k]) for k in ks), ks)
        self._log["dropped" if kind == "drop" else "freed"].append(v)

    def _recompute(self, v, note=True):
        call = self._calls[v]
        self._in_hook = True
        try:
            outs = call.rerun(self._held)
        finally:
            self._in_hook = False
        if self.check:
            self._check_recomputed(v, outs)
        for k, o in enumerate(outs):
            self._held[v, k] = o
        if self.record:
            sizes = _ops.output_bytes(outs, call.rerun_tensors)
            for k, (b, _) in enumerate(sizes):
                self._bytes[v, k] = b
            if note:
                self._note("recompute", v, sum(b for b, _ in sizes),
                           range(len(self._check.facts[v].outputs)))
        call.rerun_tensors = None
        self._log["recomputed"].append(v)


    def _check_recomputed(self, v, outs):
        """Raise RecomputationError if a recomputed output of `v` differs from the forward's
        (outputs of ``torch.empty``-like calls hold no values of their own: not compared)."""
        for k, (before, o) in enumerate(zip(self._prints.get(v, ()), outs)):
            after = fingerprint(o)
            if after != before:
                raise RecomputationError(
                    f"the recomputation of node {v} ({self._check.name(v)}) differs from its "
                    f"forward pass in output {k}: {describe_difference(before, after)}. It "
                    "read an input that changed since the forward pass, or the forward pass "
                    "wrote into its memory in a way the trace did not record; the plan's "
                    "gradients would be wrong (please report it, with the model)",
                    node=v, output=k)


def _strategies(strategy, graph):
    """The strategies a context runs: `strategy`, a sequence of them (one per branch of the
    step's code), or the strategy [V] of `graph` where `strategy` is None."""
    if strategy is None:
        if graph is None:
            raise ArgumentTypeError("RecomputeContext(None) needs graph= (liveness analysis "
                                    "only)")
        return [lowerset.CanonicalStrategy(graph, [set(graph.labels)], method="none")]
    many = isinstance(strategy, (list, tuple))
    strategies = list(strategy) if many else [strategy]
    if not strategies:
        raise ArgumentTypeError("RecomputeContext needs at least one strategy, got an empty "
                                "sequence")
    for i, s in enumerate(strategies):
        if not isinstance(s, lowerset.STRATEGY_TYPES):
            where = f"strategy {i} of the sequence" if many else "strategy"
            raise ArgumentTypeError(f"{where} must be a lowerset.CanonicalStrategy or a "
                                    f"lowerset.DropSetStrategy, got {type(s).__name__}")
    return strategies


def _weak(t):
    return weakref.ref(t)


class _ValueIds:
    """The graph value ``(v, k)`` each tensor of the step is, looked up by the tensor's
    ``id``: a weak reference beside each entry tells a live tensor from a later one that
    reuses a dead one's ``id``. The executor looks up every argument of every operation;
    ``torch.utils.weak.WeakIdKeyDictionary`` costs five Python calls a lookup, this one
    a dictionary lookup and a call of the weak reference."""

    __slots__ = ("_by_id",)

    def __init__(self):
        self._by_id = {}

    def get(self, t):
        entry = self._by_id.get(id(t))
        return entry[1] if entry is not None and entry[0]() is t else None

    def __setitem__(self, t, ref):
        self._by_id[id(t)] = (weakref.ref(t), ref)


def _measure(tensors):
    """``(shape, dtype, device)`` of each tensor, as PyTorch gives them (turned into strings
    only for an error)."""
    return tuple([(t.shape, t.dtype, t.device) for t in tensors])


class _Dispatch(TorchDispatchMode):
    """Hands each dispatched operation to the context."""

    def __init__(self, ctx):
        super().__init__()
        self.ctx = ctx

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        return self.ctx._dispatch(func, args, kwargs or {})


#: The calls that start a backward pass (:class:`_BackwardStart`).
_BACKWARD_CALLS = frozenset({torch.Tensor.backward, torch.autograd.backward, torch.autograd.grad})


class _BackwardStart(TorchFunctionMode):
    """Hands the call that starts the backward pass to the context
    (:meth:`RecomputeContext._backward_call`); every other call runs as it is."""

    def __init__(self, ctx):
        super().__init__()
        self.ctx = ctx

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _BACKWARD_CALLS:
            return self.ctx._backward_call(func, args, kwargs)
        return func(*args, **kwargs)
