"""lowerset: plan recomputation (rematerialization) for memory-efficient backpropagation.

Implements Kusumoto et al., "A Graph Theoretic Framework of Recomputation Algorithms for
Memory-Efficient Backpropagation", NeurIPS 2019. Framework-free: this package never imports
Chainer or PyTorch (``chainer_ext`` and ``torch_ext`` are the front ends).

The star imports run in this order on purpose (a later module's name wins: ``planner.solve``
over ``dp.solve``), so the import sorter leaves this file alone.
"""
# ruff: noqa: I001

from .exceptions import *  # noqa: F401,F403
from .execution import *  # noqa: F401,F403
from .graph import *  # noqa: F401,F403
from .lowersets import *  # noqa: F401,F403
from .strategy import *  # noqa: F401,F403
from .dropset import *  # noqa: F401,F403
from .dp import *  # noqa: F401,F403
from .io import *  # noqa: F401,F403
from .scheduling import *  # noqa: F401,F403
from .planner import *  # noqa: F401,F403
from .baselines.dtr import DTRSchedule, dtr  # noqa: F401
from .replay import *  # noqa: F401,F403
from .optimality import *  # noqa: F401,F403
from . import (baselines, dp, dropset, exceptions, execution, graph, io, lowersets, optimality,  # noqa: F401
               planner, replay, scheduling, strategy)
from . import batching, verifying  # noqa: F401  (the shared parts of max_batch_size and verify)
from . import plot  # noqa: F401  (lowerset.plot.timeline after `import lowerset`; matplotlib on use)

__version__ = "0.1.0"

__all__ = (exceptions.__all__ + execution.__all__ + graph.__all__ + lowersets.__all__
           + strategy.__all__ + dropset.__all__ + dp.__all__ + ["dtr", "DTRSchedule"] + io.__all__
           + scheduling.__all__ + planner.__all__ + replay.__all__ + optimality.__all__)
