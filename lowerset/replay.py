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

from collections.abc import Iterator

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
        # event i -> the first framework event at or after i (len(plan) if none)
        nxt = [len(self.plan)] * (len(self.plan) + 1)
        for i in range(len(self.plan) - 1, -1, -1):
            nxt[i] = i if self.plan[i][0] in FRAMEWORK_KINDS else nxt[i + 1]
        self._next_framework = nxt

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

    def own_events(self, recompute: bool = True) -> Iterator[CursorEvent]:
        """Yield the events up to the framework's next call, ``(kind, node id, outputs)``, and
        step past each one as it is yielded.

        Parameters
        ----------
        recompute : bool, default True
            False stops before the next ``recompute`` (a framework may hold the arrays of the
            call that just ended until it starts the next one, so a recomputation waits for
            that).
        """
        end = self._next_framework[self.position]
        while self.position < end:
            event = self.plan[self.position]
            if event[0] == "recompute" and not recompute:
                return
            self.position += 1
            yield event

    def recomputed_nodes(self) -> set[int]:
        """Set of the node ids the schedule recomputes."""
        return {v for kind, v, _ in self.plan if kind == "recompute"}
