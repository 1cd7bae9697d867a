"""Autograd nodes, named and walked without relying on ``id()`` of their Python objects.

``tensor.grad_fn`` and ``node.next_functions`` hand out Python wrappers of C++ autograd nodes.
PyTorch 2.11 makes a wrapper when one is asked for and drops it when Python holds it no more,
so two reads of the same node may give objects with different ``id()``s, and two different
nodes may give the same ``id()`` one after the other; 2.13 keeps one wrapper while the node
lives. The dict ``node.metadata`` lives with the C++ node in both, so a number kept there names
the node for as long as it exists.
"""

import itertools

__all__ = ["node_tag", "reachable_nodes"]

#: The key under which an autograd node's ``metadata`` holds its :func:`node_tag`.
_TAG = "lowerset.node"

_TAGS = itertools.count()


def node_tag(fn):
    """A number naming autograd node `fn` (the same on every read of it, unique in the
    process): kept in ``fn.metadata`` at the first call."""
    meta = fn.metadata
    tag = meta.get(_TAG)
    if tag is None:
        tag = meta[_TAG] = next(_TAGS)
    return tag


def reachable_nodes(root):
    """The autograd nodes reachable from node `root` through ``next_functions`` (root
    included; None is skipped), each once, in depth-first order."""
    seen, order, stack = set(), [], [root]
    while stack:
        fn = stack.pop()
        if fn is None:
            continue
        tag = node_tag(fn)
        if tag in seen:
            continue
        seen.add(tag)
        order.append(fn)
        stack.extend(f for f, _ in fn.next_functions)
    return order
