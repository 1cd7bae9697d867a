"""Record one forward pass of a Chainer model as the forward graph G = (V, E) of the paper.

One node per function application (in forward order), holding all of that application's output
arrays: outputs of one ``FunctionNode`` are created together, so they cannot be split across
segments of a canonical strategy (the planner's cg reader does the same). Model inputs and
parameters are not nodes; their bytes are reported on the returned :class:`TracedGraph`.
"""

import statistics
import time

import chainer
import numpy as np

import lowerset

from . import _backend
from . import _chainer_internals as _ci
from .exceptions import TraceError

__all__ = ["trace", "TracedGraph", "preset_cost", "COST_MODELS"]

COST_MODELS = ("preset", "profile")


#: The paper's cost rule T_v (10 for a convolution, 1 otherwise), shared with the planner's
#: cg reader so that traced graphs and the authors' graphs are costed alike.
preset_cost = lowerset.paper_cost


class TracedGraph(lowerset.Graph):
    """A :class:`lowerset.Graph` recorded from Chainer, with the bytes kept outside V.

    Node labels are ints: the position of the function application in forward order. Each
    node's ``attrs`` hold ``function`` (class name), ``inputs`` (one entry per argument:
    ``["node", label, output_index]``, ``["param", shape, dtype]`` or ``["input", shape, dtype]``),
    ``outputs`` (``[shape, dtype]`` per output), ``output_bytes``, ``state_bytes`` (arrays the
    function keeps for backward besides its inputs and outputs, e.g. max-pooling indexes),
    ``retained_inputs`` and ``retained_outputs`` (positions kept for backward), ``backward``
    (whether the backward pass reaches it) and ``stochastic``.

    Attributes
    ----------
    param_bytes : int
        Bytes of the distinct parameters used by the forward pass (not in V).
    input_bytes : int
        Bytes of the distinct non-parameter inputs (model inputs, labels; not in V).
    outputs : tuple of int
        Labels of the nodes producing the traced callable's return values.
    cost_model : str
        "preset" or "profile".
    time_unit : float or None
        Seconds per cost unit for ``cost_model="profile"``.
    """

    def __init__(self, nodes, edges, cost, memory, attrs, *, param_bytes, input_bytes,
                 outputs, cost_model, time_unit):
        super().__init__(nodes, edges, cost, memory, attrs=attrs)
        self.param_bytes = int(param_bytes)
        self.input_bytes = int(input_bytes)
        self.outputs = tuple(outputs)
        self.cost_model = cost_model
        self.time_unit = time_unit


def _nbytes(shape, dtype):
    return int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


def array_attr_ids(func, types):
    """Map attribute name -> id(array) for every array-valued attribute of `func`."""
    return {k: id(v) for k, v in vars(func).items() if isinstance(v, types)}


def forward_state(func, before, exclude, types):
    """Names of array attributes `func` set or replaced in forward (its forward-made state).

    Parameters
    ----------
    func : chainer.FunctionNode
    before : dict
        :func:`array_attr_ids` taken before the forward.
    exclude : set of int
        ids of arrays that are inputs or outputs of `func` (not state).
    types : tuple of type
        Array types.

    Returns
    -------
    list of str
    """
    out = []
    for k, v in vars(func).items():
        if isinstance(v, types) and before.get(k) != id(v) and id(v) not in exclude:
            out.append(k)
    return out


def output_arrays(func):
    """Output arrays of a completed function, or None for outputs no longer reachable."""
    arrays = []
    for ref in func.outputs:
        node = ref()
        arr = None
        if node is not None:
            arr = _ci.node_data(node)
            if arr is None:
                var = node.get_variable_or_none()
                if var is not None:
                    arr = _ci.var_array(var)
        arrays.append(arr)
    return arrays


class _Record:
    __slots__ = ("func", "before", "in_ids", "saved", "times", "state", "skip")


class _TraceHook(chainer.FunctionHook):
    """Records every function application at nesting depth 0 (see :func:`trace`)."""

    name = "chainer_ext_trace"

    def __init__(self, profile, repeats):
        self.profile = profile
        self.repeats = repeats
        self.records = []
        self._depth = 0
        self._t0 = 0.0
        self._types = _backend.array_types()

    def forward_preprocess(self, function, in_data):
        self._depth += 1
        if self._depth != 1:
            return
        self._complete_last()
        r = _Record()
        r.func = function
        r.skip = not chainer.config.enable_backprop
        r.before = array_attr_ids(function, self._types)
        r.in_ids = {id(a) for a in in_data}
        # copies of arrays the function holds before forward (BN running statistics), restored
        # after tracing so that tracing leaves persistent values unchanged
        r.saved = [(v, v.copy()) for v in vars(function).values() if isinstance(v, self._types)]
        r.times = []
        r.state = []
        self.records.append(r)
        if self.profile:
            _backend.synchronize(in_data)
            self._t0 = time.perf_counter()

    def forward_postprocess(self, function, in_data):
        self._depth -= 1
        if self._depth != 0:
            return
        r = self.records[-1]
        if self.profile:
            _backend.synchronize(in_data)
            r.times.append(time.perf_counter() - self._t0)
            with chainer.using_device(chainer.backend.get_device_from_array(*in_data)):
                for _ in range(self.repeats - 1):
                    t0 = time.perf_counter()
                    function.forward(in_data)
                    _backend.synchronize(in_data)
                    r.times.append(time.perf_counter() - t0)

    def _complete_last(self):
        if not self.records:
            return
        r = self.records[-1]
        if r.skip or r.func.outputs is None:
            r.skip = True
            return
        outs = {id(a) for a in output_arrays(r.func) if a is not None}
        r.state = [(k, int(getattr(r.func, k).nbytes))
                   for k in forward_state(r.func, r.before, r.in_ids | outs, self._types)]

    def finish(self):
        self._complete_last()


def trace(fn, *, cost_model="preset", repeats=5, time_unit=1e-4, count_state=True):
    """Run `fn` once and record its forward pass as a :class:`TracedGraph`.

    Parameters
    ----------
    fn : callable
        Takes no argument and runs one forward pass, returning the loss Variable (or a tuple or
        list of Variables). Backward is not run.
    cost_model : {"preset", "profile"}
        "preset": T_v = 10 for convolutions, 1 otherwise (the paper's rule). "profile": the
        median forward time of each function over `repeats` runs on the current device, in
        units of `time_unit` seconds (at least 1).
    repeats : int
        Runs per function for "profile" (the first is the real forward).
    time_unit : float
        Seconds per cost unit for "profile".
    count_state : bool
        If True (default), M_v also counts the arrays a function keeps for its backward besides
        its inputs and outputs (``state_bytes``: max-pooling argmax indexes, BatchNormalization
        mean and inverse std, the softmax of softmax_cross_entropy, Dropout's mask). The hook
        drops and recomputes them together with the node's outputs, so counting them lets plans
        and measured memory be compared. If False, M_v is the bytes of the output arrays only.

    Returns
    -------
    TracedGraph
        M_v in bytes (see `count_state`); T_v as chosen.

    Raises
    ------
    ValueError
        If `cost_model`, `repeats` or `time_unit` is invalid.
    TraceError
        If `fn` applies no function with backprop enabled, or does not return Variables
        computed inside it.

    Notes
    -----
    Tracing leaves parameters, persistent values updated in forward (BatchNormalization running
    statistics) and NumPy's global random state as they were. CuPy's random state is not restored.
    Functions applied under ``chainer.no_backprop_mode()`` are not nodes (their outputs are treated
    as inputs), and functions applied inside another function's forward are not recorded.

    References
    ----------
    .. [1] Kusumoto et al., NeurIPS 2019, Sec. 2 (G, T_v, M_v) and Sec. 5 (cost rule).
    """
    if cost_model not in COST_MODELS:
        raise ValueError(f"unknown cost_model {cost_model!r}; expected one of {COST_MODELS}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be a positive int, got {repeats!r}")
    if not (isinstance(time_unit, (int, float)) and time_unit > 0):
        raise ValueError(f"time_unit must be a positive number of seconds, got {time_unit!r}")
    hook = _TraceHook(cost_model == "profile", repeats)
    rng_state = np.random.get_state()
    try:
        with hook:
            result = fn()
            hook.finish()
        return _build(hook.records, result, cost_model, time_unit, count_state)
    finally:
        for r in hook.records:
            for arr, copy in r.saved:
                arr[...] = copy
        np.random.set_state(rng_state)


def _build(records, result, cost_model, time_unit, count_state):
    if isinstance(result, chainer.Variable):
        results = [result]
    elif isinstance(result, (tuple, list)) and all(isinstance(v, chainer.Variable) for v in result):
        results = list(result)
    else:
        raise TraceError(f"the traced callable must return a chainer.Variable or a tuple of "
                         f"them, got {type(result).__name__}")
    records = [r for r in records if not r.skip]
    if not records:
        raise TraceError("the traced callable applied no function with backprop enabled")
    pos = {id(r.func): j for j, r in enumerate(records)}
    nodes, edges, cost, memory, attrs = [], [], {}, {}, {}
    params, inputs = {}, {}
    for j, r in enumerate(records):
        f = r.func
        args = []
        for node in f.inputs:
            creator = node.creator_node
            if creator is not None and id(creator) in pos:
                i = pos[id(creator)]
                k = next(k for k, ref in enumerate(creator.outputs) if ref() is node)
                args.append(["node", i, k])
                edges.append((i, j))
            else:
                var = node.get_variable_or_none()
                kind = "param" if isinstance(var, chainer.Parameter) else "input"
                (params if kind == "param" else inputs)[id(node)] = _nbytes(node.shape, node.dtype)
                args.append([kind, list(node.shape), str(node.dtype)])
        outs = []
        for ref in f.outputs:
            n = ref()
            outs.append([list(n.shape), str(n.dtype)] if n is not None else None)
        if any(o is None for o in outs):  # pragma: no cover - outputs die only after the trace
            raise TraceError(f"function {j} ({type(f).__name__}) lost an output node")
        out_bytes = sum(_nbytes(s, d) for s, d in outs)
        state_bytes = sum(b for _, b in r.state)
        name = type(f).__name__
        nodes.append(j)
        memory[j] = out_bytes + (state_bytes if count_state else 0)
        if cost_model == "preset":
            cost[j] = preset_cost(name)
        else:
            cost[j] = max(1, int(round(statistics.median(r.times) / time_unit)))
        attrs[j] = {
            "function": name,
            "inputs": args,
            "outputs": outs,
            "output_bytes": out_bytes,
            "state_bytes": state_bytes,
            "retained_inputs": list(_ci.retained_input_indexes(f)),
            "retained_outputs": list(_ci.retained_output_indexes(f)),
            "requires_grad": any(x.requires_grad for x in f.inputs),
            "stochastic": name in _ci.STOCHASTIC_FUNCTIONS,
        }
    out_labels = []
    for v in results:
        c = v.creator_node
        if c is None or id(c) not in pos:
            raise TraceError("the traced callable returned a Variable that no function inside "
                             "it computed")
        out_labels.append(pos[id(c)])
    # the backward pass reaches the ancestors of the outputs that have an input requiring grad
    reach = set()
    stack = list(out_labels)
    while stack:
        j = stack.pop()
        if j in reach:
            continue
        reach.add(j)
        stack.extend(a[1] for a in attrs[j]["inputs"] if a[0] == "node")
    for j in nodes:
        attrs[j]["backward"] = j in reach and attrs[j]["requires_grad"]
    return TracedGraph(nodes, edges, cost, memory, attrs, param_bytes=sum(params.values()),
                       input_bytes=sum(inputs.values()), outputs=out_labels,
                       cost_model=cost_model, time_unit=time_unit if cost_model == "profile"
                       else None)
