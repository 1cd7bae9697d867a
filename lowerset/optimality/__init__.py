"""How far from optimal: the least peak or recomputation any plan reaches, proven by a MILP solver.

:func:`optimum` solves one of two mixed-integer linear programs with HiGHS (``highspy``, the
``optimum`` extra; imported when a model is solved, never by ``import lowerset``):

- ``model="canonical"`` (:mod:`lowerset.optimality.canonical`): over every lower-set sequence,
  the schedule's peak and recomputation (:func:`lowerset.schedule`), with its execution facts and
  memory rules; the optimum is checked by scheduling its strategy;
- ``model="general"`` (:mod:`lowerset.optimality.general`): Checkmate's rematerialization
  (Jain et al., MLSys 2020), any forward function recomputed any number of times, anywhere,
  counted by the same rules. It is never above the canonical optimum.

Both share the positions, alive columns and memory rows of :mod:`lowerset.optimality._timeline`
(its docstring states the memory rules and the one relaxation). For n nodes the canonical model
has about n + Σ_q (k_q + 1) positions (k_q: the nodes backward step q may recompute, at most n)
and the general one about n^2/2 + n n_b; each has one alive column per array and position of the
array's lifetime, so the models suit graphs of tens of nodes; on larger graphs a time limit
gives a bound (HiGHS's dual bound) and the best plan found.

It counts bytes (peaks, the whole step's device memory as ``schedule.peak`` counts it, resident
bytes included) and cost units (recomputation, as ``schedule.recompute_cost`` counts it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._typing import IntArray, Number
from .._validate import check_budget, check_graph, check_time_limit
from ..exceptions import ArgumentError, InfeasibleBudgetError, LowersetError
from ._milp import SolverMissingError

if TYPE_CHECKING:
    from ..graph import Graph
    from ..strategy import CanonicalStrategy

__all__ = ["optimum", "Optimum", "OPTIMUM_MODELS", "SolverMissingError"]

#: The models :func:`optimum` solves.
OPTIMUM_MODELS = ("canonical", "general")


@dataclass(frozen=True)
class Optimum:
    """The result of :func:`optimum`.

    Attributes
    ----------
    model : str
        "canonical" or "general".
    budget : int or None
        Bytes; None when the peak was minimised.
    peak : int or None
        Bytes: the whole step's peak of the best plan found (None: none found in time).
    recompute_cost : int or None
        Cost units that plan recomputes.
    lower_bound : int
        A proven lower bound of the objective: of the peak in bytes without a budget, of the
        recomputation cost in cost units with one. Equal to it when ``status == "optimal"``.
    status : str
        "optimal" (proven, within HiGHS's tolerance: relative 1e-6), "time_limit" (the best
        found within the time limit) or "bound" (the general model's coarse relaxation solved:
        only ``lower_bound`` holds; ``peak`` and ``recompute_cost`` are None).
    strategy : CanonicalStrategy or None
        Canonical model: the plan; its ``schedule.peak`` and ``schedule.recompute_cost`` are
        ``peak`` and ``recompute_cost``. None for the general model.
    recomputed : ndarray of int64, shape (n,), or None
        General model: runs per node id beyond the first. None for the canonical model.
    seconds : float
        Wall time, model building included.
    size : tuple of int
        (columns, rows) of the MILP as built.
    coarse : bool
        Whether the coarse relaxation was built (see `coarse` of :func:`optimum`).
    """

    model: str
    budget: int | None
    peak: int | None
    recompute_cost: int | None
    lower_bound: int
    status: str
    strategy: CanonicalStrategy | None = None
    recomputed: IntArray | None = None
    seconds: float = 0.0
    size: tuple[int, int] = (0, 0)
    coarse: bool = False


def optimum(graph: Graph, budget: Number | None = None, model: str = "canonical",
            time_limit: Number | None = None, *, coarse: bool | str = "auto") -> Optimum:
    """Return the least peak, or the least recomputation within `budget`, of `model`'s plans.

    Parameters
    ----------
    graph : Graph
        With execution facts (``chainer_ext.trace``) or the defaults.
    budget : int or float, optional
        Bytes of the whole step (``schedule.peak``); a float is rounded down. None: minimise
        the peak, then the recomputation at that peak.
    model : {"canonical", "general"}
        Canonical strategies (lower-set sequences, as the planner's) or general recomputation
        (see the module docstring).
    time_limit : float, optional
        Seconds for the whole call; past it the result has ``status="time_limit"``.
    coarse : {"auto", True, False}
        Build the coarse relaxation, whose recomputations have no positions of their own (memory
        counted at forwards and backwards only; about 2n positions), instead of the fine model;
        "auto": where the fine one would have more than ``FINE_LIMIT`` (300,000) slot
        positions. The canonical model stays exact either way (each solution is scheduled and
        cut off where the schedule counts more), but converges slower; the general model's
        coarse optimum is only a lower bound (``status="bound"``).

    Returns
    -------
    Optimum

    Raises
    ------
    ArgumentTypeError
        If `graph` is not a Graph, or `budget` or `time_limit` is not a number.
    ArgumentError
        If `model` is unknown, `budget` or `time_limit` is out of range, or the graph's facts
        hold bytes outside it (``ExecutionFacts.outside_forward``, ``outside_backward``).
    InfeasibleBudgetError
        If no plan of the model fits `budget`; ``min_budget`` is the model's least peak in
        bytes (None when the time limit passed before it was found).
    SolverMissingError
        If ``highspy`` is not installed (``pip install 'lowerset[optimum]'``).

    References
    ----------
    .. [1] Kusumoto et al., NeurIPS 2019, Sec. 3.
    .. [2] Jain et al., Checkmate, MLSys 2020, Sec. 4.

    Examples
    --------
    >>> g = ls.Graph.chain(4, memory=10)
    >>> best = ls.optimum(g)                                   # doctest: +SKIP
    >>> best.peak, best.recompute_cost, best.status            # doctest: +SKIP
    (60, 1, 'optimal')
    """
    check_graph(graph, "graph")
    if graph.has_facts and (graph.facts.outside_forward or graph.facts.outside_backward):
        raise ArgumentError("the graph's facts hold bytes outside it (outside_forward, "
                            "outside_backward: a trace of an FSDP2 model), which the MILPs "
                            "do not count; plan it with lowerset.min_peak or solve")
    if model not in OPTIMUM_MODELS:
        raise ArgumentError(f"unknown model {model!r}; expected one of {OPTIMUM_MODELS}")
    if budget is not None:
        budget = check_budget(budget)
    limit = check_time_limit(time_limit)
    run: Callable[..., dict[str, Any]]
    if model == "canonical":
        from .canonical import solve_canonical as run
    else:
        from .general import solve_general as run
    if coarse not in ("auto", True, False):
        raise ArgumentError(f"coarse must be 'auto', True or False, got {coarse!r}")
    res = run(graph, budget, limit, coarse=coarse)
    if res["status"] == "infeasible" and budget is None:  # pragma: no cover - a solver failure
        raise LowersetError(f"HiGHS found the {model} model of a feasible step infeasible")
    if res["status"] == "infeasible" and budget is not None:
        least = run(graph, None, limit, coarse=coarse)
        raise InfeasibleBudgetError(budget, least["peak"] if least["status"] == "optimal"
                                    else None, method=f"optimum/{model}")
    return Optimum(model=model, budget=budget, peak=res["peak"],
                   recompute_cost=res["cost"], lower_bound=res["bound"],
                   status=res["status"], strategy=res.get("strategy"),
                   recomputed=res.get("recomputed"), seconds=res["seconds"],
                   size=(res["cols"], res["rows"]), coarse=res["coarse"])
