"""Baseline recomputation strategies, each returned as a :class:`~lowerset.CanonicalStrategy` and
so costed by the same model (eq. 1 and 2) as the DP's strategies.

- :func:`chen_sqrtn`: Chen et al.'s sqrt(n) checkpointing generalised to DAGs through articulation
  cuts (the paper's comparison in Table 1; Checkmate's "Chen sqrt(n)" for graphs).
- :func:`chen_greedy`: Chen et al.'s greedy variant with its segment-size knob, and
  :func:`chen_greedy_sweep`, which tries every knob value.
- :func:`selective_cuts`: selective checkpointing (PyTorch's SAC, ``torch.compile``'s
  partitioner) as a canonical strategy: segments end at the expensive nodes, whose outputs are
  kept, and the cheap nodes between them are recomputed; :func:`selective_family` at several
  cost levels and strides.

:func:`dtr` is no strategy: it simulates Dynamic Tensor Rematerialization, a runtime cache that
evicts and rematerializes arrays as the step runs, and returns its events as a
:class:`DTRSchedule`, folded by the same memory fold as a strategy's schedule.
"""

from ._cuts import articulation_cuts
from .chen_greedy import chen_greedy, chen_greedy_sweep
from .chen_sqrtn import chen_sqrtn
from .dtr import DTRSchedule, dtr
from .selective import selective_cuts, selective_family

__all__ = ["articulation_cuts", "chen_sqrtn", "chen_greedy", "chen_greedy_sweep", "dtr",
           "DTRSchedule", "selective_cuts", "selective_family"]
