"""Profile the executor's own cost in a training step under RecomputeHook.

Runs ``--steps`` hooked steps (after two warm-up steps) and prints, per step (medians):

- step: wall seconds of the step;
- callbacks: thread CPU seconds inside the hook's four callbacks (Chainer calls them around
  every function application and backward call);
- recompute forwards: thread CPU seconds of the ``forward`` calls the recomputations make
  (found by timing each function class's ``forward`` while ``chainer.config.in_recomputing``);
- own: callbacks minus recompute forwards: the hook's bookkeeping, checks, configuration
  contexts, and the frees it performs (a freed array's deallocation runs in the callback);
- gc: collections of generations 0, 1, 2 during the step.

With ``--pyinstrument`` (``pip install pyinstrument``, in the ``examples`` extra) it also prints
pyinstrument's call tree of the same steps, so that the hook's frames can be read against
Chainer's and NumPy's.

Example::

    .venv/bin/python examples/profile_executor.py --net resnet50 --mode time --pyinstrument
"""

import argparse
import contextlib
import gc
import pathlib
import statistics
import sys
import time
import warnings

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import chainer

import lowerset  # noqa: E402
from chainer_ext import LivenessHook, RecomputeHook  # noqa: E402
from examples.bench_executor import CPU_PRESET, make_step  # noqa: E402
from examples.models import NETWORKS  # noqa: E402

CALLBACKS = ("forward_preprocess", "forward_postprocess", "backward_preprocess",
             "backward_postprocess")


class Meter:
    """Thread CPU seconds spent in the hook's callbacks and in recomputations' forwards."""

    def __init__(self):
        self.callbacks = self.forwards = 0.0
        self._inside = False

    def wrap_callbacks(self, hook):
        """Time `hook`'s callbacks (instance attributes shadowing the class's methods)."""
        for name in CALLBACKS:
            setattr(hook, name, self._timed(getattr(hook, name), "callbacks"))

    def _timed(self, fn, field):
        def timed(*args):
            t0 = time.thread_time()
            try:
                return fn(*args)
            finally:
                setattr(self, field, getattr(self, field) + time.thread_time() - t0)
        return timed

    @contextlib.contextmanager
    def recompute_forwards(self, classes):
        """Time ``cls.forward`` of each class while ``chainer.config.in_recomputing``."""
        saved = {cls: cls.__dict__.get("forward") for cls in classes}
        for cls in classes:
            cls.forward = self._when_recomputing(cls.forward)
        try:
            yield
        finally:
            for cls, fwd in saved.items():
                if fwd is None:
                    del cls.forward
                else:
                    cls.forward = fwd

    def _when_recomputing(self, forward):
        timed = self._timed(forward, "forwards")

        def fwd(node, inputs):
            if self._inside or not chainer.config.in_recomputing:
                return forward(node, inputs)   # a forward inside a timed one is counted there
            self._inside = True
            try:
                return timed(node, inputs)
            finally:
                self._inside = False
        return fwd


def function_classes(loss):
    """The FunctionNode classes of the graph that produced `loss`."""
    seen, todo, classes = set(), [loss.creator_node], set()
    while todo:
        f = todo.pop()
        if f is None or id(f) in seen:
            continue
        seen.add(id(f))
        classes.add(type(f))
        todo.extend(x.creator_node for x in f.inputs)
    return classes


def make_hook(g, mode, method):
    if mode == "liveness":
        return LivenessHook(g)
    return RecomputeHook(lowerset.solve(g, mode=mode, method=method, model="paper"))


def measure(step, meter, steps):
    """Per-step rows: wall s, callback s, recompute forward s, gc collections per generation."""
    rows, gcs = [], []
    counts = [0, 0, 0]

    def on_gc(phase, info):
        if phase == "start":
            counts[info["generation"]] += 1
    gc.collect()
    gc.callbacks.append(on_gc)
    try:
        for _ in range(steps):
            counts[:] = [0, 0, 0]
            meter.callbacks = meter.forwards = 0.0
            t0 = time.perf_counter()
            step()
            rows.append((time.perf_counter() - t0, meter.callbacks, meter.forwards))
            gcs.append(tuple(counts))
    finally:
        gc.callbacks.remove(on_gc)
    return rows, gcs


def report(rows, gcs):
    med = [statistics.median(c) for c in zip(*rows)]
    own = statistics.median(cb - fw for _, cb, fw in rows)
    print(f"step {med[0]:.3f} s | callbacks {1e3 * med[1]:.1f} ms | recompute forwards "
          f"{1e3 * med[2]:.1f} ms | own {1e3 * own:.1f} ms ({100 * own / med[0]:.1f}% of the "
          f"step) | gc per step {[sum(g) / len(gcs) for g in zip(*gcs)]}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--net", default="resnet50", choices=sorted(NETWORKS))
    p.add_argument("--mode", default="time", choices=["liveness", "time", "memory"])
    p.add_argument("--method", default="approx", choices=["exact", "approx"])
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--pyinstrument", action="store_true", help="also print pyinstrument's tree")
    a = p.parse_args(argv)
    net, pre = NETWORKS[a.net], CPU_PRESET[a.net]
    model, x, t, g = net.traced(pre["batch"], pre["size"])
    with chainer.using_config("train", True):
        classes = function_classes(net.loss(model, x, t))
    hook, meter = make_hook(g, a.mode, a.method), Meter()
    meter.wrap_callbacks(hook)
    step = make_step(net, model, x, t, hook)
    step(), step()
    with meter.recompute_forwards(classes):
        print(f"{a.net} (batch {pre['batch']}, {pre['size'][0]}x{pre['size'][1]}), {a.mode}:")
        report(*measure(step, meter, a.steps))
    if a.pyinstrument:
        import pyinstrument
        prof = pyinstrument.Profiler(interval=0.0005)
        with prof:
            for _ in range(a.steps):
                step()
        print(prof.output_text(unicode=False, color=False))


if __name__ == "__main__":
    main()
