"""Type aliases of the annotations of :mod:`lowerset`.

The annotations give an array's dtype; its shape and units stay in the docstrings.
"""

from collections.abc import Hashable, Iterable
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt

__all__ = ["BoolArray", "IntArray", "FloatArray", "NodeSet", "Number"]

#: A bool mask over the node ids of a graph (shape (n,)), or a stack of them.
BoolArray: TypeAlias = npt.NDArray[np.bool_]

#: An int64 array: node ids, bytes, cost units, segment numbers.
IntArray: TypeAlias = npt.NDArray[np.int64]

#: A float64 array: seconds, ratios.
FloatArray: TypeAlias = npt.NDArray[np.float64]

#: A set of nodes as the public functions take it: node labels, or a bool mask of shape (n,).
NodeSet: TypeAlias = Iterable[Hashable] | BoolArray

#: A number of bytes or seconds as the public functions take it: a Python or NumPy real number
#: (``check_budget`` and ``check_time_limit`` refuse a bool).
Number: TypeAlias = int | float | np.integer[Any] | np.floating[Any]
