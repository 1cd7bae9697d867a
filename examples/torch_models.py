"""The PyTorch networks of the benchmarks, built locally with random weights (nothing is
downloaded): torchvision's ResNet-50, a U-Net with long skips, a GPT-2-small-like decoder stack
with dropout, and a plain MLP chain.

``TORCH_NETWORKS[name]`` is a :class:`TorchNetwork`; ``net.build()`` makes the model,
``net.make_batch(b)`` a batch of ``b`` examples, ``net.loss(model, batch)`` the loss, and
``net.blocks(model)`` the model's repeated blocks (what per-block checkpointing wraps).

torchvision's wheels on PyPI are CUDA builds; beside the CPU build of PyTorch,
``import torchvision`` fails in its meta registrations ("operator torchvision::nms does not
exist") because its compiled operators do not load. :func:`import_torchvision` defines the two
operator schemas that module registers kernels for, then imports it: its model code needs no
compiled operator.
"""

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["TorchNetwork", "TORCH_NETWORKS", "import_torchvision", "UNet", "GPTStack",
           "MLPChain"]

_TORCHVISION_LIB = None


def import_torchvision():
    """Import torchvision, defining ``torchvision::nms`` and ``torchvision::qnms`` first when
    its compiled operators did not load (a CUDA wheel beside a CPU build of PyTorch)."""
    global _TORCHVISION_LIB
    try:
        import torchvision
        return torchvision
    except RuntimeError as e:
        if "torchvision::nms" not in str(e):
            raise
    import sys
    for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
        del sys.modules[name]
    _TORCHVISION_LIB = torch.library.Library("torchvision", "FRAGMENT")
    for op in ("nms", "qnms"):
        _TORCHVISION_LIB.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    import torchvision
    return torchvision


class UNet(nn.Module):
    """U-Net (Ronneberger et al., 2015): `depth` levels of two 3x3 convolutions with BatchNorm
    and ReLU, max pooling down, transposed convolutions up, long skips concatenated."""

    def __init__(self, in_channels=3, classes=2, width=32, depth=4):
        super().__init__()
        chans = [width * 2 ** i for i in range(depth + 1)]
        self.down = nn.ModuleList()
        c = in_channels
        for ch in chans:
            self.down.append(_double_conv(c, ch))
            c = ch
        self.up = nn.ModuleList(nn.ConvTranspose2d(chans[i + 1], chans[i], 2, stride=2)
                                for i in reversed(range(depth)))
        self.merge = nn.ModuleList(_double_conv(2 * chans[i], chans[i])
                                   for i in reversed(range(depth)))
        self.head = nn.Conv2d(chans[0], classes, 1)

    def forward(self, x):
        skips = []
        for i, block in enumerate(self.down):
            x = block(x)
            if i < len(self.down) - 1:
                skips.append(x)
                x = F.max_pool2d(x, 2)
        for up, merge in zip(self.up, self.merge):
            x = merge(torch.cat([skips.pop(), up(x)], dim=1))
        return self.head(x)


def _double_conv(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU(inplace=True), nn.Conv2d(cout, cout, 3, padding=1, bias=False),
                         nn.BatchNorm2d(cout), nn.ReLU(inplace=True))


class _Block(nn.Module):
    """A GPT-2 decoder block: pre-LayerNorm causal self-attention and MLP, residual adds,
    dropout on the attention weights and after each sublayer."""

    def __init__(self, dim, heads, dropout):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc, self.out = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
        self.drop = nn.Dropout(dropout)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=self.dropout if self.training else 0.0)
        x = x + self.drop(self.proj(a.transpose(1, 2).reshape(b, t, d)))
        return x + self.drop(self.out(F.gelu(self.fc(self.ln2(x)))))


class GPTStack(nn.Module):
    """A GPT-2-small-like decoder stack: token and position embeddings, `layers` blocks, a
    final LayerNorm and a language-model head tied to the token embedding."""

    def __init__(self, vocab=8192, dim=768, layers=12, heads=12, context=1024, dropout=0.1):
        super().__init__()
        self.tok, self.pos = nn.Embedding(vocab, dim), nn.Embedding(context, dim)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(_Block(dim, heads, dropout) for _ in range(layers))
        self.ln = nn.LayerNorm(dim)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.drop(self.tok(ids) + self.pos(pos))
        for block in self.blocks:
            x = block(x)
        return F.linear(self.ln(x), self.tok.weight)


class _RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def _rotate(x, cos, sin):
    """Rotary position embedding on the even and odd features (strided slices)."""
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)


class _LlamaBlock(nn.Module):
    """A LLaMA decoder block: RMSNorm, rotary embeddings, grouped-query causal attention
    (`kv_heads` key/value heads shared by `heads` query heads through ``repeat_interleave``)
    and a SwiGLU MLP, residual adds, no dropout."""

    def __init__(self, dim, heads, kv_heads, hidden):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, dim // heads
        self.norm1, self.norm2 = _RMSNorm(dim), _RMSNorm(dim)
        self.q = nn.Linear(dim, dim, bias=False)
        self.kv = nn.Linear(dim, 2 * kv_heads * self.head_dim, bias=False)
        self.o = nn.Linear(dim, dim, bias=False)
        self.gate, self.up = nn.Linear(dim, hidden, bias=False), nn.Linear(dim, hidden, bias=False)
        self.down = nn.Linear(hidden, dim, bias=False)

    def forward(self, x, cos, sin):
        b, t, d = x.shape
        h = self.norm1(x)
        q = self.q(h).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(h).view(b, t, 2, self.kv_heads, self.head_dim).unbind(2)
        k, v = k.transpose(1, 2), v.transpose(1, 2)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        rep = self.heads // self.kv_heads
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
        h = self.norm2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class LlamaStack(nn.Module):
    """A LLaMA-style decoder stack written in plain PyTorch: token embedding, `layers`
    :class:`_LlamaBlock` blocks, a final RMSNorm and an untied language-model head."""

    def __init__(self, vocab=8192, dim=128, layers=2, heads=4, kv_heads=2, hidden=None,
                 context=1024):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.blocks = nn.ModuleList(_LlamaBlock(dim, heads, kv_heads, hidden or 3 * dim)
                                    for _ in range(layers))
        self.norm, self.head = _RMSNorm(dim), nn.Linear(dim, vocab, bias=False)
        half = dim // heads // 2
        freq = 1.0 / 10000 ** (torch.arange(half, dtype=torch.float32) / half)
        angle = torch.outer(torch.arange(context, dtype=torch.float32), freq)
        self.register_buffer("cos", angle.cos(), persistent=False)
        self.register_buffer("sin", angle.sin(), persistent=False)

    def forward(self, ids):
        t = ids.shape[1]
        cos, sin = self.cos[:t], self.sin[:t]
        x = self.tok(ids)
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.head(self.norm(x))


class MLPChain(nn.Module):
    """A plain chain of `layers` Linear + ReLU layers of width `width`."""

    def __init__(self, features=1024, width=2048, layers=16, classes=10):
        super().__init__()
        dims = [features] + [width] * layers
        self.layers = nn.Sequential(*[m for i in range(layers)
                                      for m in (nn.Linear(dims[i], dims[i + 1]), nn.ReLU())])
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        return self.head(self.layers(x))


@dataclass(frozen=True)
class TorchNetwork:
    """One benchmark network and how to feed it.

    Attributes
    ----------
    name : str
    build : callable
        ``build() -> torch.nn.Module`` (random weights, training mode).
    make_batch : callable
        ``make_batch(batch_size, generator) -> tuple of tensors`` (inputs, targets).
    loss : callable
        ``loss(model, batch) -> scalar tensor``.
    blocks : callable
        ``blocks(model) -> list of (parent module, attribute name)``: the repeated blocks.
    """

    name: str
    build: Callable
    make_batch: Callable
    loss: Callable
    blocks: Callable


def _resnet50():
    return import_torchvision().models.resnet50().train()


def _resnet_blocks(m):
    return [(layer, str(i)) for layer in (m.layer1, m.layer2, m.layer3, m.layer4)
            for i in range(len(layer))]


def _images(size, classes):
    def make(b, gen):
        return (torch.randn(b, 3, size, size, generator=gen),
                torch.randint(0, classes, (b,), generator=gen))
    return make


def _segmentation(size, classes):
    def make(b, gen):
        return (torch.randn(b, 3, size, size, generator=gen),
                torch.randint(0, classes, (b, size, size), generator=gen))
    return make


def _tokens(length, vocab):
    def make(b, gen):
        ids = torch.randint(0, vocab, (b, length + 1), generator=gen)
        return ids[:, :-1].contiguous(), ids[:, 1:].contiguous()
    return make


def _cross_entropy(model, batch):
    x, t = batch
    y = model(x)
    return F.cross_entropy(y.reshape(-1, y.shape[-1]) if y.dim() == 3 else y,
                           t.reshape(-1) if y.dim() == 3 else t)


def _unet_blocks(m):
    return ([(m.down, str(i)) for i in range(len(m.down))]
            + [(m.merge, str(i)) for i in range(len(m.merge))])


def _gpt_blocks(m):
    return [(m.blocks, str(i)) for i in range(len(m.blocks))]


def _mlp_blocks(m):
    return [(m.layers, str(i)) for i in range(0, len(m.layers))]


def presets(name, preset):
    """Keyword arguments of network `name` at `preset` ("cpu", "gpu", "test")."""
    sizes = {
        "resnet50": {"test": dict(size=32), "cpu": dict(size=112), "gpu": dict(size=224)},
        "unet": {"test": dict(size=32, width=8, depth=3), "cpu": dict(size=128, width=32,
                                                                      depth=4),
                 "gpu": dict(size=256, width=64, depth=4)},
        "gpt": {"test": dict(dim=64, layers=2, heads=4, length=16, vocab=256),
                "cpu": dict(dim=768, layers=12, heads=12, length=128, vocab=8192),
                "gpu": dict(dim=768, layers=12, heads=12, length=1024, vocab=50257)},
        "llama": {"test": dict(dim=64, layers=2, heads=4, kv_heads=2, length=16, vocab=256),
                  "cpu": dict(dim=128, layers=2, heads=4, kv_heads=2, length=64, vocab=8192),
                  "gpu": dict(dim=2048, layers=16, heads=16, kv_heads=4, length=1024,
                              vocab=32000)},
        "mlp": {"test": dict(features=64, width=128, layers=4),
                "cpu": dict(features=1024, width=2048, layers=16),
                "gpu": dict(features=4096, width=8192, layers=16)},
    }
    return sizes[name][preset]


def network(name, preset="cpu", **sizes):
    """The :class:`TorchNetwork` `name` ("resnet50", "unet", "gpt", "llama", "mlp") at `preset`;
    keyword `sizes` replace the preset's (``network("mlp", "cpu", width=512)``)."""
    kw = presets(name, preset)
    unknown = set(sizes) - set(kw)
    if unknown:
        raise TypeError(f"network {name!r} has no size {sorted(unknown)}; its sizes are "
                        f"{sorted(kw)}")
    kw = {**kw, **sizes}
    if name == "resnet50":
        return TorchNetwork(name, _resnet50, _images(kw["size"], 1000), _cross_entropy,
                            _resnet_blocks)
    if name == "unet":
        return TorchNetwork(name, lambda: UNet(width=kw["width"], depth=kw["depth"]).train(),
                            _segmentation(kw["size"], 2), _cross_entropy, _unet_blocks)
    if name == "gpt":
        length, vocab = kw["length"], kw["vocab"]
        return TorchNetwork(
            name, lambda: GPTStack(vocab=vocab, dim=kw["dim"], layers=kw["layers"],
                                   heads=kw["heads"], context=max(length, 16)).train(),
            _tokens(length, vocab), _cross_entropy, _gpt_blocks)
    if name == "llama":
        length, vocab = kw["length"], kw["vocab"]
        return TorchNetwork(
            name, lambda: LlamaStack(vocab=vocab, dim=kw["dim"], layers=kw["layers"],
                                     heads=kw["heads"], kv_heads=kw["kv_heads"],
                                     context=max(length, 16)).train(),
            _tokens(length, vocab), _cross_entropy, _gpt_blocks)
    if name == "mlp":
        return TorchNetwork(
            name, lambda: MLPChain(kw["features"], kw["width"], kw["layers"]).train(),
            lambda b, gen: (torch.randn(b, kw["features"], generator=gen),
                            torch.randint(0, 10, (b,), generator=gen)),
            _cross_entropy, _mlp_blocks)
    raise KeyError(f"unknown network {name!r}; expected one of {sorted(TORCH_NETWORKS)}")


TORCH_NETWORKS = ("resnet50", "unet", "gpt", "mlp")
