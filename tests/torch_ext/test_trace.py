"""torch_ext.trace: the graph and execution facts of small steps, against hand-worked values."""

import json
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import lowerset  # noqa: E402
import torch_ext  # noqa: E402
from torch_ext import TraceError  # noqa: E402

F32 = 4


def _ops(g):
    return [g.attrs[v]["op"] for v in g.labels]


class Chain(nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2 = nn.Linear(8, 16), nn.Linear(16, 4)

    def forward(self, x):
        return self.l2(torch.relu(self.l1(x)))


def test_linear_chain_nodes_reads_externals_and_flops():
    torch.manual_seed(0)
    m, x, t = Chain(), torch.randn(5, 8), torch.randint(0, 4, (5,))
    g = torch_ext.trace(lambda: F.cross_entropy(m(x), t), model=m)
    # F.linear is aten.t (absorbed: a view of the weight) and aten.addmm
    assert _ops(g)[:3] == ["aten.addmm.default", "aten.relu.default", "aten.addmm.default"]
    assert g.attrs[0]["absorbed"] == ["aten.t.default"]
    f = g.facts
    addmm, relu = f.nodes[0], f.nodes[1]
    assert addmm.outputs == (5 * 16 * F32,) and relu.outputs == (5 * 16 * F32,)
    # addmm(bias, x, W.t()): its backward reads x and W.t(), both external (resident), so no
    # value of the graph; relu's reads its own output; the second addmm reads relu's output
    assert addmm.reads_args == () and relu.reads_outputs == (0,) and relu.reads_args == ()
    assert f.nodes[2].args[1] == (1, 0) and f.nodes[2].reads_args == (1,)
    assert relu.args == ((0, 0),) and relu.grad_args == (True,)
    # resident: the two weights, the two biases, x and t; W.t() is a view of W (0 bytes) whose
    # gradient has W's size
    kinds = [k for k, _ in f.externals]
    assert f.resident == (8 * 16 + 16 + 16 * 4 + 4) * F32 + x.numel() * F32 + t.numel() * 8
    wt = addmm.args[2][0]
    assert f.externals[~wt] == ("param", 0) and f.external_size(~wt) == 8 * 16 * F32
    assert kinds.count("param") == 6 and kinds.count("input") == 2
    # FLOPs: flop_counter's addmm formula, 2 * m * k * n
    assert g.attrs[0]["flops"] == 2 * 5 * 8 * 16 and g.attrs[2]["flops"] == 2 * 5 * 16 * 4
    assert f.seeds == ((g.n - 1, 0),) and f.grad_sum == "inplace"
    assert f.backward_order[0] == g.n - 1 and set(f.backward_order) <= set(range(g.n))


class Views(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4)

    def forward(self, x):
        h = F.relu_(self.bn(self.conv(x)))           # in place
        a, b = h.split(2, dim=1)                      # two views
        return (a * b).transpose(1, 2).reshape(x.shape[0], -1).sum(dim=1).mean()


def test_attention_on_the_cpu_costs_its_two_products():
    """torch.utils.flop_counter has no formula for the CPU kernel of scaled_dot_product_attention;
    the trace counts the two batched products (q k^T, then the weights times v), by hand:
    2 * 2 * (batch * query heads) * L * S * E, with grouped keys and values."""
    torch.manual_seed(0)
    q = torch.randn(2, 4, 16, 8, requires_grad=True)
    k = torch.randn(2, 2, 16, 8, requires_grad=True)
    v = torch.randn(2, 2, 16, 8, requires_grad=True)

    def step():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                              enable_gqa=True).square().sum()

    g = torch_ext.trace(step)
    attention = [v_ for v_ in g.labels if "attention" in g.attrs[v_]["op"]]
    assert len(attention) == 1
    assert g.attrs[attention[0]]["flops"] == 2 * 2 * (2 * 4) * 16 * 16 * 8


def test_in_place_views_and_running_statistics():
    torch.manual_seed(0)
    m, x = Views(), torch.randn(2, 3, 5, 5)
    before = m.bn.running_mean.clone()
    g = torch_ext.trace(lambda: m(x), model=m)
    ops = _ops(g)
    # the trace is one real step: the running statistics moved once, num_batches_tracked too
    assert not torch.equal(before, m.bn.running_mean) and int(m.bn.num_batches_tracked) == 1
    bn, relu, split = (ops.index(o) for o in ("aten.native_batch_norm.default",
                                              "aten.relu_.default", "aten.split.Tensor"))
    f = g.facts.nodes
    # BatchNorm writes its running statistics (arguments 3 and 4): a recomputation writes
    # copies; num_batches_tracked.add_ is absorbed (an external written in place)
    assert g.attrs[bn]["mutates"] == [3, 4]
    assert "aten.add_.Tensor" in g.attrs[bn]["absorbed"]
    # relu_ writes its argument in place and returns it: a view, tied to BatchNorm's output
    assert f[relu].inplace and f[relu].output_views == (0,) and f[relu].args == ((bn, 0),)
    assert f[relu].outputs == (2 * 4 * 5 * 5 * F32,)
    # split: two outputs, both views of its argument, with gradient views of nothing
    assert f[split].output_views == (0, 0) and f[split].outputs == (2 * 2 * 25 * F32,) * 2
    transpose = ops.index("aten.transpose.int")
    assert f[transpose].output_views == (0,) and f[transpose].grad_views == (0,)


class Holder(nn.Module):
    """Keeps its first activation in a variable until the end of forward, and one in an
    attribute after it."""

    def __init__(self):
        super().__init__()
        self.l1, self.l2, self.l3 = nn.Linear(4, 4), nn.Linear(4, 4), nn.Linear(4, 4)
        self.kept = None

    def forward(self, x):
        first = self.l1(x)
        h = torch.tanh(first)
        h = self.l2(h)
        h = self.l3(torch.sigmoid(h))
        self.kept = h
        return (h * 2).sum() + first.detach().sum() * 0


def test_held_until_and_outputs_kept_after_the_step():
    torch.manual_seed(0)
    m, x = Holder(), torch.randn(3, 4)
    g = torch_ext.trace(lambda: m(x), model=m)
    ops = _ops(g)
    first = ops.index("aten.addmm.default")
    tanh = ops.index("aten.tanh.default")
    detach = ops.index("aten.detach.default")
    nf = g.facts.nodes
    # `first` is named by a variable until its detach (read near the end of forward)
    assert nf[first].held_until[0] >= detach
    # tanh's output is dropped by the code when `h` is rebound, right after l2's addmm
    assert nf[tanh].held_until[0] in (-1, tanh + 1)
    # the attribute keeps l3's output after the step: returned, never freed
    l3 = [v for v, o in enumerate(ops) if o == "aten.addmm.default"][-1]
    assert (l3, 0) in g.facts.returned
    s = lowerset.min_peak(g)
    assert all(e.node != l3 for e in s.schedule.events if e.kind in ("drop", "free_value"))


def test_random_operations_are_marked():
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.5), nn.Linear(8, 2))
    x = torch.randn(3, 4)
    state = torch.get_rng_state()
    g = torch_ext.trace(lambda: m(x).square().mean(), model=m)
    assert torch.equal(state, torch.get_rng_state())   # the generator is put back
    random = [g.attrs[v]["op"] for v in g.labels if g.attrs[v].get("random")]
    assert random == ["aten.bernoulli_.float"]


def test_gradients_are_put_back_and_errors():
    m, x, t = Chain(), torch.randn(5, 8), torch.randint(0, 4, (5,))
    F.cross_entropy(m(x), t).backward()
    grads = [p.grad.clone() for p in m.parameters()]
    torch_ext.trace(lambda: F.cross_entropy(m(x), t), model=m)
    assert all(torch.equal(a, p.grad) for a, p in zip(grads, m.parameters()))
    m.zero_grad(set_to_none=True)
    torch_ext.trace(lambda: F.cross_entropy(m(x), t), model=m)
    assert all(p.grad is None for p in m.parameters())   # None stays None
    with pytest.raises(TraceError, match="one element"):
        torch_ext.trace(lambda: m(x))
    with pytest.raises(TraceError, match="no gradient"):
        torch_ext.trace(lambda: m(x).detach().sum())
    made_before = m(x).sum()
    with pytest.raises(TraceError, match="no operation"):
        torch_ext.trace(lambda: made_before)
    with pytest.raises(ValueError, match="cost_model"):
        torch_ext.trace(lambda: m(x).sum(), cost_model="time")


def test_profiled_costs():
    m, x, t = Chain(), torch.randn(5, 8), torch.randint(0, 4, (5,))
    g = torch_ext.trace(lambda: F.cross_entropy(m(x), t), model=m, cost_model="profile",
                        repeats=2, time_unit=1e-6)
    assert g.cost_model == "profile" and g.time_unit == 1e-6 and g.flop_unit is None
    assert all(int(c) >= 1 for c in g.cost)


def test_profiled_time_waits_for_the_device_after_each_call():
    """On CUDA a call returns once its kernels are queued: each timed run ends with the
    device's synchronize (here a recording stand-in), so the time is the kernels'."""
    from torch_ext.trace import _median_time

    calls = []
    _median_time(lambda: calls.append("call"), (), {}, 2, 0.0, lambda: calls.append("sync"))
    assert calls == ["call", "sync", "call", "sync"]


def test_graph_json_plans_from_the_command_line(tmp_path):
    torch.manual_seed(0)
    m, x = Views(), torch.randn(2, 3, 5, 5)
    g = torch_ext.trace(lambda: m(x), model=m)
    path = tmp_path / "graph.json"
    lowerset.save_graph(g, path)
    loaded = lowerset.load_graph(path)
    assert loaded.facts == g.facts and loaded.attrs == g.attrs
    least = lowerset.min_peak(loaded).schedule.peak
    out = subprocess.run([sys.executable, "-m", "lowerset", "plan", str(path), "--budget",
                          str(least), "-o", str(tmp_path / "plan.json")],
                         capture_output=True, text=True, check=True).stdout
    assert "plan (executor model" in out
    plan = lowerset.load_strategy(tmp_path / "plan.json", graph=g)
    assert plan.schedule.peak <= least
    json.loads(path.read_text())
