"""Bytes a traced step holds outside its operations, measured: what FSDP2 allocates around them.

FSDP2 (``fully_shard``) gathers a module's parameters before its forward and again before its
backward, frees them after each (``reshard``), and in its post-backward hook moves the
gradients into reduce-scatter buffers and frees the unsharded ones. None of that is a traced
operation: storage is resized in hooks, buffers are kept for overlap. It depends on the step's
order of operations, not on what a plan drops, so the trace measures it once: at the start of
each operation's window (``MemoryMeasure.window_starts``) the bytes in use above the step's
start, less what the schedule of a plan that drops nothing holds just before that event (the
plan whose run is the traced one: its values live as the schedule's liveness analysis says,
which the plain schedule's recorded frees need not). The difference is the
step's ``outside_forward`` / ``outside_backward`` (:class:`lowerset.ExecutionFacts`), which
every plan's schedule adds at the same positions.
"""

import numpy as np

import lowerset
from lowerset.scheduling import EVENT_KINDS

__all__ = ["outside_bytes"]

_FORWARD = EVENT_KINDS.index("forward")
_BACKWARD = EVENT_KINDS.index("backward")


def outside_bytes(graph, op_index, starts):
    """``(outside_forward, outside_backward)`` of `graph` (tuples of int, bytes, one per
    forward and backward position of its facts): the measured bytes in use when each
    operation's window opened less the bytes the schedule of the plan that drops nothing holds
    just before that event (resident bytes left out of both).

    Parameters
    ----------
    graph : lowerset.Graph
        The traced graph, its facts without outside bytes.
    op_index : sequence of int
        Per node id, the index of its recorded operation (the window names ``f{i}``, ``b{i}``).
    starts : dict
        ``MemoryMeasure.window_starts`` of the trace's meter. A window it lacks takes the
        figure of the position before it (0 for the first).
    """
    kept = lowerset.CanonicalStrategy(graph, [set(graph.labels)])
    sched = lowerset.schedule(kept)
    kind, node = sched.arrays[0], sched.arrays[1]
    timeline = sched.timeline - graph.facts.resident
    before = np.concatenate(([0], timeline[:-1]))
    held_f = {int(node[i]): int(before[i]) for i in np.flatnonzero(kind == _FORWARD)}
    held_b = {int(node[i]): int(before[i]) for i in np.flatnonzero(kind == _BACKWARD)}
    facts = graph.facts
    return (_per_position(facts.forward_order, "f", held_f, op_index, starts),
            _per_position(facts.backward_order, "b", held_b, op_index, starts))


def _per_position(order, prefix, held, op_index, starts):
    out, last = [], 0
    for v in order:
        start = starts.get(f"{prefix}{op_index[v]}")
        if start is not None:
            last = int(start) - held[v]
        out.append(last)
    return tuple(out)
