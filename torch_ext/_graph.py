"""The graph :func:`torch_ext.trace` returns, :class:`TracedGraph`, and the total cost its
"flops" cost model aims at.

They live apart from :mod:`torch_ext.trace` (which records a step) and :mod:`torch_ext._build`
(which turns the record into a graph) because both use them, as does
:mod:`torch_ext.batch`: each of those modules imports this one, and this one imports none of
them. ``torch_ext.TracedGraph`` and ``torch_ext.trace.TracedGraph`` name the same class.
"""

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import lowerset

__all__ = ["TracedGraph", "TARGET_TOTAL_COST"]

#: Total cost (cost units) the "flops" model aims at: FLOPs per unit is the power of ten that
#: makes the whole forward pass cost at most this many units. The DP's tables are indexed by
#: overhead, so the total bounds their size; it is fine enough that an elementwise operation
#: (a few FLOPs per element, clamped to at least 1 unit) costs no more than its FLOPs say
#: against a convolution (at 10,000 units a ResNet-50's normalizations, one unit each,
#: together cost as much as one convolution, and a plan recomputes the convolution to spare
#: them).
TARGET_TOTAL_COST = 100_000


class TracedGraph(lowerset.Graph):
    """A :class:`lowerset.Graph` recorded from PyTorch, with its execution facts.

    Node labels are ints 0..n-1 in dispatch order (also the node ids); ``graph.facts`` holds
    the execution facts. Each node's ``attrs`` identify the call for the executor's checks:
    ``op`` (``"aten.convolution.default"``), ``inputs`` (per tensor argument
    ``["node", label, output_index]`` or ``[kind, shape, dtype, device]`` with kind "param" or
    "input"), ``outputs`` (``[shape, dtype, device]`` per output tensor), ``flops``,
    ``absorbed`` (the names of the operations on external arrays dispatched just before it, not
    nodes), and where they apply ``random`` (True), ``mutates`` (argument positions of external
    arrays the call writes: BatchNorm's running statistics), ``hidden`` (the number of
    arguments, last in the facts, that the call does not receive: first the in-place writes
    into its arguments' memory made since those arguments, whose values it reads, then values
    its backward reads), ``pinned`` (why the node is never recomputed), and with
    ``trace(..., debug=True)`` ``where`` (``[file, line, function]`` of the user's code that
    dispatched the call) and ``absorbed_where`` (the same per absorbed operation, or None;
    ``absorbed_after_where`` beside ``absorbed_after``). Node 0's ``step`` holds the modes the
    step ran in (train or eval, autocast, device; :mod:`torch_ext._diagnose`), which the
    executor compares where a later step differs.

    Attributes
    ----------
    cost_model : str
    flop_unit : int or None
        FLOPs per cost unit ("flops").
    time_unit : float or None
        Seconds per cost unit ("profile").
    device : str
        The device the step ran on.
    param_bytes, input_bytes : int
        Bytes of the distinct parameters / other external tensors the step reads.
    """

    cost_model: str
    flop_unit: int | None
    time_unit: float | None
    device: str

    def __init__(self, nodes: Sequence[int], edges: Sequence[tuple[int, int]],
                 cost: Mapping[Hashable, int], memory: Mapping[Hashable, int],
                 attrs: Mapping[Hashable, Mapping[str, Any]], *,
                 facts: lowerset.ExecutionFacts, cost_model: str, flop_unit: int | None,
                 time_unit: float | None, device: str) -> None:
        super().__init__(nodes, edges, cost, memory, attrs=attrs, facts=facts)
        self.cost_model = cost_model
        self.flop_unit = flop_unit
        self.time_unit = time_unit
        self.device = device

    @property
    def param_bytes(self) -> int:
        return sum(b for kind, b in self.facts.externals if kind == "param")

    @property
    def input_bytes(self) -> int:
        return sum(b for kind, b in self.facts.externals if kind == "input")
