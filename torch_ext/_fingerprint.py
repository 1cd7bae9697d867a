"""Fingerprints of tensors' values, for ``RecomputeContext(check=True)``: what a recomputed
value is compared with, taken when its operation first ran, without keeping a copy of it."""

import torch

__all__ = ["fingerprint", "describe_difference"]

#: The weights of the positional sum repeat with this period (a prime below 2**16).
_PERIOD = 65521
_WEIGHTS: dict[torch.device, torch.Tensor] = {}


def _weights(n, device):
    """int64 weights 1, 2, ..., _PERIOD, 1, 2, ... of length at least n on `device`."""
    w = _WEIGHTS.get(device)
    if w is None or w.shape[0] < n:
        m = max(n, 2 * (0 if w is None else w.shape[0]), 1024)
        w = _WEIGHTS[device] = torch.arange(m, device=device, dtype=torch.int64) % _PERIOD + 1
    return w[:n]


def fingerprint(t):
    """``(shape, dtype, sum, weighted sum, tail)`` of a tensor's raw bytes.

    The bytes are read as int32 words: their sum and their sum weighted by position (period
    65,521) in int64, and the last ``nbytes % 4`` bytes as they are. Two tensors of equal
    bytes have equal fingerprints; a change of any word changes the weighted sum unless it is
    offset by others (a missed write, a value read too late, a redrawn random mask do not).
    Costs two int64 temporaries of the tensor's word count."""
    raw = t.detach().contiguous().reshape(-1).view(torch.uint8)
    n = raw.shape[0] - raw.shape[0] % 4
    words = raw[:n].view(torch.int32).to(torch.int64)
    total = int(words.sum())
    weighted = int((words * _weights(words.shape[0], words.device)).sum())
    return (tuple(t.shape), t.dtype, total, weighted, bytes(raw[n:].tolist()))


def describe_difference(before, after):
    """What differs between two fingerprints, in words."""
    if before[:2] != after[:2]:
        return (f"shape/dtype {before[0]}:{before[1]} in the forward pass, "
                f"{after[0]}:{after[1]} recomputed")
    return "the values differ from those of the forward pass"
