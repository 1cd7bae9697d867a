"""chainer_ext/_chainer_internals.py: the configuration a recomputation runs under."""

import pytest

chainer = pytest.importorskip("chainer")

from chainer_ext import _chainer_internals as _ci  # noqa: E402


def _local():
    return dict(vars(chainer.config._local))


def test_capture_config_pairs_are_the_current_values():
    with chainer.using_config("train", False):
        pairs = dict(_ci.capture_config())
    assert pairs["train"] is False
    assert set(pairs) <= set(_ci.CONFIG_KEYS)
    assert all(v is not None for v in pairs.values())


def test_using_configs_sets_then_restores_like_nested_using_config():
    before = _local()
    pairs = (("train", not chainer.config.train), ("in_recomputing", True),
             ("dtype", chainer.config.dtype))
    with _ci.using_configs(pairs) as c:
        assert chainer.config.train is pairs[0][1]
        assert chainer.config.in_recomputing is True
        assert len(c._entered) == 2  # dtype holds that very value already: not entered
    assert _local() == before


def test_using_configs_restores_a_thread_local_value_and_unwinds_on_error():
    with chainer.using_config("train", False):
        before = _local()
        with pytest.raises(KeyError), \
                _ci.using_configs((("train", True), ("in_recomputing", True))):
            assert chainer.config.train is True
            raise KeyError("in the block")
        assert _local() == before
        assert chainer.config.train is False


def test_config_now_is_what_getattr_returns_for_every_entry():
    with chainer.using_config("train", False), chainer.using_config("extra_entry", 3):
        now = _ci.config_now()
        keys = set(vars(chainer.global_config)) | set(vars(chainer.config._local))
        assert {k: now[k] for k in keys} == {k: getattr(chainer.config, k) for k in keys}
        assert now["train"] is False and now["extra_entry"] == 3


def test_config_entry_is_what_getattr_returns():
    for key in ("enable_backprop", "train", "dtype"):
        assert _ci.config_entry(key) is getattr(chainer.config, key)
    with chainer.no_backprop_mode(), chainer.using_config("train", False):
        assert _ci.config_entry("enable_backprop") is False
        assert _ci.config_entry("train") is False
