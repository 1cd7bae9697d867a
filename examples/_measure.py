"""Measuring helpers for ``reproduce_table1.py``: the boundary peak of a training step.

The *total* peak of a step (``chainer_ext.peak_memory``) includes the temporaries that a function
allocates and frees inside its own ``forward`` or ``backward``: on CPU, Chainer's convolutions
build an im2col buffer of kh*kw times their input. The paper's cuDNN runs did not pay for it and
no recomputation strategy can remove it. The *boundary peak* leaves those temporaries out: it is
the highest memory in use at function boundaries, sampled in every pre- and post-process callback
of forward and backward (of the outermost function applications: those nested inside another
function's forward or backward are part of that function).

What is counted
---------------
On CPU the sampler reads ``tracemalloc.get_traced_memory()[0]``: the bytes of every traced block
allocated since tracing started and still alive. That is NumPy's buffers (domain
``np.lib.tracemalloc_domain``) *and* the Python objects created during the step (Variables,
FunctionNodes: a few kilobytes per function), exactly as in ``chainer_ext.peak_memory``, so
the two figures are comparable. Filtering NumPy's domain alone would need a snapshot per
boundary, which is far too slow for thousands of samples. On GPU it reads CuPy's default pool
``used_bytes()``.

Hook order
----------
Chainer calls the global function hooks in registration order. Another hook (``RecomputeHook``)
frees and recomputes values inside the same callbacks, so one sampler would see either the state
before that hook's work or after it, depending on the order. :func:`boundary_sampling` registers
two samplers that share one :class:`BoundaryRecorder`: one before and one after the hooks it
wraps. Every callback is then sampled on both sides of the other hooks' work.

Examples
--------
>>> rec = BoundaryRecorder("cpu", model.params())                 # doctest: +SKIP
>>> def step():                                                    # doctest: +SKIP
...     with boundary_sampling(rec, [RecomputeHook(strategy)]):
...         model(x, t).backward()
>>> report = chainer_ext.peak_memory(step, params=model)           # doctest: +SKIP
>>> rec.peak <= report.peak                                        # doctest: +SKIP
True
"""

import contextlib
import tracemalloc

import chainer

__all__ = ["BoundaryRecorder", "BoundarySampler", "boundary_sampling"]


def _memory_reader(device):
    """Return a function giving the bytes in use now on `device` ("cpu" or "gpu")."""
    if device == "cpu":
        return lambda: tracemalloc.get_traced_memory()[0]
    if device == "gpu":  # pragma: no cover - GPU
        import cupy

        pool = cupy.get_default_memory_pool()
        return pool.used_bytes
    raise ValueError(f"device must be 'cpu' or 'gpu', got {device!r}")


class BoundaryRecorder:
    """Highest memory in use at the sampled moments, above a baseline.

    Parameters
    ----------
    device : {"cpu", "gpu"}
        "cpu" needs :mod:`tracemalloc` to be tracing while samples are taken.
    params : iterable of chainer.Parameter, optional
        Parameters whose gradients are subtracted for :attr:`peak_nonparam`.

    Attributes
    ----------
    peak : int
        Highest ``in use - baseline`` seen (bytes; 0 before any sample).
    peak_nonparam : int
        Highest ``in use - baseline - bytes of the parameter gradients computed so far``: the
        boundary peak of everything but parameters and their gradients (the parameters
        themselves predate the baseline).
    samples : int
        Number of samples taken.

    Notes
    -----
    Chainer 7 keeps the gradients of leaf variables (parameters) in an internal table during
    ``backward`` and sets ``param.grad`` only when the whole backward pass is over, so
    ``param.grad`` cannot tell which gradients exist at a boundary. The recorder counts a
    parameter's gradient as existing from the ``backward_postprocess`` of the first function
    that takes the parameter as input (:meth:`backward_done`).
    """

    def __init__(self, device="cpu", params=()):
        self._read = _memory_reader(device)
        self.device = device
        self._param_bytes = {id(p.array): int(p.array.nbytes) for p in params
                             if p.array is not None}
        self.base = None
        self.start()

    def start(self):
        """Take the baseline (the memory in use now) and forget earlier samples."""
        self.base = self._read()
        self.peak = self.peak_nonparam = self.samples = 0
        self.grad_bytes = 0
        self._grads = set()

    def backward_done(self, in_data):
        """Count the gradients of the parameters among `in_data` (a function's inputs whose
        backward has just run) as existing from now on."""
        for a in in_data:
            k = id(a)
            if k in self._param_bytes and k not in self._grads:
                self._grads.add(k)
                self.grad_bytes += self._param_bytes[k]

    def sample(self):
        """Record the memory in use now."""
        used = self._read() - self.base
        self.samples += 1
        if used > self.peak:
            self.peak = used
        if used - self.grad_bytes > self.peak_nonparam:
            self.peak_nonparam = used - self.grad_bytes


class BoundarySampler(chainer.FunctionHook):
    """Function hook that samples a :class:`BoundaryRecorder` at function boundaries.

    It samples in ``forward_preprocess``, ``forward_postprocess``, ``backward_preprocess`` and
    ``backward_postprocess`` and changes nothing. Function applications nested inside another
    function are not boundaries and are not sampled: in Chainer 7 the backward of a convolution,
    a linear layer, ... applies further functions (``Convolution2DGradW``, ``Deconvolution2D``)
    whose forward callbacks fire while the outer backward holds its own temporaries (the
    gradients it has computed so far, its im2col buffer). Register it globally
    (``with sampler:``).

    Parameters
    ----------
    recorder : BoundaryRecorder
    name : str
        Hook name, unique among the registered hooks.
    """

    def __init__(self, recorder, name="BoundarySampler"):
        self.recorder = recorder
        self.name = name
        self._fdepth = self._bdepth = 0

    def __enter__(self):
        self._fdepth = self._bdepth = 0
        return super().__enter__()

    def forward_preprocess(self, function, in_data):
        if not (self._fdepth or self._bdepth):
            self.recorder.sample()
        self._fdepth += 1

    def forward_postprocess(self, function, in_data):
        self._fdepth -= 1
        if not (self._fdepth or self._bdepth):
            self.recorder.sample()

    def backward_preprocess(self, function, in_data, out_grad):
        if not self._bdepth:
            self.recorder.sample()
        self._bdepth += 1

    def backward_postprocess(self, function, in_data, out_grad):
        self._bdepth -= 1
        if not self._bdepth:
            self.recorder.backward_done(in_data)
            self.recorder.sample()


@contextlib.contextmanager
def boundary_sampling(recorder, hooks=()):
    """Register `hooks` between two samplers of `recorder`, so each callback is sampled on both
    sides of the hooks' work; take the baseline on entry.

    Parameters
    ----------
    recorder : BoundaryRecorder
    hooks : sequence of chainer.FunctionHook
        Entered in order after the first sampler and before the second (for instance one
        ``RecomputeHook``); exited in reverse order.
    """
    with contextlib.ExitStack() as stack:
        recorder.start()
        stack.enter_context(BoundarySampler(recorder, "BoundarySamplerBefore"))
        for h in hooks:
            stack.enter_context(h)
        stack.enter_context(BoundarySampler(recorder, "BoundarySamplerAfter"))
        yield recorder
