"""An independent replay of a DTR schedule (lowerset.dtr), the test oracle for its runtime.

It walks the events with dicts over the execution facts, apart from the runtime and from
``lowerset._schedule_kernels``: it checks that the program runs as the facts say (each forward
once in ``forward_order``, each backward once in ``backward_order``), that every function runs
with every array it reads present, that only present arrays are evicted or freed and never
what must not be (returned outputs, a stochastic function's state, what a pinned or in-place
function makes), that a pinned function never runs twice and that a replay makes exactly the
missing outputs; and it counts the bytes with its own buffers (the gradients with the naive
reference of ``schedule_reference``). ``replay(s)`` returns ``(timeline, highs)``, resident
bytes included, or raises AssertionError naming the first event that breaks a rule.
"""

import numpy as np

from schedule_reference import (
    _backward_grads,
    _Buffers,
    _grad_outputs,
    _grads_at_start,
    _written_chain,
)


def replay(s):
    """(timeline, highs) of DTR schedule `s` (a lowerset.DTRSchedule), checking its rules."""
    g = s.graph
    F = g.facts
    st = _State(g)
    timeline = np.zeros(len(s.events), dtype=np.int64)
    highs = np.zeros(len(s.events), dtype=np.int64)
    for i, ev in enumerate(s.events):
        extra = _EVENTS[ev.kind](st, g.index[ev.node], ev)
        timeline[i] = st.mem.used
        highs[i] = st.mem.used + (extra or 0)
    assert st.forwards == list(F.forward_order), "forward order"
    assert st.backwards == list(F.backward_order), "backward order"
    return timeline + F.resident, highs + F.resident


class _State:
    def __init__(self, g):
        self.g = g
        self.F = g.facts
        self.mem = _Buffers()
        self.val, self.state = {}, {}          # (node, k) -> buffer, node -> buffer
        self.pending, self.popped = _grads_at_start(g, self.mem), {}
        self.forwards, self.backwards = [], []
        self.frozen = _frozen(self.F)
        self.returned = set(self.F.returned)

    def need_value(self, s, k, why):
        assert (s, k) in self.val, f"{why} reads value ({self.g.labels[s]!r}, {k}): absent"

    def make_outputs(self, v, only=None):
        """Make node v's outputs (those in `only`), views sharing their base's buffer."""
        nf = self.F.nodes[v]
        made = 0
        for k, p in enumerate(nf.output_views):
            if only is not None and k not in only:
                continue
            if p >= 0:
                s, sk = nf.args[p]
                self.val[v, k] = self.mem.ref(self.val.get((s, sk))) if s >= 0 else None
            else:
                self.val[v, k] = self.mem.new(nf.outputs[k])
                made += nf.outputs[k]
        return made


def _forward(st, v, ev):
    nf = st.F.nodes[v]
    assert v not in st.forwards, f"forward of {ev.node!r} twice"
    st.forwards.append(v)
    for s, k in nf.args:
        if s >= 0:
            st.need_value(s, k, f"forward of {ev.node!r}")
    made = st.make_outputs(v)
    if nf.state:
        st.state[v] = st.mem.new(nf.state)
        made += nf.state
    return max(0, nf.forward_peak - made)


def _rematerialize(st, v, ev):
    nf = st.F.nodes[v]
    assert v in st.forwards and not st.frozen[v], f"replay of {ev.node!r}"
    for s, k in nf.args:
        if s >= 0:
            st.need_value(s, k, f"replay of {ev.node!r}")
    missing = tuple(k for k in range(len(nf.outputs)) if (v, k) not in st.val)
    assert ev.outputs == missing, f"replay of {ev.node!r} makes {ev.outputs}, not {missing}"
    made = st.make_outputs(v, set(missing))
    dup = sum(nf.outputs[k] for k in range(len(nf.outputs))
              if k not in missing and nf.output_views[k] < 0)
    if nf.state and nf.stochastic:
        assert v in st.state, f"replay of stochastic {ev.node!r} without its state"
    elif nf.state and v in st.state:
        dup += nf.state
    elif nf.state:
        st.state[v] = st.mem.new(nf.state)
        made += nf.state
    return max(dup, nf.forward_peak - made)


def _backward(st, v, ev):
    nf = st.F.nodes[v]
    assert v not in st.backwards, f"backward of {ev.node!r} twice"
    st.backwards.append(v)
    for p in nf.reads_args:
        s, k = nf.args[p]
        if s >= 0:
            st.need_value(s, k, f"backward of {ev.node!r}")
    for k in nf.reads_outputs:
        st.need_value(v, k, f"backward of {ev.node!r}")
    if nf.state:
        assert v in st.state, f"backward of {ev.node!r} reads its state: absent"
    before = st.mem.used
    st.popped[v] = {k: st.pending.pop(("n", v, k)) for k in _grad_outputs(st.g)[v]}
    high = _backward_grads(st.F, v, nf, st.mem, st.pending, st.popped[v])
    return max(0, nf.backward_peak - (high - before)) + (high - st.mem.used)


def _release_values(st, v, ev):
    for k in ev.outputs:
        assert (v, k) in st.val, f"{ev.kind} of absent ({ev.node!r}, {k})"
        if ev.kind == "evict":
            assert (v, k) not in st.returned and not st.frozen[v], f"evict of ({ev.node!r}, {k})"
        st.mem.unref(st.val.pop((v, k)))


def _release_state(st, v, ev):
    assert v in st.state, f"{ev.kind} of the absent state of {ev.node!r}"
    if ev.kind == "evict_state":
        assert not st.F.nodes[v].stochastic and not st.frozen[v], f"evict state {ev.node!r}"
    st.mem.unref(st.state.pop(v))


def _seed(st, v, ev):
    st.pending["n", v, ev.outputs[0]] = st.mem.ref(st.mem.new(ev.bytes))


def _free_grad(st, v, ev):
    for b in st.popped.pop(v).values():
        st.mem.unref(b)


_EVENTS = {"forward": _forward, "rematerialize": _rematerialize, "backward": _backward,
           "evict": _release_values, "free_value": _release_values,
           "evict_state": _release_state, "free_state": _release_state, "seed_grad": _seed,
           "free_grad": _free_grad}


def _frozen(F):
    """Per node: pinned, or in place, or the producer of an array written in place."""
    frozen = [nf.pinned for nf in F.nodes]
    for w, nf in enumerate(F.nodes):
        for p in nf.output_views if nf.inplace else ():
            for u in _written_chain(F, nf, p):
                frozen[w] = frozen[u] = True
    return frozen
