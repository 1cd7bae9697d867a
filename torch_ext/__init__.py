"""torch_ext: lowerset's PyTorch front end (trace a training step, run a plan on it).

``trace(step)`` records one forward and backward pass as a :class:`lowerset.Graph` with its
execution facts; :class:`RecomputeContext` runs any canonical strategy planned on it in eager
PyTorch. Everything else (the schedule, the planner) is :mod:`lowerset`'s.
"""

try:
    import torch  # noqa: F401
except ImportError as e:  # pragma: no cover - exercised in the planner-only environment
    raise ImportError("torch_ext needs PyTorch: pip install 'lowerset[torch]'") from e

from .batch import BatchSizeResult, BatchTrial, extrapolate, max_batch_size
from .exceptions import (
    BatchScalingError,
    HookUsageError,
    InternalError,
    MeasurementError,
    MissingTorchAPIError,
    NoBatchFitsError,
    RecomputationError,
    StrategyMismatchError,
    TorchExtError,
    TraceError,
)
from .executor import RecomputeContext
from .memory import MemoryReport, peak_memory
from .trace import COST_MODELS, TracedGraph, trace
from .verify import VerificationError, VerifyReport, verify

__all__ = ["trace", "TracedGraph", "COST_MODELS", "RecomputeContext", "TorchExtError",
           "TraceError", "StrategyMismatchError", "HookUsageError", "RecomputationError",
           "MeasurementError", "InternalError", "MissingTorchAPIError", "verify",
           "VerifyReport", "VerificationError", "peak_memory", "MemoryReport", "max_batch_size",
           "extrapolate", "BatchSizeResult", "BatchTrial", "BatchScalingError",
           "NoBatchFitsError"]
