"""torch_ext._compat: every private PyTorch API in its table resolves on the installed PyTorch,
and a PyTorch without one of them fails at import, naming it."""

import importlib.util
import sys

import pytest

torch = pytest.importorskip("torch")

from torch_ext import MissingTorchAPIError, TorchExtError  # noqa: E402

_compat = sys.modules["torch_ext._compat"]


def _import_afresh():
    """Run _compat's code again as a throwaway module (torch_ext's own stays as it is)."""
    spec = importlib.util.spec_from_file_location("torch_ext._compat_afresh", _compat.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", sorted(_compat.APIS))
def test_each_api_resolves(name):
    path, use = _compat.APIS[name]
    assert path.startswith("torch.") and use
    assert _compat._look_up(path) is not _compat._MISSING
    assert name in _compat.__all__ and hasattr(_compat, name)


def test_the_installed_torch_is_one_the_table_was_checked_on():
    assert torch.__version__.split("+")[0] in _compat.CHECKED_ON


def test_a_fresh_import_exposes_what_torch_has():
    fresh = _import_afresh()
    assert fresh.TorchDispatchMode is torch.utils._python_dispatch.TorchDispatchMode
    assert fresh.current_autograd_node is torch._C._current_autograd_node
    assert fresh.op_schema(torch.ops.aten.add.Tensor) is torch.ops.aten.add.Tensor._schema
    assert fresh.op_packet(torch.ops.aten.add.Tensor) is torch.ops.aten.add
    assert fresh.is_view(torch.ones(4)[:2]) and not fresh.is_view(torch.ones(4))
    assert not fresh.profiler_enabled()
    with torch.profiler.profile():
        assert fresh.profiler_enabled()


def test_the_apis_looked_up_on_first_use_and_set_by_compile():
    """torch._dynamo's module class, and the marks torch.compile leaves on what it returns
    (making them compiles nothing)."""
    assert set(_compat.ON_FIRST_USE) == {"optimized_module_class"}
    opt_cls = _compat.optimized_module_class()
    assert issubclass(opt_cls, torch.nn.Module)
    module = torch.nn.Linear(2, 2)
    assert isinstance(torch.compile(module), opt_cls)
    assert _compat.compiled_call(module) is None
    module.compile()
    assert _compat.compiled_call(module) is not None
    assert set(_compat.SET_BY_COMPILE) == {"is_compiled_function"}
    assert _compat.is_compiled_function(torch.compile(lambda x: x))
    assert not _compat.is_compiled_function(lambda x: x)


def _drop_flop_registry(monkeypatch):
    monkeypatch.delattr(torch.utils.flop_counter, "flop_registry")
    return "torch.utils.flop_counter.flop_registry"


def _drop_current_autograd_node(monkeypatch):
    monkeypatch.delattr(torch._C, "_current_autograd_node")
    return "torch._C._current_autograd_node"


def _drop_pytree(monkeypatch):
    """The whole module gone: not an attribute of torch.utils, and not importable."""
    monkeypatch.delattr(torch.utils, "_pytree")
    monkeypatch.setitem(sys.modules, "torch.utils._pytree", None)
    return "torch.utils._pytree.tree_flatten, torch.utils._pytree.tree_unflatten"


@pytest.mark.parametrize("drop", [_drop_flop_registry, _drop_current_autograd_node,
                                  _drop_pytree])
def test_a_torch_without_an_api_fails_at_import_naming_it(monkeypatch, drop):
    missing = drop(monkeypatch)
    with pytest.raises(MissingTorchAPIError) as info:
        _import_afresh()
    e = info.value
    assert isinstance(e, ImportError) and isinstance(e, TorchExtError)
    assert f"private {missing}, which torch {torch.__version__} does not have" in str(e)
    assert "checked on torch 2.13.0" in str(e)
    assert ", ".join(e.missing) == missing


def test_a_row_looked_up_on_first_use_that_torch_lacks_fails_there():
    fresh = _import_afresh()
    fresh.ON_FIRST_USE = {"optimized_module_class": ("torch._dynamo.eval_frame.NoSuchClass",
                                                     "a row PyTorch does not have")}
    with pytest.raises(MissingTorchAPIError, match=r"torch\._dynamo\.eval_frame\.NoSuchClass"):
        fresh.optimized_module_class()
