"""Boundary sampling for :func:`chainer_ext.peak_memory`: memory in use at function boundaries.

The *total* peak of a step includes the temporaries that a function allocates and frees inside
its own ``forward`` or ``backward``: on CPU, Chainer's convolutions build an im2col buffer of
kh*kw times their input. The paper's cuDNN runs did not pay for it and no recomputation strategy
can remove it. The *boundary peak* leaves those temporaries out: it is the highest memory in use
at function boundaries, sampled in every pre- and post-process callback of forward and backward
of the outermost function applications (those nested inside another function's forward or
backward are part of that function).

What is counted
---------------
On CPU a sample reads ``tracemalloc.get_traced_memory()[0]``: the bytes of every traced block
allocated since tracing started and still alive. That is NumPy's buffers (domain
``np.lib.tracemalloc_domain``) *and* the Python objects created during the step (Variables,
FunctionNodes: a few kilobytes per function), as in :class:`chainer_ext.PeakMemoryHook`, so the
two figures are comparable. On GPU it reads the bytes that the :class:`PeakMemoryHook`'s CuPy
memory hook counts (blocks of the default pool handed out since measuring started): the
recorder is given that meter's reader.

Hook order
----------
Chainer calls the global function hooks in registration order. Another hook
(``RecomputeHook``) frees and recomputes values inside the same callbacks, so one sampler would
see either the state before that hook's work or after it, depending on the order.
:func:`sampling` registers two samplers that share one :class:`BoundaryRecorder`: one before
and one after the hooks it wraps, so every callback is sampled on both sides of their work. The
last sampler notes the hooks registered after it (:attr:`BoundarySampler.later_hooks`).
"""

import contextlib
import tracemalloc

import chainer

__all__ = ["BoundaryRecorder", "BoundarySampler", "sampling"]


def _memory_reader(device, read):
    """Return a function giving the bytes in use now on `device` ("cpu" or "gpu"): `read` if
    given, else tracemalloc's current bytes on "cpu".

    Raises
    ------
    ValueError
        If `device` is not "cpu" or "gpu", or is "gpu" and `read` is None.
    """
    if device not in ("cpu", "gpu"):
        raise ValueError(f"device must be 'cpu' or 'gpu', got {device!r}")
    if read is not None:
        return read
    if device == "gpu":
        raise ValueError("a BoundaryRecorder on 'gpu' needs `read` (PeakMemoryHook.current)")
    return lambda: tracemalloc.get_traced_memory()[0]


class BoundaryRecorder:
    """Highest memory in use at the sampled moments, above a baseline.

    Parameters
    ----------
    device : {"cpu", "gpu"}
        "cpu" needs :mod:`tracemalloc` to be tracing while samples are taken.
    params : iterable of chainer.Parameter, optional
        Parameters whose gradients are subtracted for :attr:`peak_without_grads`.
    read : callable, optional
        Returns the bytes in use now; default on "cpu": tracemalloc's current bytes. Required
        on "gpu" (:meth:`chainer_ext.PeakMemoryHook.current`).

    Attributes
    ----------
    peak : int
        Highest ``in use - baseline`` seen (bytes; 0 before any sample).
    peak_without_grads : int
        Highest ``in use - baseline - bytes of the parameter gradients computed so far``
        (bytes): the boundary peak of everything but parameters and their gradients (the
        parameters themselves predate the baseline).
    samples : int
        Number of samples taken.

    Notes
    -----
    Chainer 7 keeps the gradients of leaf variables (parameters) in an internal table during
    ``backward`` and sets ``param.grad`` only when the whole backward pass is over, so
    ``param.grad`` cannot tell which gradients exist at a boundary. The recorder counts a
    parameter's gradient as existing from the ``backward_postprocess`` of the first function
    that takes the parameter as input (:meth:`backward_done`). It finds the parameter among the
    function's input nodes (``function.inputs``), not among the arrays the hooks receive: those
    are ``None`` for the inputs a function does not retain (a bias, a BatchNormalization beta).
    """

    def __init__(self, device="cpu", params=(), read=None):
        self._read = _memory_reader(device, read)
        self.device = device
        params = [p for p in params if p.array is not None]
        self._nodes = [p.node for p in params]  # held: their ids key _param_bytes
        self._param_bytes = {id(p.node): int(p.array.nbytes) for p in params}
        self._counted = dict.fromkeys(self._param_bytes, False)
        self.start()

    def start(self):
        """Take the baseline (the bytes in use now) and forget earlier samples.

        It allocates nothing that outlives the call (it only resets values), so calling it
        once tracing has started adds no bytes to a peak.
        """
        for k in self._counted:
            self._counted[k] = False
        self.peak = self.peak_without_grads = self.samples = 0
        self.grad_bytes = 0
        self.base = self._read()

    def backward_done(self, function):
        """Count the gradients of the parameters among the inputs of `function` (a FunctionNode
        whose backward has just run) as existing from now on."""
        for node in function.inputs:
            k = id(node)
            if self._counted.get(k) is False:
                self._counted[k] = True
                self.grad_bytes += self._param_bytes[k]

    def sample(self):
        """Record the bytes in use now."""
        used = self._read() - self.base
        self.samples += 1
        self.peak = max(self.peak, used)
        self.peak_without_grads = max(self.peak_without_grads, used - self.grad_bytes)


class BoundarySampler(chainer.FunctionHook):
    """Function hook that samples a :class:`BoundaryRecorder` at function boundaries.

    It samples in ``forward_preprocess``, ``forward_postprocess``, ``backward_preprocess`` and
    ``backward_postprocess`` and changes nothing. Function applications nested inside another
    function are not boundaries and are not sampled: in Chainer 7 the backward of a
    convolution, a linear layer, ... applies further functions (``Convolution2DGradW``,
    ``LinearGradWeight``) whose forward callbacks fire while the outer backward holds its own
    temporaries (the gradients it has computed so far, its im2col buffer). Register it globally
    (``with sampler:``).

    Parameters
    ----------
    recorder : BoundaryRecorder
    name : str
        Hook name, unique among the registered hooks.
    last : bool
        Whether the sampler is meant to run after every other global hook; it then collects in
        :attr:`later_hooks` the names of the hooks registered after it, seen at its samples
        (while more hooks are registered than when it was entered).
    """

    def __init__(self, recorder, name="BoundarySampler", last=False):
        self.recorder = recorder
        self.name = name
        self.last = last
        self.later_hooks = []
        self._fdepth = self._bdepth = 0

    def __enter__(self):
        self._fdepth = self._bdepth = 0
        self.later_hooks = []
        out = super().__enter__()
        self._n_hooks = len(chainer.get_function_hooks())
        return out

    def _sample(self):
        # len() allocates nothing; a traced allocation per sample would add to the peak
        if self.last and len(chainer.get_function_hooks()) > self._n_hooks:
            self._note_later_hooks()
        self.recorder.sample()

    def _note_later_hooks(self):
        names = list(chainer.get_function_hooks())
        if self.name in names:
            for n in names[names.index(self.name) + 1:]:
                if n not in self.later_hooks:
                    self.later_hooks.append(n)

    def forward_preprocess(self, function, in_data):
        if not (self._fdepth or self._bdepth):
            self._sample()
        self._fdepth += 1

    def forward_postprocess(self, function, in_data):
        self._fdepth -= 1
        if not (self._fdepth or self._bdepth):
            self._sample()

    def backward_preprocess(self, function, in_data, out_grad):
        if not self._bdepth:
            self._sample()
        self._bdepth += 1

    def backward_postprocess(self, function, in_data, out_grad):
        self._bdepth -= 1
        if not self._bdepth:
            self.recorder.backward_done(function)
            self._sample()


@contextlib.contextmanager
def sampling(recorder, hooks=()):
    """Register `hooks` between two samplers of `recorder`, so each callback is sampled on both
    sides of the hooks' work. The caller takes the baseline (``recorder.start()``) once the
    memory is traced: :func:`chainer_ext.peak_memory` starts tracing after this registration,
    so the bytes of the samplers and of the hooks' ``__enter__`` are not the step's.

    Parameters
    ----------
    recorder : BoundaryRecorder
    hooks : sequence of chainer.FunctionHook
        Entered in order after the first sampler and before the second (for instance one
        ``RecomputeHook``); exited in reverse order.

    Yields
    ------
    BoundarySampler
        The second sampler (its :attr:`~BoundarySampler.later_hooks` names the hooks
        registered after it while the block ran).

    Raises
    ------
    KeyError
        If a hook of the same name is already registered (Chainer's rule).
    """
    with contextlib.ExitStack() as stack:
        stack.enter_context(BoundarySampler(recorder, "BoundarySamplerBefore"))
        for h in hooks:
            stack.enter_context(h)
        after = stack.enter_context(BoundarySampler(recorder, "BoundarySamplerAfter", last=True))
        yield after
