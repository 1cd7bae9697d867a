"""torch_ext._ops: the executor's walk over a call's arguments and outputs gives the tensors
pytree's flattening gives, the same objects in the same order, on every call of real steps."""

import collections

import pytest

torch = pytest.importorskip("torch")

from torch_ext import _ops  # noqa: E402
from torch_ext._compat import TorchDispatchMode, tree_flatten  # noqa: E402
from torch_nets import NETS, make  # noqa: E402


def _pytree_tensors(args, kwargs):
    leaves, _ = _ops.flatten_call(args, kwargs)
    return [leaves[p] for p in _ops.tensor_positions(leaves)]


def _same(a, b):
    return len(a) == len(b) and all(x is y for x, y in zip(a, b))


class _Compare(TorchDispatchMode):
    """Checks both walks on every call (arguments before it runs, outputs after)."""

    def __init__(self):
        super().__init__()
        self.calls, self.bad = 0, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not _same(_ops.call_tensors(args, kwargs), _pytree_tensors(args, kwargs)):
            self.bad.append(f"arguments of {func}")
        out = func(*args, **kwargs)
        want = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        if not _same(_ops.output_tensors(out), want):
            self.bad.append(f"outputs of {func}")
        self.calls += 1
        return out


@pytest.mark.parametrize("name", NETS)
def test_the_walks_agree_with_pytree_on_every_call_of_a_step(name):
    model, fn, _ = make(name)
    mode = _Compare()
    with mode:
        fn().backward()
    assert mode.calls > 10 and mode.bad == []


def test_the_walks_agree_with_pytree_on_hugging_face_steps():
    pytest.importorskip("transformers")
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    import hf_models
    for name in ("t5", "llama"):
        model, step = hf_models.build(name, "sdpa", size="test")
        mode = _Compare()
        with mode:
            step().backward()
        assert mode.calls > 100 and mode.bad == [], (name, mode.bad[:3])


def test_containers_pytree_flattens_its_own_way_fall_back_to_it():
    """A namedtuple, an OrderedDict, nesting, None and scalars among the arguments: the
    tensors come out in pytree's order."""
    a, b, c, d = (torch.zeros(i + 1) for i in range(4))
    pair = collections.namedtuple("pair", "x y")
    args = (a, [None, (b, 2.0)], pair(c, 1), collections.OrderedDict(k=d))
    kwargs = {"z": [d, a], "w": None}
    assert _same(_ops.call_tensors(args, kwargs), _pytree_tensors(args, kwargs))
    assert _same(_ops.call_tensors((a, [b, [c]]), {"k": d}), [a, b, c, d])
    assert _same(_ops.output_tensors((a, None, [b, c])), [a, b, c])
    assert _same(_ops.output_tensors(torch.return_types.max((a, b))), [a, b])
    assert _ops.op_name(torch.ops.aten.mm.default) == "aten.mm.default"
    assert _ops.signature([a.to(torch.float16)]) == (((1,), "float16", "cpu"),)
