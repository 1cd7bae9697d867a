"""A mixed-integer linear program, built in Python lists and solved by HiGHS (``highspy``).

:class:`Milp` collects columns (bounds, objective, integrality) and rows (bounds, sparse
coefficients), then hands the whole model to HiGHS at once (``Highs.passModel``). A model can
be solved again after rows are added (the no-good cuts of :mod:`lowerset.optimality.canonical`).
``highspy`` is imported inside :meth:`Milp.solve`, so that ``lowerset`` imports without it.
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from .._typing import FloatArray
from ..exceptions import LowersetError

INF = math.inf

#: Relative tolerance of a proof: HiGHS meets rows and bounds within its feasibility tolerance,
#: so on rows of 10^6-10^10 bytes its bound can fall a few bytes short of the optimum it found.
#: A plan whose peak is within this fraction of the bound is reported optimal.
REL_TOL = 1e-6


def proven(value: float, bound: float) -> bool:
    """Whether `value` (an integer objective) is within :data:`REL_TOL` of the lower `bound`."""
    return value <= bound + max(0.5, REL_TOL * abs(bound))


def floor_bound(bound: float) -> float:
    """The integer lower bound that `bound` proves: ``ceil(bound)`` less the tolerance."""
    if not math.isfinite(bound):
        return bound
    return math.ceil(bound - max(1e-6, REL_TOL * abs(bound)))


class SolverMissingError(LowersetError, ImportError):
    """The MILP solver of :func:`lowerset.optimum` (``highspy``) is not installed."""


def _highspy():
    try:
        import highspy
    except ImportError as e:  # pragma: no cover - exercised where highspy is absent
        raise SolverMissingError(
            "lowerset.optimum needs the HiGHS solver: pip install 'lowerset[optimum]' "
            "(highspy)") from e
    return highspy


def _quiet(make):
    """``make()`` with the process's standard output (file descriptor 1) sent to the null
    device: HiGHS prints its banner when a solver is constructed, before any option applies."""
    sys.stdout.flush()
    saved, null = os.dup(1), os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 1)
        return make()
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(null)


@dataclass
class Solution:
    """What one HiGHS run gives.

    Attributes
    ----------
    status : str
        "optimal", "infeasible" or "time_limit".
    values : ndarray of float64, shape (#columns,) or None
        The best solution found (None when none was found).
    objective : float or None
        Its objective value.
    bound : float
        HiGHS's bound on the optimum (its dual bound; ``-inf`` when it has none).
    seconds : float
        Wall time of the run.
    """

    status: str
    values: FloatArray | None
    objective: float | None
    bound: float
    seconds: float


class Milp:
    """Columns and rows of a minimisation, solved by HiGHS.

    Attributes
    ----------
    n_cols, n_rows : int
    """

    def __init__(self) -> None:
        self.lb: list[float] = []
        self.ub: list[float] = []
        self.cost: list[float] = []
        self.integer: list[bool] = []
        self.row_lb: list[float] = []
        self.row_ub: list[float] = []
        self.row_ptr: list[int] = [0]
        self.row_idx: list[int] = []
        self.row_val: list[float] = []

    @property
    def n_cols(self) -> int:
        return len(self.lb)

    @property
    def n_rows(self) -> int:
        return len(self.row_lb)

    def var(self, lb: float = 0.0, ub: float = 1.0, cost: float = 0.0,
            integer: bool = False) -> int:
        """Add a column; return its index."""
        self.lb.append(float(lb))
        self.ub.append(float(ub))
        self.cost.append(float(cost))
        self.integer.append(bool(integer))
        return len(self.lb) - 1

    def binary(self, cost: float = 0.0) -> int:
        """Add a 0/1 column; return its index."""
        return self.var(0.0, 1.0, cost, True)

    def row(self, terms: Iterable[tuple[int, float]], lb: float = -INF, ub: float = INF) -> None:
        """Add the row ``lb <= sum(c * x[i] for i, c in terms) <= ub`` (terms: (index, coef))."""
        for i, c in terms:
            if c != 0:
                self.row_idx.append(i)
                self.row_val.append(float(c))
        self.row_ptr.append(len(self.row_idx))
        self.row_lb.append(float(lb))
        self.row_ub.append(float(ub))

    def set_objective(self, costs: Mapping[int, float]) -> None:
        """Replace the objective by ``sum(c * x[i] for i, c in costs.items())``."""
        self.cost = [0.0] * self.n_cols
        for i, c in costs.items():
            self.cost[i] = float(c)

    def solve(self, time_limit: float | None = None) -> Solution:
        """Minimise with HiGHS; return a :class:`Solution`.

        Parameters
        ----------
        time_limit : float, optional
            Seconds; HiGHS stops with the best solution and bound it has.
        """
        highspy = _highspy()
        h = _quiet(highspy.Highs)
        h.setOptionValue("output_flag", False)
        h.setOptionValue("mip_rel_gap", 0.0)
        h.setOptionValue("mip_abs_gap", 1e-6)
        h.setOptionValue("threads", 1)
        if time_limit is not None:
            h.setOptionValue("time_limit", max(1e-3, float(time_limit)))
        lp = highspy.HighsLp()
        lp.num_col_ = self.n_cols
        lp.num_row_ = self.n_rows
        lp.col_cost_ = np.asarray(self.cost, dtype=np.float64)
        lp.col_lower_ = np.asarray(self.lb, dtype=np.float64)
        lp.col_upper_ = np.asarray(self.ub, dtype=np.float64)
        lp.row_lower_ = np.asarray(self.row_lb, dtype=np.float64)
        lp.row_upper_ = np.asarray(self.row_ub, dtype=np.float64)
        lp.a_matrix_.format_ = highspy.MatrixFormat.kRowwise
        lp.a_matrix_.start_ = np.asarray(self.row_ptr, dtype=np.int32)
        lp.a_matrix_.index_ = np.asarray(self.row_idx, dtype=np.int32)
        lp.a_matrix_.value_ = np.asarray(self.row_val, dtype=np.float64)
        lp.integrality_ = [highspy.HighsVarType.kInteger if i else highspy.HighsVarType.kContinuous
                           for i in self.integer]
        h.passModel(lp)
        t0 = time.perf_counter()
        h.run()
        seconds = time.perf_counter() - t0
        st = h.getModelStatus()
        info = h.getInfo()
        has = info.primal_solution_status == 2   # kSolutionStatusFeasible
        values = np.asarray(h.getSolution().col_value, dtype=np.float64) if has else None
        bound = float(info.mip_dual_bound) if any(self.integer) else (
            float(info.objective_function_value) if has else -INF)
        if st == highspy.HighsModelStatus.kOptimal:
            status = "optimal"
            if not math.isfinite(bound):
                bound = float(info.objective_function_value)
        elif st == highspy.HighsModelStatus.kInfeasible:
            status, values = "infeasible", None
        elif st in (highspy.HighsModelStatus.kTimeLimit, highspy.HighsModelStatus.kInterrupt):
            status = "time_limit"
        else:
            raise LowersetError(f"HiGHS stopped with status {h.modelStatusToString(st)}")
        if not math.isfinite(bound):
            bound = -INF
        objective = float(info.objective_function_value) if values is not None else None
        return Solution(status, values, objective, bound, seconds)
