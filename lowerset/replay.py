"""Walk a schedule's events in step with a framework: what every executor shares.

An executor (``chainer_ext.RecomputeHook``, ``torch_ext.RecomputeContext``) lets its framework
run the training step and carries out the schedule beside it. Two kinds of event are the
framework's own calls (:data:`FRAMEWORK_KINDS`: a function's forward, a backward call); the
executor checks that each comes when the schedule says. Every other event is the executor's
to perform between them (``drop``, ``free_value``, ``free_state``, ``recompute``) or a rule of
the framework that it notes when reached (``seed_grad``, ``free_grad``). :class:`EventCursor`
keeps the position in the events and says which come next; what an event does to arrays is the
executor's.

References
----------
.. [1] Kusumoto et al., NeurIPS 2019, Sec. 3 (the canonical strategy's execution).
"""

from __future__ import annotations

from collections.abc import Callable

from .scheduling import Schedule

#: An event as an executor walks it: ``(kind, node id, output indexes)``.
CursorEvent = tuple[str, int, tuple[int, ...]]

__all__ = ["EventCursor", "FRAMEWORK_KINDS"]

#: Event kinds that are calls the framework makes (the executor checks them).
FRAMEWORK_KINDS = ("forward", "backward")


class EventCursor:
    """The position of an executor in the events of a :class:`~lowerset.Schedule`.

    Parameters
    ----------
    schedule : Schedule

    Attributes
    ----------
    plan : list of (str, int, tuple)
        ``(kind, node id, outputs)`` per event, in order.
    position : int
        Index of the next event.

    Raises
    ------
    TypeError
        If `schedule` is not a :class:`~lowerset.Schedule`.

    Examples
    --------
    >>> g = ls.Graph.chain(2, memory=4)
    >>> c = ls.EventCursor(ls.schedule(ls.CanonicalStrategy(g, [{0, 1}])))
    >>> c.expect("forward", 0), c.expect("forward", 1), list(c.own_events())
    (True, True, [('seed_grad', 1, (0,))])
    >>> c.expect("forward", 0), c.peek()
    (False, ('backward', 1, ()))
    """

    plan: list[CursorEvent]
    position: int

    def __init__(self, schedule: Schedule) -> None:
        if not isinstance(schedule, Schedule):
            raise TypeError(f"schedule must be a lowerset.Schedule, got {type(schedule).__name__}")
        index = schedule.graph.index
        self.plan = [(e.kind, index[e.node], e.outputs) for e in schedule.events]
        self.position = 0
        # event i -> the first framework event at or after i (len(plan) if none), and the
        # first framework or recompute event: where own_events stops
        n = len(self.plan)
        nxt, stop = [n] * (n + 1), [n] * (n + 1)
        for i in range(n - 1, -1, -1):
            kind = self.plan[i][0]
            nxt[i] = i if kind in FRAMEWORK_KINDS else nxt[i + 1]
            stop[i] = i if kind in FRAMEWORK_KINDS or kind == "recompute" else stop[i + 1]
        self._next_framework, self._next_stop = nxt, stop

    @property
    def done(self) -> bool:
        """Whether every event has been passed."""
        return self.position == len(self.plan)

    def expect(self, kind: str, v: int) -> bool:
        """Step past the framework's `kind` call of node id `v` if it is the next event, and
        return True; else return False and stay (:meth:`peek` says what the schedule expects
        there, for the executor's error message).

        Parameters
        ----------
        kind : str
            The event kind of the framework's call, one of :data:`FRAMEWORK_KINDS`
            (``"forward"`` or ``"backward"``).
        v : int
            The node id of the call.
        """
        if self.position < len(self.plan) and self.plan[self.position][:2] == (kind, v):
            self.position += 1
            return True
        return False

    def peek(self) -> CursorEvent | None:
        """The next event ``(kind, node id, outputs)``, or None at the end of the step."""
        return self.plan[self.position] if self.position < len(self.plan) else None

    def own_events(self, recompute: bool = True) -> list[CursorEvent]:
        """The events up to the framework's next call, ``(kind, node id, outputs)``, in order;
        the cursor steps past them (executors run them at every call of the framework: a
        slice of :attr:`plan`, no walk).

        Parameters
        ----------
        recompute : bool, default True
            False stops before the next ``recompute`` (a framework may hold the arrays of the
            call that just ended until it starts the next one, so a recomputation waits for
            that).
        """
        start = self.position
        end = (self._next_framework if recompute else self._next_stop)[start]
        self.position = end
        return self.plan[start:end]

    def pass_to(self, kind: str, v: int, passable: Callable[[CursorEvent], bool]) -> bool:
        """Step past the events that `passable` accepts until the framework's `kind` call of
        node id `v` is next, and return True; False where another event comes first (the
        cursor then stays at it). An executor that watches only some of the framework's calls
        (those with events of its own beside them) passes the others so.

        Parameters
        ----------
        kind : str
            One of :data:`FRAMEWORK_KINDS`.
        v : int
            The node id of the call.
        passable : callable
            Takes an event ``(kind, node id, outputs)``; True where the cursor may step past
            it unexecuted.

        Examples
        --------
        >>> g = ls.Graph.chain(3, memory=4)
        >>> c = ls.EventCursor(ls.schedule(ls.CanonicalStrategy(g, [{0, 1, 2}])))
        >>> [c.expect("forward", v) for v in range(3)], c.peek()
        ([True, True, True], ('seed_grad', 2, (0,)))
        >>> c.pass_to("backward", 1, lambda e: e[0] != "free_value"), c.peek()
        (True, ('backward', 1, ()))
        >>> c.pass_to("backward", 0, lambda e: e[0] == "backward"), c.peek()[0]
        (False, 'free_grad')
        """
        target = (kind, v)
        plan, i = self.plan, self.position
        while i < len(plan) and plan[i][:2] != target and passable(plan[i]):
            i += 1
        self.position = i
        return i < len(plan) and plan[i][:2] == target

    def recomputed_nodes(self) -> set[int]:
        """Set of the node ids the schedule recomputes."""
        return {v for kind, v, _ in self.plan if kind == "recompute"}
