"""Small PyTorch models for the torch_ext tests, and running one step plainly or under a plan.

Each entry of :data:`NETS` builds a model and a batch covering one thing the executor must get
right: convolutions with BatchNorm and in-place ReLU, residual adds, concatenation, attention
(matmul, softmax, layer norm, views: reshape, transpose, split), dropout, tied weights, several
losses. :func:`step` runs one training step from a saved state and returns what a plain and a
planned step must agree on bitwise, with the measured peak.
"""

import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

import lowerset
import torch_ext
from torch_ext.measure import MemoryMeter


class ConvBN(nn.Module):
    """Convolutions with BatchNorm, in-place ReLU, a residual add and max pooling."""

    def __init__(self, c=8):
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(3, c, 3, padding=1), nn.BatchNorm2d(c)
        self.c2, self.b2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.c3, self.b3 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.fc = nn.Linear(c * 8 * 8, 10)

    def forward(self, x):
        h = F.relu(self.b1(self.c1(x)), inplace=True)
        r = F.relu_(self.b2(self.c2(h)))
        h = F.relu(self.b3(self.c3(r)) + h)
        h = F.max_pool2d(h, 2)
        return self.fc(h.flatten(1))


class Concat(nn.Module):
    """Two branches concatenated, then a 1x1 convolution."""

    def __init__(self, c=8):
        super().__init__()
        self.a, self.b = nn.Conv2d(3, c, 3, padding=1), nn.Conv2d(3, c, 1)
        self.m = nn.Conv2d(2 * c, c, 1)
        self.fc = nn.Linear(c * 16 * 16, 10)

    def forward(self, x):
        h = torch.cat([torch.tanh(self.a(x)), torch.sigmoid(self.b(x))], dim=1)
        return self.fc(F.relu(self.m(h)).reshape(x.shape[0], -1))


class Attention(nn.Module):
    """One pre-norm attention block with an explicit softmax and an MLP."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 2 * d), nn.Linear(2 * d, d)
        self.head = nn.Linear(d, 10)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)
                   for z in (q, k, v))
        a = torch.softmax(q @ k.transpose(-2, -1) / (d // self.heads) ** 0.5, dim=-1) @ v
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        x = x + self.fc2(F.gelu(self.fc1(self.ln2(x))))
        return self.head(x.mean(dim=1))


class Dropout(nn.Module):
    """An MLP with dropout between its layers (random draws a recomputation must repeat)."""

    def __init__(self, d=64):
        super().__init__()
        self.l1, self.l2, self.l3 = nn.Linear(32, d), nn.Linear(d, d), nn.Linear(d, 10)

    def forward(self, x):
        h = F.dropout(F.relu(self.l1(x)), 0.3, training=self.training)
        h = F.dropout(torch.tanh(self.l2(h)), 0.2, training=self.training)
        return self.l3(h)


class Tied(nn.Module):
    """An embedding whose weight is also the output projection (tied weights)."""

    def __init__(self, vocab=50, d=16):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.mix = nn.Linear(d, d)

    def forward(self, ids):
        h = torch.tanh(self.mix(self.emb(ids)))
        return F.linear(h, self.emb.weight).reshape(-1, self.emb.num_embeddings)


class TwoLosses(nn.Module):
    """A trunk with two heads; the loss is the sum of a classification and a regression loss."""

    def __init__(self, d=32):
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(16, d), nn.ReLU(), nn.Linear(d, d), nn.ReLU())
        self.cls, self.reg = nn.Linear(d, 5), nn.Linear(d, 1)

    def forward(self, x):
        h = self.trunk(x)
        return self.cls(h), self.reg(h)


def _images(b, size, gen):
    return torch.randn(b, 3, size, size, generator=gen), torch.randint(0, 10, (b,), generator=gen)


def _make(name, b=4, device="cpu"):
    """(model, step) of net `name` on `device`: ``step()`` returns the loss of one forward
    pass."""
    model, fn, batch = _build(name, b)
    model.to(device)
    batch = [t.to(device) for t in batch]
    return model, lambda: fn(model, *batch)


def _build(name, b):
    """(model, loss function of (model, *batch), batch) of net `name` on the CPU."""
    gen = torch.Generator().manual_seed(1)
    torch.manual_seed(0)

    def classify(m, x, t):
        return F.cross_entropy(m(x), t)

    if name in ("convbn", "concat"):
        return (ConvBN if name == "convbn" else Concat)(), classify, _images(b, 16, gen)
    if name == "attention":
        return Attention(), classify, (torch.randn(b, 6, 32, generator=gen),
                                       torch.randint(0, 10, (b,), generator=gen))
    if name == "dropout":
        return Dropout(), classify, (torch.randn(b, 32, generator=gen),
                                     torch.randint(0, 10, (b,), generator=gen))
    if name == "tied":
        ids = torch.randint(0, 50, (b, 7), generator=gen)
        return Tied(), lambda m, i: F.cross_entropy(m(i[:, :-1]), i[:, 1:].reshape(-1)), (ids,)
    if name == "two_losses":
        def two(m, x, t, y):
            logits, pred = m(x)
            return F.cross_entropy(logits, t) + 0.5 * F.mse_loss(pred, y)
        return TwoLosses(), two, (torch.randn(b, 16, generator=gen),
                                  torch.randint(0, 5, (b,), generator=gen),
                                  torch.randn(b, 1, generator=gen))
    raise KeyError(name)


NETS = ("convbn", "concat", "attention", "dropout", "tied", "two_losses")


def make(name, b=4, device="cpu"):
    """(model in training mode, step, traced graph) of net `name` on `device`."""
    model, fn = _make(name, b, device)
    model.train()
    graph = torch_ext.trace(fn, model=model)
    return model, fn, graph


def plans(graph):
    """Named strategies covering the planners: [V], the least peak, Chen's sqrt(n), solve at
    a budget halfway, the paper's time-centric DP."""
    plain = lowerset.schedule(graph).peak
    least = lowerset.min_peak(graph)
    mid = (least.schedule.peak + plain) // 2
    return {"liveness": lowerset.CanonicalStrategy(graph, [set(graph.labels)], method="none"),
            "min_peak": least, "chen": lowerset.baselines.chen_sqrtn(graph),
            "solve": lowerset.solve(graph, budget=mid),
            "paper": lowerset.solve(graph, mode="time", model="paper")}


def cut_plan(graph, cuts):
    """The strategy whose lower sets are the prefixes of the forward order ending before each
    of `cuts` (forward positions), then V: prefixes of a topological order are lower sets."""
    order = graph.facts.forward_order
    sets = [{graph.labels[v] for v in order[:c]} for c in sorted(set(cuts)) if 0 < c < graph.n]
    return lowerset.CanonicalStrategy(graph, sets + [set(graph.labels)])


def plan_recomputing(graph, wanted):
    """A one-cut strategy whose schedule recomputes a node for which `wanted(attrs)` holds."""
    for c in range(1, graph.n):
        s = cut_plan(graph, [c])
        if any(wanted(graph.attrs[graph.index[v]]) for v in s.schedule.recomputed):
            return s
    raise LookupError("no one-cut strategy recomputes such a node")


def step(model, fn, state, plan=None, record=True):
    """One step from `state` (parameters, buffers, the CPU generator): plainly, or under
    ``RecomputeContext(plan)``. Return ``(values, peak, context)``: the loss, every gradient and
    buffer by name (copies), the measured peak above the start (bytes), the context or None."""
    model.load_state_dict(state["model"])
    torch.set_rng_state(state["rng"])
    if state.get("cuda_rng") is not None:
        torch.cuda.set_rng_state_all(state["cuda_rng"])
    for p in model.parameters():
        p.grad = None
    device = next(model.parameters()).device
    ctx = None if plan is None else torch_ext.RecomputeContext(plan, record=record)
    with MemoryMeter(device) as meter:
        if ctx is None:
            loss = fn()
            loss.backward()
        else:
            with ctx:
                loss = fn()
                loss.backward()
    values = {"loss": loss.detach().clone()}
    values.update({f"grad {n}": p.grad.clone() for n, p in model.named_parameters()
                   if p.grad is not None})
    values.update({f"buffer {n}": b.clone() for n, b in model.named_buffers()})
    return values, meter.result.peak, ctx


def save(model):
    """The state :func:`step` starts from."""
    return {"model": copy.deepcopy(model.state_dict()), "rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None}


def first_difference(a, b):
    """The first name whose values differ bitwise (or are missing on one side), or None."""
    for k in list(a) + [k for k in b if k not in a]:
        x, y = a.get(k), b.get(k)
        if x is None or y is None or x.shape != y.shape or x.dtype != y.dtype \
                or not torch.equal(x.reshape(-1).view(torch.uint8)
                                   if x.dtype.is_floating_point else x,
                                   y.reshape(-1).view(torch.uint8)
                                   if y.dtype.is_floating_point else y):
            return k
    return None
