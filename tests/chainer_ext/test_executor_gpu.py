"""GPU checks (marker ``gpu``): equality with a plain run within cuDNN's determinism."""

import pytest

# chainer_ext first: it applies chainer_ext/_compat.py (NumPy 2 / Python 3.12 fixes, which the
# GPU machines need) before Chainer is imported; a bare `import chainer` fails there.
pytest.importorskip("chainer_ext")
chainer = pytest.importorskip("chainer")

import lowerset  # noqa: E402
from chainer_ext import RecomputeHook, peak_memory, trace  # noqa: E402
from chainer_ext_nets import clone, make  # noqa: E402


def _gpu_available():
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def check_equal_to_plain(name, device):
    """Run a plain step and hooked steps on `device`; compare loss, gradients, BN statistics."""
    import numpy as np

    model, x, t, lossfn = make(name)
    model.to_device(device)
    xp = model.xp
    x, t = xp.asarray(x), xp.asarray(t)

    def run(m, hook):
        m.cleargrads()
        np.random.seed(0)
        xp.random.seed(0)  # the same dropout masks in every run
        with chainer.using_config("train", True), \
                chainer.using_config("cudnn_deterministic", True):
            if hook is None:
                loss = lossfn(m, x, t)
                loss.backward()
            else:
                with hook:
                    loss = lossfn(m, x, t)
                    loss.backward()
        return (chainer.backend.CpuDevice().send(loss.array),
                {k: chainer.backend.CpuDevice().send(p.grad) for k, p in m.namedparams()})

    with chainer.using_config("train", True), chainer.using_config("cudnn_deterministic", True):
        g = trace(lambda: lossfn(model, x, t))
    ref = run(clone(model), None)
    for mode in ("time", "memory"):
        got = run(clone(model), RecomputeHook(lowerset.solve(g, model="paper", mode=mode)))
        np.testing.assert_array_equal(ref[0], got[0])
        for k in ref[1]:
            np.testing.assert_array_equal(ref[1][k], got[1][k])
    m = clone(model)
    hooked = peak_memory(lambda: run(m, RecomputeHook(lowerset.solve(g, model="paper"))), params=m)
    plain = peak_memory(lambda: run(m, None), params=m)
    assert hooked.device == "gpu" and hooked.peak < plain.peak


@pytest.mark.gpu
@pytest.mark.skipif(not _gpu_available(), reason="needs CuPy and a CUDA GPU")
@pytest.mark.parametrize("name", ["resnet", "unet", "dropout"])
def test_equal_to_plain_gpu(name):
    check_equal_to_plain(name, "@cupy:0")
