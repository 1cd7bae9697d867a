"""Execute a canonical strategy (paper, Sec. 3) in a Chainer training step.

The hook lets Chainer build its usual graph. In the forward pass it drops the arrays of every
value of V_i ∖ ∂(L_i) (i < k) once all functions that consume the value have run; in the backward
pass, when a function needs a dropped value, it recomputes the dropped values of that segment
that are still needed, from the cached boundary ∂(L_{i-1}), and puts them back where Chainer
looks for them. With liveness analysis it also drops each value (and each function's saved state)
right after its last use in the backward pass.
"""

import contextlib

import chainer
import numpy as np

import lowerset

from . import _backend
from . import _chainer_internals as _ci
from .exceptions import HookUsageError, StrategyMismatchError
from .trace import array_attr_ids, forward_state, output_arrays

__all__ = ["RecomputeHook", "LivenessHook"]

_REQUIRED_ATTRS = ("function", "inputs", "outputs", "retained_inputs", "retained_outputs",
                   "backward", "stochastic")


def _fmt_sig(name, shapes):
    return f"{name}({', '.join(f'{tuple(s)}:{d}' for s, d in shapes)})"


class RecomputeHook(chainer.FunctionHook):
    """Run a training step under a canonical strategy of recomputation (paper, Sec. 3).

    This hook overrides ``forward_preprocess``, ``forward_postprocess``, ``backward_preprocess``
    and ``backward_postprocess``. Register it globally with ``with hook:`` around one forward
    and its backward (registering it on a single function with ``FunctionNode.add_hook`` is not
    supported). Function applications are matched to the strategy's graph by position in forward
    order, so the graph must come from :func:`chainer_ext.trace` of the same model, batch size
    and input shapes.

    Parameters
    ----------
    strategy : lowerset.CanonicalStrategy or None
        A strategy planned on a graph from :func:`chainer_ext.trace`. ``None`` (with `graph`)
        recomputes nothing: only liveness analysis (the ablation).
    liveness : bool
        Drop every value and every function's saved state right after its last use in the
        backward pass (default). If False, values live as long as Chainer keeps them.
    name : str, optional
        Hook name (unique among registered hooks); default ``"RecomputeHook"``.
    graph : TracedGraph, optional
        The traced graph, needed only when `strategy` is None.

    Attributes
    ----------
    strategy : lowerset.CanonicalStrategy
    last_iteration : dict
        After each ``with`` block: ``"discarded"`` (labels dropped in forward),
        ``"recomputed"`` (labels recomputed in backward, each at most once) and
        ``"freed"`` (labels freed by liveness analysis), in the order it happened.

    Raises
    ------
    TypeError
        If `strategy` is not a CanonicalStrategy (or None).
    StrategyMismatchError
        If the strategy's graph was not recorded by :func:`chainer_ext.trace`; and, while
        running, before the hook drops anything for a function application, if that application
        differs from the graph (function class, input or output shapes and dtypes, wiring, number
        of functions).
    HookUsageError
        If another RecomputeHook is already registered (nesting), or the hook is added to a
        single function.

    Notes
    -----
    - One ``with`` block holds one forward pass and its backward pass. Forward applications
      after the backward pass has started (including those Chainer makes inside backward) are
      not matched against the graph.
    - Each value is recomputed at most once per iteration; a dropped value that no backward step
      needs is not recomputed at all, so the realised overhead is at most the planned one.
    - The last segment V_k is kept after the forward pass (the backward pass starts with it), and
      values without successors (the loss, metrics) are never dropped.
    - Recomputation calls each function's ``forward`` under the configuration captured when it
      first ran, with ``chainer.config.in_recomputing`` set; BatchNormalization does not update its
      running statistics a second time, and stochastic functions (Dropout, Gaussian, ...) reuse
      the mask or noise they drew, which is kept until their backward.
    - Intermediate Variables the caller still holds lose their arrays when their values are
      dropped; the outputs of the traced callable are never dropped.
    - If the forward pass ends inside the ``with`` block without a backward pass, the dropped
      values are recomputed at exit, so a backward pass outside the block still works (without
      savings).
    - If an exception leaves the ``with`` block, the hook drops its per-iteration state and can
      be used again; the model is untouched.

    Examples
    --------
    >>> graph = trace(lambda: F.softmax_cross_entropy(model(x), t))   # doctest: +SKIP
    >>> hook = RecomputeHook(lowerset.solve(graph, mode="memory"))     # doctest: +SKIP
    >>> with hook:                                                     # doctest: +SKIP
    ...     loss = F.softmax_cross_entropy(model(x), t)
    ...     loss.backward()
    >>> hook.last_iteration["recomputed"]                              # doctest: +SKIP
    [3, 4, 7]

    References
    ----------
    .. [1] Kusumoto et al., NeurIPS 2019, Sec. 3 (canonical strategy, liveness analysis).
    """

    name = "RecomputeHook"

    def __init__(self, strategy=None, *, liveness=True, name=None, graph=None):
        if strategy is None:
            if graph is None:
                raise TypeError("RecomputeHook(None) needs graph= (liveness analysis only)")
            strategy = lowerset.CanonicalStrategy(graph, [set(graph.labels)], method="none")
        if not isinstance(strategy, lowerset.CanonicalStrategy):
            raise TypeError(f"strategy must be a lowerset.CanonicalStrategy, got "
                            f"{type(strategy).__name__}")
        if name is not None:
            self.name = name
        self.strategy = strategy
        self.liveness = bool(liveness)
        self._prepare(strategy)
        self.last_iteration = {"discarded": [], "recomputed": [], "freed": []}
        self._reset()

    # -- static analysis ------------------------------------------------------------------------

    def _prepare(self, s):
        g = s.graph
        n = g.n
        if (sorted(g.labels) != list(range(n))
                or any(k not in g.attrs[v] for v in g.labels for k in _REQUIRED_ATTRS)):
            raise StrategyMismatchError(
                "the strategy's graph was not recorded by chainer_ext.trace (its nodes need the "
                "labels 0..n-1 and the attrs 'function', 'inputs', 'outputs', ...); plan on "
                "trace(...) or load the strategy with CanonicalStrategy.from_dict(d, graph=traced)")
        A = [g.attrs[j] for j in range(n)]
        self._n = n
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
        self._ret_in = [tuple(a["retained_inputs"]) for a in A]
        self._ret_out = [tuple(a["retained_outputs"]) for a in A]
        self._bw = [bool(a["backward"]) for a in A]
        self._stoch = [bool(a["stochastic"]) for a in A]
        seg = [0] * n
        boundary = [False] * n
        for i, (Vi, Bi) in enumerate(zip(s.segments, s.cached)):
            for v in Vi:
                seg[v] = i
            for v in Bi:
                boundary[v] = True
        k = len(s.segments)
        consumers = [[] for _ in range(n)]
        for w in range(n):
            for p, x in enumerate(self._args[w]):
                if x[0] == "node":
                    consumers[x[1]].append((w, p))
        self._preds = [sorted({x[1] for x in self._args[w] if x[0] == "node"}) for w in range(n)]
        self._n_consumers = [len({w for w, _ in consumers[v]}) for v in range(n)]
        self._drop = [seg[v] < k - 1 and not boundary[v] and bool(consumers[v])
                      for v in range(n)]
        uses = []
        backward_uses = []
        for v in range(n):
            u, bu = set(), set()
            if self._bw[v] and self._ret_out[v]:
                bu.add(v)
            for w, p in consumers[v]:
                if self._bw[w] and p in self._ret_in[w]:
                    bu.add(w)
                if self._drop[w]:
                    u.add(w)
            uses.append(u | bu)
            backward_uses.append(bu)
        self._uses0 = [len(u) for u in uses]
        self._used_by = [[] for _ in range(n)]
        # values that function w uses only to be recomputed (not in its backward): their use
        # ends once w has been recomputed, which happens at most once per iteration
        self._recompute_only = [[] for _ in range(n)]
        for v in range(n):
            for w in uses[v]:
                self._used_by[w].append(v)
                if w not in backward_uses[v]:
                    self._recompute_only[w].append(v)
        # boundary values that some dropped function reads: the hook keeps them (the cache)
        self._cache = [not self._drop[v] and any(self._drop[w] for w, _ in consumers[v])
                       for v in range(n)]
        self._sink = [not consumers[v] for v in range(n)]
        self._types = _backend.array_types()

    # -- per-iteration state --------------------------------------------------------------------

    def _reset(self):
        self._phase = "idle"    # idle -> forward -> backward
        self._depth = 0         # nesting of forward applications
        self._bdepth = 0        # nesting of backward steps
        self._pos = 0
        self._pending = None
        self._funcs = [None] * self._n
        self._func_pos = {}
        self._vals = {}
        self._ext = {}
        self._cfg = {}
        self._before = None
        self._in_ids = None
        self._state = [()] * self._n
        self._state_freed = [False] * self._n
        self._fwd_left = list(self._n_consumers)
        self._count = list(self._uses0)
        self._discarded = [False] * self._n
        self._had = {}
        self._bw_done = [False] * self._n
        self._recomputed = [False] * self._n
        self._current = None
        self._log = {"discarded": [], "recomputed": [], "freed": []}

    def __enter__(self):
        for h in chainer.get_function_hooks().values():
            if isinstance(h, RecomputeHook):
                raise HookUsageError(
                    f"RecomputeHook {h.name!r} is already registered; RecomputeHooks cannot be "
                    "nested (each would drop values the other needs)")
        self._reset()
        self._phase = "forward"
        return super().__enter__()

    def __exit__(self, exc_type, exc, tb):
        try:
            if exc_type is None and self._phase == "forward" and self._pos:
                self._complete_pending()
                todo = [v for v in range(self._n) if self._discarded[v]]
                if todo:
                    self._recompute(todo)
        finally:
            self.last_iteration = self._log
            self._reset()
            super().__exit__(exc_type, exc, tb)

    def added(self, function):
        if function is not None:
            raise HookUsageError("register RecomputeHook globally with `with hook:`; adding it "
                                 "to a single function is not supported")

    # -- forward --------------------------------------------------------------------------------

    def forward_preprocess(self, function, in_data):
        if self._phase != "forward":
            return
        if self._depth:
            self._depth += 1
            return
        if not chainer.config.enable_backprop:
            self._depth = 1   # not a node (trace skips these too)
            return
        j = self._pos
        name = type(function).__name__
        if j >= self._n:
            raise StrategyMismatchError(
                f"function {j} ({name}) is beyond the {self._n} functions of the strategy's "
                "graph: the forward pass changed; re-trace and re-plan", position=j)
        exp = self._in_sig[j]
        if (name != self._names[j] or len(in_data) != len(exp)
                or any(a.shape != s or a.dtype != d for a, (s, d) in zip(in_data, exp))):
            got = [(a.shape, a.dtype) for a in in_data]
            raise StrategyMismatchError(
                f"function {j} in forward order is {_fmt_sig(name, got)}, but the strategy's "
                f"graph has {_fmt_sig(self._names[j], exp)}: the strategy was planned for "
                "another model, batch size or input shape, or the forward pass changed; "
                "re-trace and re-plan", position=j)
        # the previous function is complete now: check it, then drop what it made droppable
        self._complete_pending()
        self._depth = 1
        self._funcs[j] = function
        self._func_pos[id(function)] = j
        self._before = array_attr_ids(function, self._types)
        self._in_ids = {id(a) for a in in_data}
        if self._drop[j]:
            args = self._args[j]
            self._ext[j] = {p: a for p, a in enumerate(in_data) if args[p][0] != "node"}
            self._cfg[j] = _ci.capture_config()
        self._pos = j + 1
        self._pending = j

    def forward_postprocess(self, function, in_data):
        if self._phase != "forward":
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
        sig = tuple((nd.shape, np.dtype(nd.dtype)) if nd is not None else None for nd in nodes)
        if sig != self._out_sig[j]:
            raise StrategyMismatchError(
                f"function {j} ({name}) returned {sig}, but the strategy's graph has "
                f"{self._out_sig[j]}; re-trace and re-plan", position=j)
        for p, x in enumerate(self._args[j]):
            creator = f.inputs[p].creator_node
            cpos = self._func_pos.get(id(creator)) if creator is not None else None
            if x[0] == "node":
                ok = cpos == x[1] and creator.outputs[x[2]]() is f.inputs[p]
            else:
                ok = cpos is None
            if not ok:
                raise StrategyMismatchError(
                    f"input {p} of function {j} ({name}) is wired differently from the "
                    f"strategy's graph (expected {list(x)}); re-trace and re-plan", position=j)
        self._state[j] = tuple(forward_state(
            f, self._before, self._in_ids | {id(a) for a in outs if a is not None}, self._types))
        self._before = self._in_ids = None
        if self._cache[j]:
            self._vals[j] = tuple(outs)
        del outs
        for i in self._preds[j]:
            self._fwd_left[i] -= 1
            if self._fwd_left[i] == 0 and self._drop[i]:
                self._discard(i)

    def _discard(self, v):
        f = self._funcs[v]
        had = []
        for ref in f.outputs:
            node = ref()
            if node is None:
                had.append(False)
                continue
            had.append(_ci.node_data(node) is not None)
            _ci.set_node_data(node, None)
            var = node.get_variable_or_none()
            if var is not None:
                _ci.set_var_array(var, None)
        self._had[v] = had
        if self._ret_out[v]:
            _ci.set_retained_output_data(f, None)
        if not self._stoch[v]:
            for a in self._state[v]:
                setattr(f, a, None)
        self._discarded[v] = True
        self._log["discarded"].append(v)

    # -- backward -------------------------------------------------------------------------------

    def backward_preprocess(self, function, in_data, out_grad):
        if self._phase == "idle":
            return
        if self._phase == "forward":
            self._complete_pending()
            if self._pos != self._n:
                raise StrategyMismatchError(
                    f"backward started after {self._pos} of the {self._n} functions of the "
                    "strategy's graph: the forward pass changed; re-trace and re-plan",
                    position=self._pos)
            self._phase = "backward"
        self._bdepth += 1
        if self._bdepth != 1:
            return
        j = self._func_pos.get(id(function))
        self._current = j
        if j is None:
            return
        need = []
        if self._discarded[j] and (self._ret_out[j] or self._state[j]):
            need.append(j)
        for p in self._ret_in[j]:
            x = self._args[j][p]
            if x[0] == "node" and self._discarded[x[1]]:
                need.append(x[1])
        if need:
            self._recompute(need)

    def backward_postprocess(self, function, in_data, out_grad):
        if self._phase != "backward":
            return
        self._bdepth -= 1
        if self._bdepth:
            return
        j = self._current
        self._current = None
        if j is None:
            return
        self._bw_done[j] = True
        if self.liveness:
            self._drop_state(j)
        for v in self._used_by[j]:
            if self._recomputed[j] and v in self._recompute_only[j]:
                continue  # released when j was recomputed
            self._count[v] -= 1
            if self._count[v] == 0:
                self._free(v)

    def _drop_state(self, j):
        f = self._funcs[j]
        for a in self._state[j]:
            setattr(f, a, None)
        if self._state[j]:
            self._state_freed[j] = True

    def _free(self, v):
        self._vals.pop(v, None)
        if not self.liveness or self._sink[v]:
            return
        f = self._funcs[v]
        for ref in f.outputs:
            node = ref()
            if node is None:
                continue
            _ci.set_node_data(node, None)
            var = node.get_variable_or_none()
            if var is not None:
                _ci.set_var_array(var, None)
        if self._ret_out[v]:
            _ci.set_retained_output_data(f, None)
        self._log["freed"].append(v)

    # -- recomputation --------------------------------------------------------------------------

    def _value(self, i):
        vals = self._vals.get(i)
        if vals is None:
            vals = tuple(output_arrays(self._funcs[i]))
        return vals

    def _recompute(self, need):
        R = set()
        stack = list(need)
        while stack:
            v = stack.pop()
            if v in R:
                continue
            R.add(v)
            for x in self._args[v]:
                if x[0] == "node" and self._discarded[x[1]] and x[1] not in R:
                    stack.append(x[1])
        temp = {}
        for v in sorted(R):
            f = self._funcs[v]
            if self._stoch[v] and self._state_freed[v]:  # pragma: no cover - invariant
                raise RuntimeError(f"internal error: stochastic function {v} "
                                   f"({self._names[v]}) must be recomputed after its backward")
            xs, arrs = [], None
            for p, x in enumerate(self._args[v]):
                if x[0] == "node":
                    arrs = temp.get(x[1])
                    if arrs is None:
                        arrs = self._value(x[1])
                    a = arrs[x[2]]
                else:
                    a = self._ext[v][p]
                if a is None:  # pragma: no cover - invariant
                    raise RuntimeError(f"internal error: input {p} of function {v} "
                                       f"({self._names[v]}) is not available for recomputation")
                xs.append(a)
            temp[v] = self._run_forward(v, f, tuple(xs))
            xs = a = arrs = None  # drop references to the inputs
            self._log["recomputed"].append(v)
            # liveness inside the recomputation: v will not be recomputed again, so the values
            # it read only for that are released, and freed if nothing else needs them
            self._recomputed[v] = True
            for u in self._recompute_only[v]:
                self._count[u] -= 1
                if self._count[u] == 0:  # its value has no use left (its state is separate)
                    if u in temp:
                        temp[u] = None
                    else:
                        self._free(u)
        for v in sorted(R):
            ys = temp[v]
            if self._keep_recomputed(v, need):
                self._restore(v, ys)
            if self._bw_done[v] or not self._bw[v]:
                self._drop_state(v)

    def _keep_recomputed(self, v, need):
        """Whether a recomputed value must be restored: something still uses it, it was asked
        for, or its own backward is pending and needs the state its forward makes."""
        return (self._count[v] > 0 or v in need
                or bool(self._state[v]) and self._bw[v] and not self._bw_done[v])

    def _run_forward(self, v, f, xs):
        saved = [(a, getattr(f, a)) for a in _ci.side_effect_attrs(f)]
        with contextlib.ExitStack() as st:
            for key, val in zip(_ci.CONFIG_KEYS, self._cfg[v]):
                if val is not None:
                    st.enter_context(chainer.using_config(key, val))
            st.enter_context(chainer.using_config("in_recomputing", True))
            st.enter_context(chainer.using_device(chainer.backend.get_device_from_array(*xs)))
            try:
                for a, _ in saved:
                    setattr(f, a, None)
                ys = f.forward(xs)
            finally:
                for a, val in saved:
                    setattr(f, a, val)
        return ys

    def _restore(self, v, ys):
        self._discarded[v] = False
        if self._count[v] == 0:
            # kept only for the state its forward made (its own backward is pending): nothing
            # reads the outputs any more, so putting them back would only hold their memory
            return
        f = self._funcs[v]
        had = self._had[v]
        for k, ref in enumerate(f.outputs):
            node = ref()
            if node is None:
                continue
            if had[k]:
                _ci.set_node_data(node, ys[k])
            var = node.get_variable_or_none()
            if var is not None:
                _ci.set_var_array(var, ys[k])
        if self._ret_out[v]:
            _ci.set_retained_output_data(f, tuple(ys[k] for k in self._ret_out[v]))
        if self._cache_for_recompute(v):
            self._vals[v] = tuple(ys)

    def _cache_for_recompute(self, v):
        # keep our own reference if a dropped consumer may still need this value to recompute
        return self._count[v] > 0


def LivenessHook(graph, *, name=None):
    """Return a hook that only does liveness analysis (no recomputation): the ablation.

    Parameters
    ----------
    graph : TracedGraph
        From :func:`chainer_ext.trace`.
    name : str, optional
        Hook name.

    Returns
    -------
    RecomputeHook
        ``RecomputeHook(None, graph=graph, liveness=True)``: the one-segment strategy [V].

    Raises
    ------
    StrategyMismatchError
        If `graph` was not recorded by :func:`chainer_ext.trace`.
    """
    return RecomputeHook(None, graph=graph, liveness=True, name=name)
