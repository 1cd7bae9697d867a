"""torch_ext._autograd: autograd nodes named by a tag kept on the node, not by id() of the
Python wrapper, which PyTorch makes and drops on each read."""

import pytest

torch = pytest.importorskip("torch")

from torch_ext._autograd import node_tag, reachable_nodes  # noqa: E402


def test_tags_name_nodes_where_wrapper_ids_do_not():
    # PyTorch 2.11 drops a node's Python wrapper once Python holds it no more: a node read
    # twice may get two ids, and two nodes read one after the other may get the same id (the
    # wrapper's memory reused). Later releases keep the wrapper while the node lives. The tags
    # hold on both.
    x = torch.randn(4, requires_grad=True)
    y = x * 2
    z = y.sin()
    first = node_tag(y.grad_fn)      # wrappers made and dropped in turn
    second = node_tag(z.grad_fn)
    assert first != second
    blocker = [z.grad_fn for _ in range(3)]  # noqa: F841 - other objects in between
    assert node_tag(y.grad_fn) == first
    assert node_tag(z.grad_fn) == second
    assert y.grad_fn.metadata["lowerset.node"] == first


def test_reachable_nodes_visits_each_node_once():
    x = torch.randn(3, requires_grad=True)
    w = torch.randn(3, requires_grad=True)
    a = x * w
    loss = (a.sin() + a.cos() * w).sum()
    names = sorted(type(fn).__name__ for fn in reachable_nodes(loss.grad_fn))
    # sum, add, sin, cos, mul (a * cos), mul (x * w), AccumulateGrad for x and for w
    assert names == sorted(["SumBackward0", "AddBackward0", "SinBackward0", "CosBackward0",
                            "MulBackward0", "MulBackward0", "AccumulateGrad",
                            "AccumulateGrad"])
    assert reachable_nodes(None) == []


def test_trace_refuses_gradients_along_edges_it_did_not_record(monkeypatch):
    # what naming autograd nodes by id() did on PyTorch 2.11: the forward pass's key of an
    # edge between two operations differs from the backward's, so no gradient matches
    import importlib

    import torch.nn as nn

    import torch_ext

    trace_module = importlib.import_module("torch_ext.trace")
    real = trace_module._edge_key

    def key_of_another_node(t):
        k = real(t)
        return k if k is None or k[0] == "leaf" else ("fn", -1 - k[1], k[2])

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
    x = torch.randn(4, 8)
    graph = torch_ext.trace(lambda: model(x).square().sum(), model=model)
    assert all(any(nf.grad_args) for nf in graph.facts.nodes[1:])
    monkeypatch.setattr(trace_module, "_edge_key", key_of_another_node)
    with pytest.raises(torch_ext.TraceError, match="did not record"):
        torch_ext.trace(lambda: model(x).square().sum(), model=model)
