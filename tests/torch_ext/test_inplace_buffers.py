"""In-place writes into a buffer through views (Hugging Face T5's ``_shift_right``: a buffer
from ``new_zeros``, slice assignments, ``masked_fill_``): every plan recomputes the writes with
the buffer or keeps it, and ``RecomputeContext(check=True)`` names a recomputation that
differs from the forward pass."""

import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import lowerset  # noqa: E402
import torch_ext  # noqa: E402
from lowerset import scheduling  # noqa: E402
from torch_nets import cut_plan  # noqa: E402

_trace_module = sys.modules["torch_ext.trace"]


def _shift_right(ids):
    """T5's ``_shift_right``: the decoder's input ids, built in place."""
    shifted = ids.new_zeros(ids.shape)
    shifted[..., 1:] = ids[..., :-1].clone()
    shifted[..., 0] = 3
    shifted.masked_fill_(shifted == -100, 0)
    return shifted


def _copy_into_view(ids):
    buf = ids.new_zeros(ids.shape[0], ids.shape[1] + 2)
    buf.narrow(1, 2, ids.shape[1]).copy_(ids)
    buf.narrow(1, 0, 1).fill_(5)
    return buf[:, :ids.shape[1]].clamp(min=0)


def _index_put(ids):
    buf = torch.zeros_like(ids)
    rows = torch.arange(ids.shape[0])
    buf[rows, (ids[:, 0] % ids.shape[1]).clamp(min=0)] = 7
    buf[:, 1:] += ids[:, 1:].clamp(min=0)
    return buf


def _scatter(ids):
    buf = ids.new_full(ids.shape, 2)
    buf.scatter_(1, ids.clamp(min=0) % ids.shape[1], ids.clamp(min=0))
    buf[:, -1:].zero_()
    return buf


def _float_mask(ids):
    """A float buffer without a gradient, written through views, multiplying activations."""
    mask = torch.ones(ids.shape, dtype=torch.float32)
    mask[:, -2:] = 0.0
    mask[ids < 0] = 0.5
    return mask


PATTERNS = {"shift_right": _shift_right, "copy_into_view": _copy_into_view,
            "index_put": _index_put, "scatter": _scatter, "float_mask": _float_mask}


class _Net(torch.nn.Module):
    def __init__(self, pattern):
        super().__init__()
        self.pattern = pattern
        self.emb, self.lin = torch.nn.Embedding(10, 8), torch.nn.Linear(8, 8)

    def forward(self, ids):
        built = PATTERNS[self.pattern](ids)
        if built.dtype.is_floating_point:
            h = self.emb(ids.clamp(min=0)) * built.unsqueeze(-1)
        else:
            h = self.emb(built.remainder(10))
        return torch.tanh(self.lin(h)).pow(2).sum()


def _setup(pattern):
    torch.manual_seed(0)
    model = _Net(pattern).train()
    ids = torch.randint(1, 10, (4, 6))
    ids[:, -2:] = -100
    step = lambda: model(ids)  # noqa: E731
    graph = torch_ext.trace(step, model=model)
    return model, step, graph


def _all_plans(graph):
    """Every plan of ``pareto`` and every one-cut plan (prefixes of the forward order): the
    latter drop the buffer's group at every point where a plan can."""
    return list(lowerset.pareto(graph)) + [cut_plan(graph, [c]) for c in range(1, graph.n)]


def _failures(model, step, graph, check):
    bad = []
    for plan in _all_plans(graph):
        try:
            r = torch_ext.verify(step, plan, model=model, check=check)
        except torch_ext.RecomputationError as e:
            bad.append(e)
            continue
        if not r.ok:
            bad.append(r.first_mismatch)
    return bad


@pytest.mark.parametrize("pattern", sorted(PATTERNS))
def test_every_plan_replays_the_writes_into_a_buffer(pattern):
    model, step, graph = _setup(pattern)
    assert any(nf.inplace for nf in graph.facts.nodes)
    plans = _all_plans(graph)
    assert any(p.schedule.recomputed for p in plans)
    assert _failures(model, step, graph, check=True) == []


def _groups_of_the_written_view(facts):
    """The rule before the fix: an in-place write tied only to the view it writes through."""
    root = list(range(len(facts.nodes)))
    for w, nf in enumerate(facts.nodes):
        for p in nf.output_views if nf.inplace else ():
            if p >= 0 and nf.args[p][0] >= 0:
                old, new = root[w], root[nf.args[p][0]]
                root = [new if r == old else r for r in root]
    return np.array(root, dtype=np.int64)


def test_the_shift_right_fails_under_the_rule_before_the_fix(monkeypatch):
    """T5's bug reintroduced (no writes recorded for the buffer's readers, a write tied to its
    view only): plans recompute the buffer and its masked_fill_ but not the slice
    assignments between them, and the embedding's gradient differs."""
    monkeypatch.setattr(_trace_module._Recorder, "_note_versions",
                        lambda self, op, tensors: None)
    monkeypatch.setattr(scheduling, "inplace_groups", _groups_of_the_written_view)
    model, step, graph = _setup("shift_right")
    unchecked = _failures(model, step, graph, check=False)
    assert any(isinstance(x, str) and x.startswith("grad emb") for x in unchecked)
    checked = _failures(model, step, graph, check=True)
    assert checked and all(isinstance(x, torch_ext.RecomputationError) for x in checked)
    first = checked[0]
    assert graph.attrs[first.node]["op"] in str(first)


def test_trace_records_the_writes_a_reader_of_the_buffer_has_seen():
    _, _, graph = _setup("shift_right")
    ops = [graph.attrs[v]["op"] for v in graph.labels]
    fill = ops.index("aten.masked_fill_.Scalar")
    nf = graph.facts.nodes[fill]
    written = [s for s, _ in nf.args[len(graph.attrs[fill]["inputs"]):]]
    # the second slice write (through select + fill_) is what masked_fill_ reads after
    assert [ops[s] for s in written] == ["aten.fill_.Tensor"]
    groups = scheduling.inplace_groups(graph.facts)
    owner = ops.index("aten.new_zeros.default")
    tied = {ops[v] for v in range(graph.n) if groups[v] == groups[owner]}
    assert {"aten.copy_.default", "aten.fill_.Tensor", "aten.masked_fill_.Scalar",
            "aten.slice.Tensor", "aten.select.int"} <= tied
    assert "aten.eq.Scalar" not in tied     # reads the buffer before masked_fill_: pinned
    assert "overwrites in place later" in graph.attrs[ops.index("aten.eq.Scalar")]["pinned"]


def test_check_names_a_recomputation_that_differs(monkeypatch):
    model, step, graph = _setup("float_mask")
    plan = next(p for p in _all_plans(graph) if p.schedule.recomputed)
    rerun = sys.modules["torch_ext._replay"].Call.rerun

    def wrong(self, held):
        outs = rerun(self, held)
        return [o + 1 if o.dtype.is_floating_point else o ^ 1 for o in outs]

    monkeypatch.setattr(sys.modules["torch_ext._replay"].Call, "rerun", wrong)
    with pytest.raises(torch_ext.RecomputationError) as info:
        torch_ext.verify(step, plan, model=model)
    v = plan.schedule.recomputed[0]
    assert info.value.node == v and info.value.output == 0
    assert graph.attrs[v]["op"] in str(info.value)
    # verify puts the model back as it was, error or not
    assert all(p.grad is None for p in model.parameters())
