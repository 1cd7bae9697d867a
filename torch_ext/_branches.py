"""The strategies a :class:`torch_ext.RecomputeContext` may run, one per branch of the step's
code, and the choice among them as the forward pass shows which branch it takes.

A step whose code branches on the values of its inputs (Hugging Face's attention masks: a
batch without padding skips the mask) runs different operations on different batches of one
shape; :func:`torch_ext.trace` records one of them. Given a strategy planned on a trace of each
branch, the context checks every operation of the forward pass against each strategy's graph
still open and closes those it differs from. Until one is left, the schedules' forward events
(``drop``, ``free_value``) run where every open schedule has them, and otherwise wait until
the branch is known. The operations up to the first difference are the same in every branch
(they are checked against each graph), so every open schedule refers to the same values by
the same node ids. A strategy whose graph has the operations of an earlier one is never run
(the earlier one always matches first).
"""

import lowerset

from ._replay import ForwardCheck
from .exceptions import StrategyMismatchError


class Branch:
    """One strategy: its schedule, the check of its traced sequence and the cursor of the step
    being run.

    Parameters
    ----------
    strategy : lowerset.Strategy
        Planned on a graph from :func:`torch_ext.trace`.
    model : torch.nn.Module or None
        Passed to :class:`torch_ext._replay.ForwardCheck` (its train/eval mode is checked).
    watch_all : bool
        Watch every backward call (:attr:`watch_before`, :attr:`watch_after`), as an
        executor recording every event needs.

    Attributes
    ----------
    watch_before, watch_after : set of int
        The nodes whose backward call the executor watches before it runs and after
        (:func:`watched_calls`).
    """

    def __init__(self, strategy, model, watch_all=False):
        self.strategy = strategy
        self.schedule = lowerset.schedule(strategy)
        self.check = ForwardCheck(strategy.graph, model)
        cursor = lowerset.EventCursor(self.schedule)
        self.may_recompute = cursor.recomputed_nodes()
        self.backward_nodes = set(strategy.graph.facts.backward_order)
        if watch_all:
            self.watch_before = self.watch_after = self.backward_nodes
        else:
            self.watch_before, self.watch_after = watched_calls(cursor.plan)
        self.reset()

    def reset(self):
        self.check.reset()
        self.cursor = lowerset.EventCursor(self.schedule)
        self.held = []      # indices of the forward events held back while others are open
        self.released_at = None   # the index of the event they ran before, once they ran

    def expected_events(self):
        """The schedule's events in the order the context runs them: those held back until
        the step showed its branch where they ran."""
        events = list(self.schedule.events)
        if self.released_at is None:
            return events
        held = set(self.held)
        return ([e for i, e in enumerate(events[:self.released_at]) if i not in held]
                + [events[i] for i in self.held] + events[self.released_at:])


#: Events an executor notes (their bytes, when it records) but has nothing to do for.
NOTES = ("seed_grad", "free_grad")


def watched_calls(plan):
    """``(before, after)``: the nodes whose backward call has events for the executor to run
    right before it, and right after it, in a schedule's events (``EventCursor.plan``). The
    events between two backward calls run after the first (up to a recomputation) and before
    the second, so both are watched where there are any; the first backward call is watched
    before (the backward pass starts there) and the last after (the step ends there). A
    backward call in neither set has nothing beside it: an executor passes it unwatched
    (``EventCursor.pass_to``). On a transformer's step about three in four go unwatched."""
    calls = [i for i, e in enumerate(plan) if e[0] == "backward"]
    before: set[int] = set()
    after: set[int] = set()
    if not calls:
        return before, after
    before.add(plan[calls[0]][1])
    after.add(plan[calls[-1]][1])
    for i, j in zip(calls, calls[1:]):
        if any(e[0] not in NOTES for e in plan[i + 1:j]):
            after.add(plan[i][1])
            before.add(plan[j][1])
    return before, after


class Branches:
    """The branches of a step, narrowed operation by operation in its forward pass.

    Parameters
    ----------
    strategies : sequence of lowerset.Strategy
        At least one; where several graphs match a whole forward pass, the first is run.
    model : torch.nn.Module or None
        See :class:`Branch`.
    watch_all : bool
        See :class:`Branch`.
    """

    all: list[Branch]
    open: list[Branch]

    def __init__(self, strategies, model, watch_all=False):
        self.all = []
        for s in strategies:   # a graph of the same operations as an earlier one: never run
            b = Branch(s, model, watch_all)
            if not any(b.check.same_operations(a.check) for a in self.all):
                self.all.append(b)
        self.reset()

    def reset(self):
        for b in self.all:
            b.reset()
        self._set_open(list(self.all))

    def _set_open(self, branches):
        self.open = branches
        # the branch, once it is the only one open: the methods below, called at every
        # operation, then ask it alone
        self.solo = branches[0] if len(branches) == 1 else None

    @property
    def active(self):
        """The branch whose schedule the context runs: the first open one."""
        return self.open[0]

    @property
    def known(self):
        return self.solo is not None

    def may_recompute(self, v):
        """Whether an open schedule may recompute node `v` (its call is then captured)."""
        if self.solo is not None:
            return v in self.solo.may_recompute
        return any(v in b.may_recompute for b in self.open)

    def watched(self, v):
        """``(before, after)``: whether an open schedule watches the backward call of `v`
        before it runs, after it."""
        if self.solo is not None:
            return v in self.solo.watch_before, v in self.solo.watch_after
        return (any(v in b.watch_before for b in self.open),
                any(v in b.watch_after for b in self.open))

    def enter(self):
        for b in self.all:
            b.check.enter()

    def starts_step(self, func, args, kwargs):
        return any(b.check.starts_step(func, args, kwargs) for b in self.all)

    def before(self, func, args, kwargs, value_of):
        """:meth:`ForwardCheck.before` on every open branch; close those the call differs
        from. Raises the first branch's StrategyMismatchError where it differs from all."""
        if self.solo is not None:   # the branch is known: its error is the first
            return self.solo.check.before(func, args, kwargs, value_of)
        return self._narrow(lambda b: b.check.before(func, args, kwargs, value_of))

    def after(self, v, outs, tensors):
        """:meth:`ForwardCheck.after` on every open branch; close those whose outputs differ.
        Raises the first branch's StrategyMismatchError where they differ from all."""
        if self.solo is not None:
            return self.solo.check.after(v, outs, tensors)
        return self._narrow(lambda b: b.check.after(v, outs, tensors))

    def _narrow(self, check):
        results, first = [], None
        for b in self.open:
            try:
                results.append((b, check(b)))
            except StrategyMismatchError as e:
                first = first or e
        if not results:   # every open branch raised: `first` is set
            raise first  # type: ignore[misc]
        # a kept error would keep this frame and its callers' alive, and the values they
        # hold (PyTorch then hands a factory function's caller a detached alias)
        first = None
        self._set_open([b for b, _ in results])
        return results[0][1]

    def expect(self, kind, v):
        """Step every open cursor past the framework's call; whether each one expected it."""
        if self.solo is not None:
            return self.solo.cursor.expect(kind, v)
        return all(b.cursor.expect(kind, v) for b in self.open)

    def forward_ended(self):
        """Whether the forward pass has run all of an open branch's operations; that branch
        is then the only one open (the first such, where several graphs end there)."""
        if self.solo is not None:
            return self.solo.check.forward_done
        done = [b for b in self.open if b.check.forward_done]
        if done:
            self._set_open(done[:1])
        return bool(done)

    def forward_events(self):
        """The forward events to run now. Once the branch is known: those of its schedule,
        preceded by those it held back. Before: the events every open schedule has here
        where none holds any back, else none (each open schedule holds its own back)."""
        b = self.solo
        if b is not None and (not b.held or b.released_at is not None):
            return b.cursor.own_events(recompute=False)
        taken = [(b.cursor.position, list(b.cursor.own_events(recompute=False)))
                 for b in self.open]
        if self.known:
            b, (start, events) = self.active, taken[0]
            if b.held and b.released_at is None:
                b.released_at = start
                events = [b.cursor.plan[i] for i in b.held] + events
            return events
        if all(not b.held and e == taken[0][1] for b, (_, e) in zip(self.open, taken)):
            return taken[0][1]
        for b, (start, e) in zip(self.open, taken):
            b.held += range(start, start + len(e))
        return []
