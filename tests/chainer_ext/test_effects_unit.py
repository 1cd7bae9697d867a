"""chainer_ext._effects without a GPU: the counting proxy for CuPy's generator (on a stand-in
CuPy), swapped(), and NumPy's random-state fingerprint."""

import contextlib
import types

import pytest

chainer = pytest.importorskip("chainer")

import numpy as np  # noqa: E402

from chainer_ext import _effects  # noqa: E402


class FakeState:
    def __init__(self, seed=None):
        self.draws, self.seed = 0, seed

    def normal(self, size):
        self.draws += 1
        return np.full(size, 7.0)


def _fake_cupy(n_devices=1):
    """A stand-in CuPy with `n_devices` GPUs: (module, {device: generator}, array class)."""
    current = {d: FakeState() for d in range(n_devices)}
    device = [0]

    class Array:
        device = types.SimpleNamespace(id=0)

    @contextlib.contextmanager
    def use(i):
        old, device[0] = device[0], i
        try:
            yield
        finally:
            device[0] = old

    random = types.SimpleNamespace(RandomState=FakeState,
                                   get_random_state=lambda: current[device[0]],
                                   set_random_state=lambda s: current.__setitem__(device[0], s))
    cuda = types.SimpleNamespace(Device=use, runtime=types.SimpleNamespace(
        getDeviceCount=lambda: n_devices))
    return types.SimpleNamespace(ndarray=Array, random=random, cuda=cuda), current, Array


def test_cupy_watch_counts_calls_and_puts_the_generator_back():
    cp, current, Array = _fake_cupy()
    inner = current[0]
    watch = _effects.CupyRandomWatch(cupy=cp)
    watch.watch([np.zeros(2), Array(), Array()])
    proxy = current[0]
    assert proxy is not inner and isinstance(proxy, FakeState)
    assert proxy.normal(3).tolist() == [7.0] * 3  # draws are the inner generator's
    proxy.normal(1)
    assert watch.calls == 2 and inner.draws == 2
    watch.close()
    assert current[0] is inner


def test_swapped_sets_pre_values_and_puts_the_current_ones_back():
    class Link(chainer.Link):
        pass

    class Func:
        pass
    f = Func()
    f.link = Link()
    f.link.calls = 3
    f.stat = np.array([5.0])
    types_ = (np.ndarray,)
    pre = [("value", 1, None), _effects.capture(f, ("function", "stat"), types_)]
    f.stat[...] = 9.0
    paths = [("function", "link", "calls"), ("function", "stat")]
    with _effects.swapped(f, paths, pre, types_):
        assert f.link.calls == 1 and f.stat.tolist() == [5.0]
        f.link.calls += 1
        f.stat += 1
    assert f.link.calls == 3 and f.stat.tolist() == [9.0]


def test_numpy_fingerprint_changes_when_numpy_draws():
    a = _effects.numpy_rng_fingerprint()
    assert _effects.same_data(a, _effects.numpy_rng_fingerprint())
    np.random.random_sample(3)
    assert not _effects.same_data(a, _effects.numpy_rng_fingerprint())


def test_seeded_cupy_random_sets_the_callers_generators_aside_on_every_device():
    cp, current, _ = _fake_cupy(n_devices=2)
    mine = dict(current)
    with _effects.seeded_cupy_random(3, cupy=cp):
        inside = dict(current)
        assert all(inside[d] is not mine[d] and inside[d].seed == 3 for d in (0, 1))
        inside[1].normal(2)
    assert current == mine and mine[1].draws == 0  # put back, not advanced
    with pytest.raises(KeyError):  # put back after an error too
        with _effects.seeded_cupy_random(3, cupy=cp):
            raise KeyError
    assert current == mine


def test_seeded_cupy_random_without_a_device_changes_nothing():
    cp, current, _ = _fake_cupy(n_devices=0)
    with _effects.seeded_cupy_random(3, cupy=cp):
        assert current == {}
    with _effects.seeded_cupy_random(3):  # this machine's CuPy, if any
        pass
