"""The planners: exact DP (Sec. 4.2), approximate DP (Sec. 4.3), time- and memory-centric modes
(Sec. 4.4), and the minimal feasible budget.

The public functions validate their input, build the family of lower sets with its per-set
statistics (:func:`lowerset.lowersets.family`), run the kernels of :mod:`lowerset._kernels` in
blocks (so that a time limit can stop them) and turn the back-pointers into a
:class:`~lowerset.strategy.CanonicalStrategy`.
"""

import numbers
import time

import numpy as np

from . import _kernels
from .exceptions import InfeasibleBudgetError, LowersetError, SearchLimitError
from .lowersets import DEFAULT_MAX_LOWER_SETS, family, mask_of_bits
from .strategy import CanonicalStrategy

__all__ = ["min_budget", "MODES", "METHODS"]

MODES = ("time", "memory")
METHODS = ("exact", "approx")

# subset tests per kernel call: small enough that a time limit is checked every ~0.1 s
_WORK_PER_CALL = 20_000_000
# first overhead cap of the time-centric iterative deepening, in cost units
_FIRST_TCAP = 4


def _check_method(method):
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; expected one of {METHODS}")


def _check_mode(mode):
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {MODES}")


def _get_family(G, method, max_lower_sets):
    cache = G.__dict__.setdefault("_family_cache", {})
    key = (method, max_lower_sets if method == "exact" else None)
    if key not in cache:
        cache[key] = family(G, method, max_lower_sets)
    return cache[key]


def _blocks(fam, deadline, start):
    """Yield (lo, hi) ranges of target sets, raising SearchLimitError past the deadline."""
    s = fam.sets.shape[0]
    lo = 1
    while lo < s:
        work = 0
        hi = lo
        while hi < s and (hi == lo or work + fam.class_start[hi] <= _WORK_PER_CALL):
            work += fam.class_start[hi]
            hi += 1
        yield lo, hi
        if deadline is not None and time.perf_counter() > deadline:
            raise SearchLimitError(
                f"time limit of {deadline - start:.3g} s exceeded after {hi} of {s} lower sets",
                limit="time_limit")
        lo = hi


def _trace_back(G, fam, fpa, fpe, entry):
    chain = []
    a, e = fam.sets.shape[0] - 1, entry
    while a > 0:
        chain.append(mask_of_bits(fam.sets[a], G.n))
        a, e = fpa[e], fpe[e]
    return chain[::-1]


def _new_fronts(fam):
    """Empty DP fronts: per-set ranges and two value arrays plus back-pointers (int64).

    The front of the empty set (index 0) holds one root entry of zeros: overhead 0, nothing
    cached, peak 0.
    """
    s = fam.sets.shape[0]
    fstart = np.zeros(s, dtype=np.int64)
    fend = np.zeros(s, dtype=np.int64)
    fend[0] = 1
    cap = max(1024, 4 * s)
    return (fstart, fend, np.zeros(cap, dtype=np.int64), np.zeros(cap, dtype=np.int64),
            np.full(cap, -1, dtype=np.int64), np.full(cap, -1, dtype=np.int64))


def _run_front_dp(G, fam, budget, maximize, deadline, start, tcap=None):
    fstart, fend, ft, fm, fpa, fpe = _new_fronts(fam)
    used = 1
    T = G.total_cost()
    scratch_m = np.full(T + 1, _kernels.INF, dtype=np.int64)
    scratch_a = np.zeros(T + 1, dtype=np.int64)
    scratch_e = np.zeros(T + 1, dtype=np.int64)
    pairs = capped = 0
    tcap = T if tcap is None else tcap
    for lo, hi in _blocks(fam, deadline, start):
        ft, fm, fpa, fpe, used, p, c = _kernels.dp_fronts(
            lo, hi, np.int64(budget), maximize, np.int64(tcap), fam.sets, fam.size, fam.class_start, fam.tot_t,
            fam.tot_m, fam.bnd_bits, fam.bnd_t, fam.bnd_m, fam.bptr, fam.bidx, fam.extra, G.cost,
            G.memory, fstart, fend, ft, fm, fpa, fpe, used, scratch_m, scratch_a, scratch_e)
        pairs += p
        capped += c
    return fstart, fend, ft, fm, fpa, fpe, capped


def _min_budget_search(G, fam, upper, deadline, start):
    s = fam.sets.shape[0]
    fstart, fend, fm, fp, fpa, fpe = _new_fronts(fam)
    used = 1
    for lo, hi in _blocks(fam, deadline, start):
        fm, fp, fpa, fpe, used, _ = _kernels.peak_fronts(
            lo, hi, np.int64(upper), fam.sets, fam.class_start, fam.tot_t, fam.tot_m,
            fam.bnd_bits, fam.bnd_t, fam.bnd_m, fam.bptr, fam.bidx, fam.extra, G.cost, G.memory,
            fstart, fend, fm, fp, fpa, fpe, used)
    last = s - 1
    if fend[last] == fstart[last]:
        return None, None
    e = fstart[last] + int(np.argmin(fp[fstart[last]:fend[last]]))
    return int(fp[e]), _trace_back(G, fam, fpa, fpe, e)


def _deadline(time_limit):
    start = time.perf_counter()
    if time_limit is None:
        return None, start
    if (isinstance(time_limit, bool) or not isinstance(time_limit, numbers.Real)
            or not time_limit > 0 or time_limit != time_limit):
        raise ValueError(f"time_limit must be a positive number of seconds, got {time_limit!r}")
    return start + float(time_limit), start


def min_budget(G, method="exact", *, max_lower_sets=DEFAULT_MAX_LOWER_SETS, time_limit=None,
               return_strategy=False):
    """Return the smallest budget B (bytes) for which a canonical strategy has peak <= B.

    Computed exactly over the family of `method` by one DP over states (L, m, p): m = M(U) cached
    bytes, p = the peak of eq. (2) so far, keeping the states not dominated in (m, p). For
    "exact" the answer is min over all lower-set sequences of max_i M(i); B - 1 is infeasible.

    Parameters
    ----------
    G : Graph
    method : {"exact", "approx"}
        Search all lower sets (Sec. 4.2) or the pruned family (Sec. 4.3).
    max_lower_sets : int
        For "exact": raise instead of enumerating more lower sets than this.
    time_limit : float, optional
        Seconds; raise :class:`SearchLimitError` when the search takes longer.
    return_strategy : bool
        Also return a strategy attaining the minimum.

    Returns
    -------
    int, or (int, CanonicalStrategy) if `return_strategy`
        The minimal budget in bytes.

    Raises
    ------
    ValueError
        If `method` is unknown or `time_limit` is not positive.
    SearchLimitError
        If the graph has too many lower sets or the time limit passes.

    References
    ----------
    .. [1] Kusumoto et al., NeurIPS 2019, Sec. 4.4 (the minimal budget, found there by binary
       search) and eq. (2).

    Examples
    --------
    >>> g = ls.Graph.chain(4, memory=10)
    >>> ls.min_budget(g)
    50
    """
    _check_method(method)
    deadline, start = _deadline(time_limit)
    fam = _get_family(G, method, max_lower_sets)
    # the one-segment strategy [V] peaks at 2 M(V); the pruned family bounds the exact one
    upper = 2 * G.total_memory()
    if method == "exact" and fam.sets.shape[0] > G.n + 2:
        upper = min(upper, min_budget(G, "approx", time_limit=time_limit))
    best, chain = _min_budget_search(G, fam, upper, deadline, start)
    if best is None:  # pragma: no cover - [V] is always feasible at 2 M(V)
        raise LowersetError("internal error: no feasible strategy found for the minimal budget")
    if not return_strategy:
        return best
    strat = CanonicalStrategy(G, chain, method=method, mode="min_budget", budget=best,
                              planner_seconds=time.perf_counter() - start)
    if strat.peak_memory != best:  # pragma: no cover - kernel and eq. (2) disagree
        raise LowersetError(f"internal error: DP peak {best} != eq. (2) peak {strat.peak_memory}")
    return best, strat


def solve(G, budget=None, mode="time", method="exact", *, max_lower_sets=DEFAULT_MAX_LOWER_SETS,
          time_limit=None, overhead_bound=None):
    """Plan a canonical strategy within a memory budget (Sec. 4.2-4.4).

    Parameters
    ----------
    G : Graph
    budget : int, optional
        B in bytes: the strategy's peak memory (eq. 2) must not exceed it. None means the
        minimal feasible budget of `method` (:func:`min_budget`).
    mode : {"time", "memory"}
        "time" (time-centric): the least overhead (eq. 1) with peak <= B. "memory"
        (memory-centric, Sec. 4.4): the largest overhead with peak <= B, which yields coarse
        segments where liveness analysis frees most.
    method : {"exact", "approx"}
        "exact": DP over all lower sets, optimal for the paper's model (Sec. 4.2). "approx": DP
        over the pruned family {L_v} plus V (Sec. 4.3), O(T(V) #V^2).
    max_lower_sets : int
        For "exact": raise instead of enumerating more lower sets than this.
    time_limit : float, optional
        Seconds for the whole call; raise :class:`SearchLimitError` past it.
    overhead_bound : int, optional
        Time-centric mode: an overhead (cost units) that some strategy within `budget` is known
        to reach (for instance the optimum at a smaller budget). The search then drops the
        states above it in one pass; the result is the same, found faster.

    Returns
    -------
    CanonicalStrategy
        With ``overhead`` (cost units), ``peak_memory`` (bytes) and ``lower_sets``.

    Raises
    ------
    ValueError
        If `mode` or `method` is unknown, or `budget` is not a non-negative integer.
    InfeasibleBudgetError
        If no canonical strategy of the family fits in `budget`; carries ``min_budget``.
    SearchLimitError
        If the graph has too many lower sets, or the time limit passes.

    References
    ----------
    .. [1] Kusumoto et al., NeurIPS 2019, Sec. 4.2 (exact DP), 4.3 (approximate DP), 4.4
       (memory-centric strategy); Algorithm 1 in the appendix.

    Examples
    --------
    >>> g = ls.Graph.chain(4, memory=10)
    >>> s = ls.dp.solve(g, budget=50, mode="time")
    >>> s.overhead, s.peak_memory
    (1, 50)
    """
    _check_mode(mode)
    _check_method(method)
    if budget is not None:
        if isinstance(budget, bool) or not isinstance(budget, numbers.Integral) or budget < 0:
            raise ValueError(f"budget must be a non-negative integer number of bytes, got {budget!r}")
        budget = int(budget)
    deadline, start = _deadline(time_limit)
    if budget is None:
        budget = min_budget(G, method, max_lower_sets=max_lower_sets, time_limit=time_limit)
        if deadline is not None and time.perf_counter() > deadline:
            raise SearchLimitError(f"time limit of {time_limit:.3g} s exceeded", limit="time_limit")
    fam = _get_family(G, method, max_lower_sets)
    maximize = mode == "memory"
    # eq. (2) never exceeds about 6 M(V) <= 6 * 2**56 bytes: a larger budget is no constraint
    dp_budget = min(budget, _kernels.INF)
    last = fam.sets.shape[0] - 1
    T = G.total_cost()
    # Time-centric: iterative deepening on an overhead cap (exact, see dp_fronts); the fronts,
    # and so the work, shrink to the cap. Memory-centric fronts are narrow: no cap.
    tcap = T if maximize else min(T, _FIRST_TCAP)
    if overhead_bound is not None and not maximize:
        tcap = min(T, max(0, int(overhead_bound)))
    while True:
        fstart, fend, ft, fm, fpa, fpe, capped = _run_front_dp(G, fam, dp_budget, maximize,
                                                               deadline, start, tcap)
        # done when V is reached, or when the cap cut nothing (then no cap can help)
        if fend[last] > fstart[last] or tcap >= T or capped == 0:
            break
        tcap = min(T, 4 * tcap)
    if fend[last] == fstart[last]:
        remaining = None if deadline is None else max(deadline - time.perf_counter(), 1e-3)
        raise InfeasibleBudgetError(
            budget, min_budget(G, method, max_lower_sets=max_lower_sets, time_limit=remaining),
            method=method)
    ts = ft[fstart[last]:fend[last]]
    e = fstart[last] + int(np.argmax(ts) if maximize else np.argmin(ts))
    chain = _trace_back(G, fam, fpa, fpe, e)
    strat = CanonicalStrategy(G, chain, method=method, mode=mode, budget=budget,
                              planner_seconds=time.perf_counter() - start)
    if strat.overhead != ft[e] or strat.peak_memory > budget:  # pragma: no cover
        raise LowersetError(
            f"internal error: DP overhead {ft[e]} vs eq. (1) {strat.overhead}, "
            f"eq. (2) peak {strat.peak_memory} vs budget {budget}")
    return strat
