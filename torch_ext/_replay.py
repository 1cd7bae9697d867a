"""The executor's view of the traced operations: matching each dispatched call against the
graph (:class:`ForwardCheck`) and running a node's call again (:class:`Call`)."""

import torch

from . import _ops
from ._compat import op_schema
from ._diagnose import autocast_state, likely_cause, user_frame
from .exceptions import CONTEXT, InternalError, OpRecord, StrategyMismatchError

__all__ = ["ForwardCheck", "Call"]

_NEEDED_ATTRS = ("op", "inputs", "outputs", "absorbed")


class ForwardCheck:
    """The traced sequence of operations (nodes and absorbed operations), and the position of
    the step being run in it.

    Parameters
    ----------
    graph : lowerset.Graph
        Recorded by :func:`torch_ext.trace` (or loaded from its JSON).
    model : torch.nn.Module, optional
        The model the step runs: a mismatch then says whether its train/eval mode differs
        from the traced one (:mod:`torch_ext._diagnose`).

    Raises
    ------
    StrategyMismatchError
        On construction, if `graph` was not recorded by :func:`torch_ext.trace`.
    """

    sequence: list[tuple[str, int | None]]   # (name, node or None)
    _where: list[tuple[str, int, str] | None]

    def __init__(self, graph, model=None):
        n = graph.n
        if (not graph.has_facts or list(graph.labels) != list(range(n))
                or any(k not in graph.attrs[v] for v in range(n) for k in _NEEDED_ATTRS)):
            raise StrategyMismatchError(
                "the strategy's graph was not recorded by torch_ext.trace (its nodes need the "
                f"labels 0..n-1, execution facts and the attrs {', '.join(_NEEDED_ATTRS)}); "
                "plan on torch_ext.trace(...) or load the strategy with "
                "load_strategy(path, graph=traced)")
        self.n = n
        self.model = model
        self.modes = graph.attrs[0].get("step", {}) if n else {}
        self.autocast_now = None
        self.attrs = [graph.attrs[v] for v in range(n)]
        self.facts = graph.facts.nodes
        self.sequence, self._where = [], []   # (name, node or None); (file, line, function)
        for v, a in enumerate(self.attrs):
            self._add_absorbed(a, "absorbed")
            self.sequence.append((a["op"], v))
            self._where.append(_frame(a.get("where")))
            self._add_absorbed(a, "absorbed_after")
        self._in_sig = [tuple(_expected(x, self.attrs) for x in a["inputs"]) for a in self.attrs]
        self._out_sig = [tuple((tuple(s), d, dev) for s, d, dev in a["outputs"])
                         for a in self.attrs]
        # the same as PyTorch's objects, compared first at every call (no strings made)
        self._in_obj = [tuple(None if x[0] == "node" else _objects(x[1]) for x in sig)
                        for sig in self._in_sig]
        self._out_obj = [tuple(map(_objects, sig)) for sig in self._out_sig]
        self._calls = [_CallFacts(a) for a in self.attrs]
        self.reset()

    def _add_absorbed(self, a, key):
        names = a.get(key, ())
        where = a.get(f"{key}_where") or [None] * len(names)
        self.sequence += [(name, None) for name in names]
        self._where += [_frame(w) for w in where]

    def reset(self):
        self.position = 0
        self.nodes_seen = 0

    def same_operations(self, other):
        """Whether `other` checks the same sequence of operations, with the same argument and
        output signatures."""
        return (self.sequence, self._in_sig, self._out_sig) == (
            other.sequence, other._in_sig, other._out_sig)

    def enter(self):
        """Note the autocast state as the executor's block is entered (outside any dispatched
        operation, where PyTorch reports it reliably)."""
        self.autocast_now = autocast_state(self.modes.get("device", "cpu"))

    @property
    def forward_done(self):
        return self.position == len(self.sequence)

    def name(self, v):
        return self.attrs[v]["op"]

    def starts_step(self, func, args, kwargs):
        """Whether a call is the first of the traced sequence (name and argument signature)."""
        name, v = self.sequence[0]
        if _ops.op_name(func) != name:
            return False
        if v is None:
            return True
        tensors = _ops.call_tensors(args, kwargs)
        return len(tensors) == len(self._in_sig[v]) and all(
            x[0] == "node" or _sig(t) == x[1] for t, x in zip(tensors, self._in_sig[v]))

    def before(self, func, args, kwargs, value_of):
        """Check a call against the next traced operation, before it runs; return the
        :class:`Call` (``.node`` None for an absorbed operation)."""
        i = self.position
        tensors = _ops.call_tensors(args, kwargs)
        if i >= len(self.sequence):
            raise self._mismatch(
                f"operation {i} ({func}) is beyond the {len(self.sequence)} operations of the "
                "traced step: the forward pass changed (re-trace and re-plan), or an operation "
                "the trace did not see runs between the forward and the backward pass (compute "
                "metrics after backward(), or under torch.no_grad() outside the block)",
                i, func, None, tensors)
        name, v = self.sequence[i]
        if _ops.op_name(func) != name or (v is not None
                                          and not self._inputs_match(v, tensors, value_of)):
            got = f"{func}({', '.join(_fmt(t, value_of) for t in tensors)})"
            want = name if v is None else f"{name}({', '.join(map(_fmt_exp, self._in_sig[v]))})"
            expected = None if v is None else self._in_sig[v]
            cause = likely_cause(self.modes, self.model, self.autocast_now, func, kwargs,
                                 tensors, expected, name)
            raise self._mismatch(
                f"operation {i} of the forward pass is {got}, but the traced step has {want} "
                f"there (node {v if v is not None else self.nodes_seen}): "
                f"{cause or _GENERIC}", i, func, None, tensors)
        if v is None and any(value_of.get(t) is not None for t in tensors):
            raise self._mismatch(
                f"operation {i} ({func}) reads a value of the graph where the traced step "
                "read only parameters and inputs; re-trace and re-plan", i, func, None, tensors)
        self.position += 1
        return Call(v, tensors, self._calls[v] if v is not None else None)

    def _inputs_match(self, v, tensors, value_of):
        exp = self._in_sig[v]
        if len(tensors) != len(exp):
            return False
        for t, x, obj in zip(tensors, exp, self._in_obj[v]):
            ref = value_of.get(t)
            if x[0] == "node":
                if ref != x[1]:
                    return False
            elif ref is not None or not (_matches(t, obj) or _sig(t) == x[1]):
                return False
        return True

    def after(self, v, outs, tensors):
        """Check the outputs of node `v` (shapes, dtypes, devices) against the traced ones."""
        exp = self._out_obj[v]
        if len(outs) == len(exp) and all(map(_matches, outs, exp)):
            self.nodes_seen = v + 1
            return
        got = _ops.signature(outs)
        if got != self._out_sig[v]:
            cause = likely_cause(self.modes, self.model, self.autocast_now, None, {}, [], None,
                                 "")
            raise self._mismatch(
                f"node {v} ({self.name(v)}) returned {list(got)}, but the traced step has "
                f"{list(self._out_sig[v])}: {cause or _GENERIC}", self.position - 1,
                self.sequence[self.position - 1][0], v, tensors, got)
        self.nodes_seen = v + 1

    # -- the operations around a mismatch (built only when one is raised) ----------------------

    def _mismatch(self, message, i, func, v, tensors, outputs=None):
        """The StrategyMismatchError of operation `i` (`func` on `tensors`, matched to node
        `v` where not None, returning `outputs` where it ran): the traced operations up to
        it, and this step's differing one (the executor adds those before it)."""
        position = self.nodes_seen if v is None else v
        actual = OpRecord(i, str(func), v, _ops.signature(tensors), outputs, user_frame())
        return StrategyMismatchError(message, position, operation=i,
                                     traced=self.traced_records(i), actual=(actual,))

    def traced_records(self, i):
        """The traced step's operations ``i - CONTEXT`` to `i` (those it has), as OpRecords."""
        return tuple(self._traced(j) for j in range(max(0, i - CONTEXT),
                                                     min(i + 1, len(self.sequence))))

    def _traced(self, j):
        name, v = self.sequence[j]
        if v is None:
            return OpRecord(j, name, None, None, None, self._where[j])
        return OpRecord(j, name, v, self._node_inputs(v), self._out_sig[v], self._where[j])

    def _node_inputs(self, v):
        """``(shape, dtype, device)`` of each tensor argument of node `v` as traced."""
        return tuple(self._out_sig[x[1][0]][x[1][1]] if x[0] == "node" else x[1]
                     for x in self._in_sig[v])

    def actual_record(self, i, func, v, measured):
        """Operation `i` of this step as an OpRecord, from what the executor kept of it (see
        :meth:`torch_ext.RecomputeContext._dispatch`): `func` matched node `v`, whose checked
        arguments and outputs are the traced ones; where `v` is None (not a node, not
        compared), `measured` holds ``(shape, dtype, device)`` of its tensor arguments."""
        if v is not None:
            return OpRecord(i, str(func), v, self._node_inputs(v), self._out_sig[v], None)
        inputs = tuple((tuple(s), str(d).replace("torch.", ""), str(dev))
                       for s, d, dev in measured)
        return OpRecord(i, str(func), None, inputs, None, None)


#: The causes a mismatch may have when none shows in particular.
_GENERIC = ("a data-dependent branch took another way, or the model, its train/eval mode "
            "(pass model= to have it checked), autocast, the batch shape, dtype or device "
            "differs from the traced one; re-trace and re-plan")


def _frame(where):
    """A recorded ``[file, line, function]`` (JSON) as a tuple, or None."""
    return None if where is None else tuple(where)


def _expected(x, attrs):
    if x[0] == "node":
        return ("node", (x[1], x[2]))
    return ("external", (tuple(x[1]), x[2], x[3]))


def _sig(t):
    return _ops.signature([t])[0]


def _objects(sig):
    """``(shape, dtype, device)`` as :func:`_ops.signature` writes it, as PyTorch's objects
    (a dtype or a device it does not
    name: None)."""
    shape, dtype, device = sig
    try:
        device = torch.device(device)
    except RuntimeError:
        device = None
    return (shape, getattr(torch, dtype, None), device)


def _matches(t, obj):
    """Whether tensor `t` has the shape, dtype and device of :func:`_objects`' `obj` (False
    where the dtype was not named: the caller then compares the strings)."""
    return t.shape == obj[0] and t.dtype is obj[1] and t.device == obj[2]


def _fmt(t, value_of):
    ref = value_of.get(t)
    where = f"node {ref[0]}[{ref[1]}]" if ref is not None else "external"
    return f"{where} {tuple(t.shape)}:{str(t.dtype).replace('torch.', '')}:{t.device}"


def _fmt_exp(x):
    if x[0] == "node":
        return f"node {x[1][0]}[{x[1][1]}]"
    shape, dtype, device = x[1]
    return f"external {shape}:{dtype}:{device}"


class _CallFacts:
    """What the trace recorded of a node's tensor arguments that a recomputation needs, read
    once per context: ``sources[i]``, the value ``(node, output)`` argument `i` is (None for
    an external tensor); ``externals``, ``(i, written in place)`` per external argument;
    ``random``, whether the call draws random numbers."""

    __slots__ = ("sources", "externals", "random")

    def __init__(self, attrs):
        inputs = attrs["inputs"]
        mutates = set(attrs.get("mutates", ()))
        self.sources = [(x[1], x[2]) if x[0] == "node" else None for x in inputs]
        self.externals = [(i, i in mutates) for i, x in enumerate(inputs) if x[0] != "node"]
        self.random = bool(attrs.get("random"))


class Call:
    """One node's call: what the executor checked before it ran, and, captured in the forward
    pass, what a recomputation needs (the non-tensor arguments, the external tensors, the
    random generator's state).

    Attributes
    ----------
    node : int or None
    tensors : list of torch.Tensor
        The call's tensor arguments in the forward pass (dropped once captured).
    """

    def __init__(self, node, tensors, facts):
        self.node, self.tensors, self.facts = node, tensors, facts
        self.rerun_tensors = None

    def capture(self, func, args, kwargs):
        """Keep what a recomputation needs; return self."""
        leaves, self.spec = _ops.flatten_call(args, kwargs)
        self.func = func
        self.positions = positions = _ops.tensor_positions(leaves)
        self.externals = {i: (leaves[positions[i]], written)
                          for i, written in self.facts.externals}
        for p in positions:   # the values are the schedule's to hold, not the call's
            leaves[p] = None
        self.leaves = leaves
        self.rng = _Draws(func, self.tensors) if self.facts.random else None
        self.tensors = None
        return self

    def rerun(self, held):
        """Run the call again on the held values (no gradient, the forward pass's random
        state); return its output tensors."""
        leaves = list(self.leaves)
        tensors = []
        for i, p in enumerate(self.positions):
            src = self.facts.sources[i]
            if src is not None:
                t = held.get(src)
                if t is None:  # pragma: no cover - the schedule recomputes inputs first
                    raise InternalError(f"internal error: input {i} of node {self.node} is not "
                                        "held for its recomputation")
            else:
                t, mutated = self.externals[i]
                if mutated:  # the side effect happened once, in the forward pass
                    t = t.clone()
            leaves[p] = t
            tensors.append(t)
        args, kwargs = _ops.unflatten_call(leaves, self.spec)
        with torch.no_grad(), _ReplayedRandom(self.rng, kwargs):
            out = self.func(*args, **kwargs)
        self.rerun_tensors = tensors
        return _ops.output_tensors(out)


class _Draws:
    """The state of the generator a random call draws from, taken before it runs in the forward
    pass: a clone of the default generator of its device (no memory of PyTorch's allocator)."""

    def __init__(self, func, tensors):
        self.device = tensors[0].device if tensors else torch.device("cpu")
        self.generator = _default_generator(self.device).clone_state()
        schema = op_schema(func)
        self.takes_generator = schema is not None and any(
            a.name == "generator" for a in schema.arguments)


def _default_generator(device):
    if device.type == "cuda":
        return torch.cuda.default_generators[device.index or 0]
    return torch.default_generator


class _ReplayedRandom:
    """Make a recomputation draw what the forward pass drew: an operation that takes a
    ``generator`` argument gets a clone of the captured state (the default generator is not
    touched); any other has the default generator set to the captured state for the duration
    and put back afterwards (two transient copies of the state, 5 KB on the CPU)."""

    def __init__(self, draws, kwargs):
        self.draws, self.kwargs = draws, kwargs

    def __enter__(self):
        d = self.draws
        if d is None:
            return
        if d.takes_generator and self.kwargs.get("generator") is None:
            self.kwargs["generator"] = d.generator.clone_state()
            self._swap = None
            return
        gen = _default_generator(d.device)
        self._swap = (gen, gen.clone_state())
        gen.set_state(d.generator.get_state())

    def __exit__(self, *exc):
        if self.draws is not None and self._swap is not None:
            gen, before = self._swap
            gen.set_state(before.get_state())
        return False
