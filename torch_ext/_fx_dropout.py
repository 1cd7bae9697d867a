"""Dropout whose output a compiled plan may recompute without drawing its mask again.

In a joint graph, ``aten.native_dropout(x, p, train)`` draws a mask and returns ``x * mask *
scale`` with it (``scale = 1 / (1 - p)``). Recomputing the operation draws a new mask, so
:class:`torch_ext.compiled.PlannedPartition` never recomputes it (random operations are
pinned), and an output the backward reads (four times the mask's bytes in float32) stays until
then. :func:`split_dropout` rewrites the forward part so that the output is a deterministic
function of the kept mask: the dropout's output item is replaced by
``aten.native_dropout_backward(x, mask, scale)``, the same product. Multiplying by a 0/1 mask
is exact, so both round ``x * scale`` once, in float32 and float64 (bit for bit on the CPU,
checked by the tests; not checked on a GPU). The draw stays a pinned node that keeps the mask;
the product is an ordinary node a plan may drop, and the backward graph then recomputes it from
``x`` and the saved mask: the randomness is replayed, not redrawn. Half precision is left as it
is: there the two round differently. Inductor's joint graphs hold no ``native_dropout`` (its
decompositions draw with its own seeded operations, whose mask and product are ordinary nodes
already), so the rewrite concerns ``aot_eager``.
"""

from __future__ import annotations

import operator
from typing import Any

import torch

__all__ = ["split_dropout"]

_DROPOUT = torch.ops.aten.native_dropout.default
_APPLY = torch.ops.aten.native_dropout_backward.default

#: The dtypes in which ``native_dropout_backward(x, mask, scale)`` equals the dropout's output
#: bit for bit.
EXACT_DTYPES = (torch.float32, torch.float64)


def _items(node: torch.fx.Node) -> dict[Any, torch.fx.Node]:
    """The ``getitem`` users of a node with several outputs, by index."""
    return {u.args[1]: u for u in node.users
            if u.op == "call_function" and u.target is operator.getitem}


def _p(node: torch.fx.Node) -> Any:
    """The dropout probability argument of a ``native_dropout`` call."""
    return node.args[1] if len(node.args) > 1 else node.kwargs.get("p")


def _splittable(node: torch.fx.Node) -> bool:
    """Whether `node` is a forward ``native_dropout`` in training mode, 0 < p < 1, in an exact
    dtype, with its output and its mask both taken."""
    if node.op != "call_function" or node.target is not _DROPOUT \
            or node.meta.get("partitioner_tag") != "is_forward":
        return False
    x, p = node.args[0], _p(node)
    train = node.args[2] if len(node.args) > 2 else node.kwargs.get("train")
    val = x.meta.get("val") if isinstance(x, torch.fx.Node) else None
    items = _items(node)
    return (isinstance(val, torch.Tensor) and val.dtype in EXACT_DTYPES
            and isinstance(p, float) and 0.0 < p < 1.0 and train is not False
            and 0 in items and 1 in items)


def split_dropout(joint: torch.fx.GraphModule) -> int:
    """Replace, in place, the output item of each splittable ``native_dropout`` of `joint`'s
    forward part by ``native_dropout_backward(x, mask, scale)`` on its mask.

    Parameters
    ----------
    joint : torch.fx.GraphModule
        An AOTAutograd joint graph (its forward operations tagged ``partitioner_tag ==
        "is_forward"``).

    Returns
    -------
    int
        How many dropouts were split.
    """
    split = 0
    order = {n: i for i, n in enumerate(joint.graph.nodes)}
    for node in [n for n in joint.graph.nodes if _splittable(n)]:
        items = _items(node)
        out, mask = items[0], items[1]
        scale = 1.0 / (1.0 - _p(node))   # as ATen's kernel computes it, in double
        with joint.graph.inserting_after(max(out, mask, key=order.__getitem__)):
            apply = joint.graph.call_function(_APPLY, (node.args[0], mask, scale))
        apply.meta = dict(out.meta)
        out.replace_all_uses_with(apply)
        joint.graph.erase_node(out)
        split += 1
    if split:
        joint.graph.lint()
        joint.recompile()
    return split
