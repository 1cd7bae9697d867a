"""The planners: exact DP (Sec. 4.2), approximate DP (Sec. 4.3), time- and memory-centric modes
(Sec. 4.4), and the minimal feasible budget.

The public functions validate their input, build the family of lower sets with its per-set
statistics (:func:`lowerset.lowersets.family`), run the kernels of :mod:`lowerset._kernels` in
blocks (so that a time limit can stop them) and turn the back-pointers into a
:class:`~lowerset.strategy.CanonicalStrategy`.
"""

from __future__ import annotations

import concurrent.futures
import threading
from typing import Literal, NamedTuple, overload

import numpy as np

from . import _kernels, _limits
from ._typing import Number
from ._validate import check_budget, check_choice, check_count, check_time_limit, requires_graph
from .exceptions import ArgumentError, InfeasibleBudgetError, LowersetError, SearchLimitError
from .graph import Graph
from .lowersets import (
    DEFAULT_MAX_LOWER_SETS,
    _contracted_count,
    _count,
    family,
    landmarks,
    windowed,
    windowed_family,
)
from .strategy import CanonicalStrategy

__all__ = ["min_budget", "resolve_method", "MODES", "METHODS", "AUTO"]

MODES = ("time", "memory")
METHODS = ("exact", "approx", "ordered", "contracted")
#: The method that picks "contracted" where the graph's contracted family has at most
#: ``max_lower_sets`` lower sets, else "approx" (:func:`resolve_method`).
AUTO = "auto"
# the families whose DP searches every lower set of a graph (of G, of its quotient)
_EXHAUSTIVE = ("exact", "contracted")
#: On a graph of at least this many nodes, the DP over every family but "exact" is windowed
#: (:func:`lowerset.lowersets.windowed`): a transition adds at most WINDOW_NODES nodes or joins
#: two of LANDMARKS landmark lower sets, and each time-centric front is thinned to the lower
#: convex hull of each of its runs of overhead (:func:`_kernels.thin_front`). Below it the
#: families' DP is the paper's, unchanged. Not in the paper: an approximation of this library,
#: because both the pairs of sets and a time-centric front grow with a stack's depth (on the
#: resnet family at 2,511 nodes a pass at the least budget does a third of the work
#: time-centric, a fifth memory-centric; ``tests/test_windowed.py``). Its distance to the
#: exact search: ``examples/bench_quality.py``.
WINDOWED_NODES = 2_000
WINDOW_NODES = 64
LANDMARKS = 1_024
#: The contracted family (every lower set of the quotient, up to ``max_lower_sets``, where the
#: pruned and ordered families hold at most 3n + 2 sets) is windowed from this many nodes on:
#: from there, traced transformer stacks (GPT-like at 12 layers, LLaMA-style at 8) spend
#: seconds a call on its unwindowed time-centric fronts.
WINDOWED_CONTRACTED_NODES = 500

# first overhead cap of the time-centric iterative deepening, in cost units
_FIRST_TCAP = 4
# With the A* bound lb0 of the empty set, the deepening starts at lb0 times the ratio of the
# optimum to lb0 in the family's last pass, times this margin; a priced bound's first pass in
# a family, with no ratio yet, takes the ratio 1 (its lb0 lies a few per cent below the
# optimum: see the manual's page on how the planner searches). A pass's work grows with its
# cap's excess over the optimum, and a start that fails goes on 4x its excess over lb0
# (:func:`_next_cap`), so the margin is tight: neighbouring budgets' ratios mostly differ by
# less than 1%.
_RATIO_MARGIN = 1.01
# time_front runs one pass at its overhead bound, not the deepening from its start, where the
# start lies at least this share of the bound: the pass at the bound reads at most a quarter
# more, and a start that fails costs a whole second pass (the front is the same either way)
_JUMP_SHARE = 0.8
# multipliers of the cache in the time-centric DP's A* bound (:func:`_multipliers`), used on a
# family where a pass has read _PRICES_PAY times its scan, for caps of at least _BOUND_MIN_CAP
# cost units per multiplier and _SLACK times the bound without them (:func:`_a_star_bound`)
_BOUND_MULTIPLIERS = 64
_PRICES_PAY = 32
_BOUND_MIN_CAP = 8
_SLACK = 1.125
# a family whose last priced bound of ∅ lies below 1 / _WEAK_PRICES of its pass's optimum
# prices the cache no more: such a bound cuts few states and its sums cost a tenth to a third
# of a pass (the GPT-like stack traced at 6 layers: a bound of 69-120 below optima of 4,736-
# 11,375 leaves a pass's work the same; its sums take 8.8 s at 24 layers beside a 29 s pass)
_WEAK_PRICES = 8
# sums with multipliers kept per family, and how far above a budget they may serve it
_BOUNDS_KEPT = 4
_BOUND_REUSE = 0.05
_BOUNDS_LOCK = threading.Lock()
# bytes of one DP front entry: four int64 arrays (two values and two back-pointers)
_ENTRY_BYTES = 32
# the minimal-budget DP's cut-off grows by this factor a pass (:func:`_least_peak`)
_CUTOFF_GROWTH = 1.5
# a DP pass runs a size class's sets in two halves at once (:func:`_drive`) where their work
# is at least 1 / _SPLIT_SHARE of a chunk's (a chunk takes about 5 ms; handing a half to the
# other thread and back takes tens of microseconds)
_SPLIT_SHARE = 20


def _check_method(method):
    return check_choice(method, "method", METHODS)


@requires_graph
def resolve_method(G: Graph, method: str, max_lower_sets: int = DEFAULT_MAX_LOWER_SETS,
                   time_limit: Number | None = None) -> str:
    """Return `method`, with "auto" replaced by "contracted" where the quotient of `G`
    (:func:`lowerset.lowersets.contraction`) has at most `max_lower_sets` lower sets, else by
    "approx" (the pruned family, Sec. 4.3).

    The lower sets are counted without being stored, and the count stops at the limit.

    Parameters
    ----------
    G : Graph
    method : {"auto", "exact", "approx", "ordered", "contracted"}
    max_lower_sets : int
        >= 1.
    time_limit : float, optional
        Seconds for the count.

    Returns
    -------
    {"exact", "approx", "ordered", "contracted"}
        `method` itself unless it is "auto".

    Raises
    ------
    ArgumentError
        If `method` is unknown or `max_lower_sets` < 1.
    SearchLimitError
        If the time limit passes while counting (``limit="time_limit"``).

    Examples
    --------
    >>> ls.dp.resolve_method(ls.Graph.chain(4), "auto")
    'contracted'
    """
    _check_any_method(method)
    if method != AUTO:
        return method
    return _resolve(G, method, check_count(max_lower_sets, "max_lower_sets"),
                    _limits.Deadline(check_time_limit(time_limit)))


def _check_any_method(method):
    return check_choice(method, "method", METHODS + (AUTO,))


def _resolve(G, method, max_lower_sets, deadline):
    """:func:`resolve_method` with checked arguments and a running deadline."""
    if method != AUTO:
        return method
    try:
        _contracted_count(G, max_lower_sets, deadline)
    except SearchLimitError as e:
        if e.limit != "max_lower_sets":
            raise
        return "approx"
    return "contracted"


def _check_size(G, method, max_lower_sets, deadline):
    """Raise SearchLimitError where `method` searches more lower sets than `max_lower_sets`
    (the count is cached: a cached family or answer is checked too)."""
    if method == "exact":
        _count(G, max_lower_sets, deadline)
    elif method == "contracted":
        _contracted_count(G, max_lower_sets, deadline)


def _check_mode(mode):
    return check_choice(mode, "mode", MODES)


def same_families(G: Graph, max_lower_sets: int = DEFAULT_MAX_LOWER_SETS,
                  deadline: _limits.Deadline = _limits.NO_DEADLINE,
                  method: str = "exact") -> bool:
    """Whether the family of `method` ("exact": all lower sets, Sec. 4.2; "contracted") is the
    pruned one (Sec. 4.3): the same sets in the same order, so that every DP pass over one
    gives the other's result (each lower set of G is ∅, V or the ancestors of one node:
    chains, DenseNet's blocks, a U-Net without parallel branches). Cached per graph.

    Parameters
    ----------
    G : Graph
        The graph.
    max_lower_sets : int
        Raise instead of enumerating more lower sets than this.
    deadline : Deadline
        When to stop (the planner call's time limit).
    method : {"exact", "contracted"}
        The family compared with the pruned one.

    Raises
    ------
    SearchLimitError
        If the family has more than `max_lower_sets` lower sets, or the deadline passes.
    """
    cache = _cache(G)
    key = ("same", method, max_lower_sets)
    if key not in cache:
        approx = _get_family(G, "approx", max_lower_sets, deadline)
        _check_size(G, method, max_lower_sets, deadline)
        cache[key] = np.array_equal(_get_family(G, method, max_lower_sets, deadline).sets,
                                    approx.sets)
    return cache[key]


def _cache(G):
    """The planner's per-graph cache (a Graph is immutable, so it never goes stale).

    It lives in ``G.__dict__["_family_cache"]``, which ``examples/bench_planner.py`` clears to
    time cold calls.
    """
    return G.__dict__.setdefault("_family_cache", {})


def _get_family(G, method, max_lower_sets, deadline):
    cache = _cache(G)
    fam = cache.get(method)
    if fam is None:
        fam = family(G, method, max_lower_sets, deadline)
        if G.n >= windowed_from(method):
            marks = cache.get("landmarks")
            if marks is None:   # from the pruned family, a subfamily of the others
                base = fam if method == "approx" else _get_family(G, "approx", max_lower_sets,
                                                                  deadline)
                marks = cache["landmarks"] = landmarks(base, LANDMARKS)
            fam = windowed(fam, marks, WINDOW_NODES)
        cache[method] = fam
    else:
        _check_size(G, method, max_lower_sets, deadline)  # for a cached family too
    return fam


def windowed_from(method: str) -> int | float:
    """The least graph size (nodes) from which the DP over the family of `method` is windowed
    (:data:`WINDOWED_NODES`, :data:`WINDOWED_CONTRACTED_NODES`; inf for "exact", never).

    Parameters
    ----------
    method : {"exact", "approx", "ordered", "contracted"}

    Returns
    -------
    int or float
    """
    if method == "exact":
        return float("inf")
    return WINDOWED_CONTRACTED_NODES if method == "contracted" else WINDOWED_NODES


class _EntryCap:
    """The most DP front entries one run may hold. It starts at
    :data:`lowerset._limits.SMALL_ALLOCATION` bytes (or the `current` capacity) and is raised
    once, to what the available memory allows, when the fronts outgrow it."""

    def __init__(self, current):
        self.value = max(int(current), _limits.SMALL_ALLOCATION // _ENTRY_BYTES)
        self.final = False

    def grow(self, fam, used):
        """Raise the cap to what the memory allows; SearchLimitError if it cannot grow."""
        if not self.final:
            self.final = True
            cap = _limits.memory_cap()
            new = np.iinfo(np.int64).max if cap is None else cap // _ENTRY_BYTES
            if new > self.value:
                self.value = new
                return
        raise SearchLimitError(
            f"the DP fronts outgrew the memory available ({used} entries of {_ENTRY_BYTES} "
            f"bytes over {fam.sets.shape[0]} lower sets); use method='approx' or a smaller "
            "max_lower_sets", limit="memory")


def _drive(fam, deadline, step, what, entry_cap, halves=None):
    """Run ``step(lo, work_budget, max_entries) -> (b_next, work, status, used)`` over the
    target sets 1..s-1 in chunks of about :data:`lowerset._limits.CHUNK_SECONDS`, checking
    `deadline` between them. A step that stops for memory (``STATUS_MEMORY``, set ``b_next``
    unfinished) is resumed at ``b_next`` once `entry_cap` has grown, or raises.

    With ``halves(lo, mid, hi, max_entries)`` (same result, or None where it cannot run), the
    sets of one size class whose work is worth a second thread (at least 1 /
    :data:`_SPLIT_SHARE` of a chunk's, by the work per set of the chunk before) run as two
    halves at once: a set reads only
    the fronts of smaller sets (:func:`_kernels.dp_fronts`), so neither half reads the other."""
    s = fam.sets.shape[0]
    lo = 1
    chunk = _limits.Chunker(initial=200_000)
    ends = None if halves is None else np.searchsorted(fam.class_start, fam.class_start, "right")
    per_set = 0
    while lo < s:
        budget = chunk.start()
        out = None
        if per_set > 0 and ends is not None:   # per_set > 0: halves, so ends, are given
            hi = min(int(ends[lo]), lo + 2 * max(1, budget // per_set))
            if hi - lo >= 2 and (hi - lo) * per_set * _SPLIT_SHARE >= budget:
                out = halves(lo, (lo + hi) // 2, hi, entry_cap.value)
        b, work, status, used = out or step(lo, budget, entry_cap.value)
        chunk.done(work)
        if halves is not None and b > lo:
            per_set = max(1, work // (b - lo))
        lo = b
        if status != _kernels.STATUS_OK:
            entry_cap.grow(fam, used)
        if lo < s:
            deadline.check(lambda: f"{what} ({lo} of {s} lower sets done)")


def _trace_back(G, fam, fpa, fpe, entry):
    """The sequence ending at front `entry` of V, as the 0-based segment of each node (int64,
    shape (n,))."""
    path = []
    a, e = fam.sets.shape[0] - 1, entry
    while a > 0:
        path.append(a)
        a, e = fpa[e], fpe[e]
    return _kernels.segments_of_path(fam.sets, np.array(path[::-1], dtype=np.int64), G.n)


def _new_fronts(fam):
    """Empty DP fronts: per-set ranges and scan keys (see :func:`_kernels.dp_fronts`), two value
    arrays plus back-pointers (int64).

    The front of the empty set (index 0) holds one root entry of zeros: overhead 0, nothing
    cached, peak 0; its keys are 0.
    """
    s = fam.sets.shape[0]
    fstart = np.zeros(s, dtype=np.int64)
    fend = np.zeros(s, dtype=np.int64)
    fend[0] = 1
    keys = np.full((2, s), _kernels.INF, dtype=np.int64)
    keys[:, 0] = 0
    cap = max(1024, 4 * s)
    return (fstart, fend, keys, np.zeros(cap, dtype=np.int64), np.zeros(cap, dtype=np.int64),
            np.full(cap, -1, dtype=np.int64), np.full(cap, -1, dtype=np.int64))


class _Bound(NamedTuple):
    """The A* bound of the time-centric DP at one eq. (2) budget (:func:`_remaining_bound`)."""

    lb: np.ndarray    # int64, shape (s,): the bound of every state at a set (cost units)
    g: np.ndarray     # float64, shape (s, K): see :func:`_kernels.remaining_bound`
    lam: np.ndarray   # float64, shape (K,): its multipliers (cost units per byte)


_NO_LINES = (np.zeros((1, 0)), np.zeros(0))


def _multipliers(G, budget):
    """:data:`_BOUND_MULTIPLIERS` multipliers of the cache in the A* bound (cost units per
    byte): 0, then geometric from 1/100 to 10 times T(V) / budget, the overhead a byte of the
    budget saves when caching all of it would save all of T(V)."""
    scale = G.total_cost() / max(1, budget)
    return np.concatenate(([0.0], scale * np.geomspace(1e-2, 1e1, _BOUND_MULTIPLIERS - 1)))


_NO_MULTIPLIERS = np.zeros(1)


def _remaining_bound(fam, G, budget, deadline, lam=None):
    """:func:`_kernels.remaining_bound` over the whole family at eq. (2) budget `budget`
    (bytes): a :class:`_Bound`, a lower bound on the overhead a strategy adds after each set
    given what it caches there, and per set the least of it (at the least cache, M(∂(L)))."""
    s = fam.sets.shape[0]
    lam = _multipliers(G, budget) if lam is None else lam
    g = np.full((s, lam.shape[0]), np.inf)
    g[s - 1] = 0.0   # V
    hi = s - 1
    need_min = _kernels.suffix_need(fam.tot_m, fam.extra)
    chunk = _limits.Chunker(initial=200_000)
    while hi > 0:
        hi, work = _kernels.remaining_bound(
            0, hi, chunk.start(), np.int64(budget), lam, fam.sets, fam.span, fam.class_start,
            fam.tot_t, fam.tot_m, fam.bnd_bits, fam.bnd_t, fam.bnd_m, fam.bptr, fam.bidx,
            fam.extra, G.cost, G.memory, fam.chain, fam.bfirst, fam.bcum_t, fam.bcum_m,
            need_min, g)
        chunk.done(work)
        if hi > 0:
            deadline.check(lambda: f"in the DP's overhead bound at budget {budget} ({s - hi} of "
                           f"{s} lower sets done)")
    return _Bound(_least_bound(fam, g, lam, budget), g, lam)


def _least_bound(fam, g, lam, budget):
    """Per set, the bound of :func:`_kernels.remaining_bound`'s sums `g` for a state caching
    the least it can there, M(∂(L)), at eq. (2) budget `budget` (bytes): int64 cost units,
    shape (s,), INF where no sequence goes on (:func:`_kernels.least_bounds`)."""
    lb = np.empty(g.shape[0], dtype=np.int64)
    _kernels.least_bounds(g, lam, np.int64(budget), fam.bnd_m, lb)
    return lb


def _run_front_dp(G, fam, budget, maximize, deadline, tcap, bound=None):
    """One pass of :func:`_kernels.dp_fronts` over the family at eq. (2) budget `budget`
    (bytes) and overhead cap `tcap` (cost units), with the A* `bound` (a :class:`_Bound`) or
    none: (fstart, fend, ft, fm, fpa, fpe, capped, work). Where the family is not a chain and
    :func:`lowerset._limits.pass_threads` allows two, its larger size classes run in two
    halves at once (:func:`_drive`); the fronts are those of one thread, entry for entry."""
    fstart, fend, keys, ft, fm, fpa, fpe = _new_fronts(fam)
    T = G.total_cost()
    arrays = f"the DP's work arrays over T(V) = {T} cost units"
    _limits.check_memory(3 * 8 * (T + 1), arrays, "scale the costs down")
    threads = 1 if fam.chain else _limits.pass_threads()
    if threads > 1:
        try:   # a second thread needs work arrays of its own
            _limits.check_memory(2 * 3 * 8 * (T + 1), arrays, "")
        except SearchLimitError:
            threads = 1
    scratch = _scratch(T)
    st = {"ft": ft, "fm": fm, "fpa": fpa, "fpe": fpe, "used": 1, "capped": 0, "work": 0}
    s = fam.sets.shape[0]
    lb, g, lam = (np.zeros(s, dtype=np.int64), *_NO_LINES) if bound is None else bound
    hull = windowed_family(fam) and not maximize

    def run(lo, hi, work_budget, max_entries, used, scratch):
        (ft, fm, fpa, fpe, used, _, capped, b, work, status) = _kernels.dp_fronts(
            lo, hi, work_budget, max_entries, np.int64(budget), maximize, np.int64(tcap), lb, g,
            lam, fam.sets, fam.span, fam.size, fam.class_start, fam.tot_t, fam.tot_m,
            fam.bnd_bits, fam.bnd_t, fam.bnd_m, fam.bptr, fam.bidx, fam.extra, G.cost, G.memory,
            fam.chain, fam.bfirst, fam.bcum_t, fam.bcum_m, fam.a_lo, fam.pre, fam.marks, fstart,
            fend, keys[0], keys[1],
            st["ft"], st["fm"], st["fpa"], st["fpe"], used, hull, *scratch)
        return (ft, fm, fpa, fpe), used, b, work, capped, status

    def step(lo, work_budget, max_entries):
        arrays, st["used"], b, work, capped, status = run(lo, s, work_budget, max_entries,
                                                          st["used"], scratch)
        st["ft"], st["fm"], st["fpa"], st["fpe"] = arrays
        st["capped"] += capped
        st["work"] += work
        return b, work, status, st["used"]

    mode = "memory-centric" if maximize else "time-centric"
    what = f"in the {mode} DP at budget {budget}"
    if threads < 2:
        _drive(fam, deadline, step, what, _EntryCap(ft.shape[0]))
    else:
        per_set = min(T, int(tcap)) + 1   # a front's entries: one per overhead at most
        with concurrent.futures.ThreadPoolExecutor(1) as helper:
            halves = _halves(st, fstart, fend, run, helper, (scratch, _scratch(T)), per_set)
            _drive(fam, deadline, step, what, _EntryCap(ft.shape[0]), halves)
    return fstart, fend, st["ft"], st["fm"], st["fpa"], st["fpe"], st["capped"], st["work"]


def _scratch(T):
    """The work arrays of one thread's DP pass over T(V) = `T` cost units
    (:func:`_kernels.dp_fronts`'s scratch_m, scratch_a, scratch_e)."""
    return (np.full(T + 1, _kernels.INF, dtype=np.int64), np.zeros(T + 1, dtype=np.int64),
            np.zeros(T + 1, dtype=np.int64))


def _halves(st, fstart, fend, run, helper, scratches, per_set):
    """:func:`_drive`'s ``halves`` for :func:`_run_front_dp`: the sets ``lo..mid`` run on the
    calling thread and ``mid..hi`` on `helper` at once, each with its own of the two
    `scratches`. The second half writes its entries after room for the first's (`per_set`
    entries a set at most), and they move down behind the first's when both end, so the entry
    arrays are those of one pass in order. None where that room would pass `max_entries`."""

    def halves(lo, mid, hi, max_entries):
        used = st["used"]
        base = used + (mid - lo) * per_set
        end = base + (hi - mid) * per_set
        if end > max_entries:
            return None
        if end > st["ft"].shape[0]:   # room for both, so that neither kernel reallocates
            new = min(max(2 * st["ft"].shape[0], end), max_entries)
            for k in ("ft", "fm", "fpa", "fpe"):
                st[k] = _kernels._grow(st[k], new)
        second = helper.submit(run, mid, hi, _kernels.INF, max_entries, base, scratches[1])
        try:
            first, used, _, work, capped, _ = run(lo, mid, _kernels.INF, max_entries, used,
                                                  scratches[0])
        finally:
            other, end2, _, work2, capped2, _ = second.result()
        if first[0] is not st["ft"] or other[0] is not st["ft"]:  # pragma: no cover
            raise LowersetError("internal error: a DP front outgrew the room made for it")
        st["capped"] += capped + capped2
        st["work"] += work + work2
        n = end2 - base
        for k in ("ft", "fm", "fpa", "fpe"):
            st[k][used:used + n] = st[k][base:end2]
        fstart[mid:hi] -= base - used
        fend[mid:hi] -= base - used
        st["used"] = used + n
        return hi, work + work2, _kernels.STATUS_OK, st["used"]

    return halves


def _min_budget_search(G, fam, upper, deadline):
    s = fam.sets.shape[0]
    fstart, fend, keys, fm, fp, fpa, fpe = _new_fronts(fam)
    st = {"fm": fm, "fp": fp, "fpa": fpa, "fpe": fpe, "used": 1}

    def step(lo, work_budget, max_entries):
        st["fm"], st["fp"], st["fpa"], st["fpe"], st["used"], _, b, work, status = \
            _kernels.peak_fronts(
                lo, s, work_budget, max_entries, np.int64(upper), fam.sets, fam.span,
                fam.class_start, fam.tot_t, fam.tot_m, fam.bnd_bits, fam.bnd_t, fam.bnd_m,
                fam.bptr, fam.bidx, fam.extra, G.cost, G.memory, fam.chain, fam.bfirst,
                fam.bcum_t, fam.bcum_m, fam.a_lo, fam.pre, fam.marks, fstart, fend, keys[0],
                st["fm"], st["fp"], st["fpa"], st["fpe"], st["used"])
        return b, work, status, st["used"]

    _drive(fam, deadline, step, "in the minimal-budget DP", _EntryCap(fm.shape[0]))
    fp, fpa, fpe = st["fp"], st["fpa"], st["fpe"]
    last = s - 1
    if fend[last] == fstart[last]:
        return None, None
    e = fstart[last] + int(np.argmin(fp[fstart[last]:fend[last]]))
    return int(fp[e]), _trace_back(G, fam, fpa, fpe, e)


def _least_peak(G, fam, upper, deadline):
    """(least eq. (2) peak over the sequences of `fam`, the segment of each node in one) or
    (None, None) where none peaks at most `upper` (bytes, a feasible peak).

    The DP drops every state whose peak passes its cut-off, and a state it drops is part of no
    sequence within the cut-off, nor dominates a state it keeps (a state dominating another
    peaks no higher): its fronts are those of the DP without a cut-off, less the states above
    it. So a pass whose cut-off is at least the least peak finds it and the same sequence, and
    a pass below it finds nothing. The cut-off starts at 2 max_v M(v), which no sequence goes
    below (the segment of v holds it twice in eq. (2)), and grows :data:`_CUTOFF_GROWTH` times
    a pass up to `upper`: the passes below the answer end early, and the last one keeps few
    states (at 2,500 nodes, a cut-off at 1.5 times the answer takes 2-20% of the time of one
    at 2 M(V))."""
    cutoff = 2 * int(G.memory.max(initial=0))
    while cutoff < upper:
        best, seg = _min_budget_search(G, fam, cutoff, deadline)
        if best is not None:
            return best, seg
        cutoff = int(cutoff * _CUTOFF_GROWTH) + 1
    return _min_budget_search(G, fam, upper, deadline)


def _min_budget(G, method, max_lower_sets, deadline):
    """(minimal budget, the segment of each node in its sequence) of `method`, cached on the
    graph."""
    cache = _cache(G)
    key = ("min_budget", method)
    if key in cache:
        _check_size(G, method, max_lower_sets, deadline)  # for a cached answer too
        return cache[key]
    fam = _get_family(G, method, max_lower_sets, deadline)
    # the one-segment strategy [V] peaks at 2 M(V); the pruned family bounds the exact one,
    # close enough that a cut-off below it would cost a pass more than it saves
    upper = 2 * G.total_memory()
    if method in _EXHAUSTIVE and fam.sets.shape[0] > G.n + 2:
        upper = min(upper, _min_budget(G, "approx", max_lower_sets, deadline)[0])
        best, seg = _min_budget_search(G, fam, upper, deadline)
    else:
        best, seg = _least_peak(G, fam, upper, deadline)
    if best is None:  # pragma: no cover - [V] is always feasible at 2 M(V)
        raise LowersetError("internal error: no feasible strategy found for the minimal budget")
    cache[key] = (best, seg)
    return best, seg


def _check_feasible(G, budget, method, max_lower_sets, deadline):
    """Raise InfeasibleBudgetError, before any DP at `budget`, if no strategy fits in it.

    The exact minimal budget is at most the approximate one (a subfamily), which is cheap: a
    budget at least that is feasible at once; otherwise the minimal budget of `method` decides
    (and is cached for the next call).
    """
    if (method in _EXHAUSTIVE
            and budget >= _min_budget(G, "approx", max_lower_sets, deadline)[0]):
        return
    mb = _min_budget(G, method, max_lower_sets, deadline)[0]
    if budget < mb:
        raise InfeasibleBudgetError(budget, mb, method=method)


@overload
def min_budget(G: Graph, method: str = ..., *, max_lower_sets: int = ...,
               time_limit: Number | None = ..., return_strategy: Literal[False] = ...) -> int: ...
@overload
def min_budget(G: Graph, method: str = ..., *, max_lower_sets: int = ...,
               time_limit: Number | None = ...,
               return_strategy: Literal[True]) -> tuple[int, CanonicalStrategy]: ...
@overload
def min_budget(G: Graph, method: str = ..., *, max_lower_sets: int = ...,
               time_limit: Number | None = ...,
               return_strategy: bool) -> int | tuple[int, CanonicalStrategy]: ...
@requires_graph
def min_budget(G: Graph, method: str = "exact", *,
               max_lower_sets: int = DEFAULT_MAX_LOWER_SETS, time_limit: Number | None = None,
               return_strategy: bool = False) -> int | tuple[int, CanonicalStrategy]:
    """Return the smallest budget B (bytes) for which a canonical strategy has peak <= B.

    Computed exactly over the family of `method` by a DP over states (L, m, p): m = M(U) cached
    bytes, p = the peak of eq. (2) so far, keeping the states not dominated in (m, p) and
    dropping those above a cut-off that grows from pass to pass until one reaches V (the
    pruned family; the exact one is cut off at the pruned family's answer). For "exact" the
    answer is min over all lower-set sequences of max_i M(i); B - 1 is infeasible. The answer
    is cached on the graph (a Graph is immutable).

    Parameters
    ----------
    G : Graph
    method : {"exact", "approx", "ordered", "contracted", "auto"}
        Search all lower sets (Sec. 4.2), the pruned family (Sec. 4.3), the ordered family
        (:func:`lowerset.ordered_lower_sets`) or the contracted one
        (:func:`lowerset.contracted_lower_sets`); "auto": as :func:`resolve_method` says.
    max_lower_sets : int
        For "exact" and "contracted": raise instead of searching more lower sets than this
        (>= 1). They are counted before any is stored.
    time_limit : float, optional
        Seconds (> 0) for the whole call, every phase included (counting and enumerating the
        lower sets, their statistics, the DP); past it, :class:`SearchLimitError` is raised
        within a few milliseconds.
    return_strategy : bool
        Also return a strategy attaining the minimum.

    Returns
    -------
    int, or (int, CanonicalStrategy) if `return_strategy`
        The minimal budget in bytes.

    Raises
    ------
    ArgumentTypeError
        If `G` is not a Graph, or `max_lower_sets` or `time_limit` has the wrong type.
    ArgumentError
        If `method` is unknown, `max_lower_sets` < 1, or `time_limit` is not positive.
    SearchLimitError
        If the graph has more than `max_lower_sets` lower sets (``limit="max_lower_sets"``),
        the time limit passes (``"time_limit"``), or the search would not fit in memory
        (``"memory"``).

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
    _check_any_method(method)
    max_lower_sets = check_count(max_lower_sets, "max_lower_sets")
    deadline = _limits.Deadline(check_time_limit(time_limit))
    method = _resolve(G, method, max_lower_sets, deadline)
    best, seg = _min_budget(G, method, max_lower_sets, deadline)
    if not return_strategy:
        return best
    strat = CanonicalStrategy.from_segments(G, seg, method=method, mode="min_budget",
                                            budget=best, planner_seconds=deadline.elapsed())
    if strat.peak_memory != best:  # pragma: no cover - kernel and eq. (2) disagree
        raise LowersetError(f"internal error: DP peak {best} != eq. (2) peak {strat.peak_memory}")
    return best, strat


@requires_graph
def solve(G: Graph, budget: Number | None = None, mode: str = "time", method: str = "exact", *,
          max_lower_sets: int = DEFAULT_MAX_LOWER_SETS, time_limit: Number | None = None,
          overhead_bound: int | None = None,
          overhead_guess: int | None = None) -> CanonicalStrategy:
    """Plan a canonical strategy within a memory budget (Sec. 4.2-4.4).

    Parameters
    ----------
    G : Graph
    budget : int or float, optional
        B in bytes: the strategy's peak memory (eq. 2) must not exceed it. A float (such as
        ``11.4e9``) is rounded down. None means the minimal feasible budget of `method`
        (:func:`min_budget`).
    mode : {"time", "memory"}
        "time" (time-centric): the least overhead (eq. 1) with peak <= B. "memory"
        (memory-centric, Sec. 4.4): the largest overhead with peak <= B, which yields coarse
        segments where liveness analysis frees most.
    method : {"exact", "approx", "ordered", "contracted", "auto"}
        "exact": DP over all lower sets, optimal for the paper's model (Sec. 4.2). "approx": DP
        over the pruned family {L_v} plus V (Sec. 4.3), O(T(V) #V^2). "ordered": DP over the
        pruned family and the prefixes of two topological orders
        (:func:`lowerset.ordered_lower_sets`), at most 3 #V + 2 sets. "contracted": DP over the
        lower sets that keep each memoryless node with its input, and the pruned sets
        (:func:`lowerset.contracted_lower_sets`). "auto": as :func:`resolve_method` says. On
        a graph of :func:`windowed_from` nodes or more (500 for "contracted", 2,000 for the
        others) the DP over every family but "exact" is windowed
        (:func:`lowerset.lowersets.windowed`), so only "exact" is then optimal over its
        family.
    max_lower_sets : int
        For "exact" and "contracted": raise instead of searching more lower sets than this
        (>= 1). They are counted before any is stored; the default keeps one exact DP pass to
        seconds.
    time_limit : float, optional
        Seconds (> 0) for the whole call, every phase included; past it,
        :class:`SearchLimitError` is raised within a few milliseconds.
    overhead_bound : int, optional
        An overhead (cost units) that some strategy within `budget` is known to reach (for
        instance the optimum at a smaller budget). Time-centric mode: the iterative deepening
        on the overhead cap stops at it. Memory-centric mode: the states that cannot reach it
        are dropped (:func:`_kernels.dp_fronts`). The result is the same, found faster.
    overhead_guess : int, optional
        Time-centric mode: a guess of the optimum (cost units). The deepening starts at it (at
        most `overhead_bound`) instead of at 4 cost units, or below it where the A* bound
        points lower; the result is the same, found faster when the guess is close.

    Returns
    -------
    CanonicalStrategy
        With ``overhead`` (cost units), ``peak_memory`` (bytes) and ``lower_sets``.

    Raises
    ------
    ArgumentTypeError
        If `G` is not a Graph, `budget` is not a number (a bool or a string, say), or
        `max_lower_sets` or `time_limit` has the wrong type.
    ArgumentError
        If `mode` or `method` is unknown, `budget` is negative, NaN or infinite,
        `max_lower_sets` < 1, `time_limit` is not positive, or (memory-centric mode) no
        strategy within `budget` reaches `overhead_bound`.
    InfeasibleBudgetError
        If no canonical strategy of the family fits in `budget`; carries ``min_budget``. This
        is found before the DP runs at `budget`.
    SearchLimitError
        If the graph has more than `max_lower_sets` lower sets, the time limit passes, or the
        search would not fit in memory (``limit`` says which).

    Notes
    -----
    An exact call with a budget below the approximate method's minimal budget first computes
    the exact minimal budget (cached on the graph), so an infeasible budget never costs a DP at
    that budget.

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
    >>> ls.dp.solve(g, budget=50.9).budget
    50
    """
    _check_mode(mode)
    _check_any_method(method)
    if budget is not None:
        budget = check_budget(budget)
    max_lower_sets = check_count(max_lower_sets, "max_lower_sets")
    deadline = _limits.Deadline(check_time_limit(time_limit))
    method = _resolve(G, method, max_lower_sets, deadline)
    if budget is None:
        budget = _min_budget(G, method, max_lower_sets, deadline)[0]
    else:
        _check_feasible(G, budget, method, max_lower_sets, deadline)
    fam = _get_family(G, method, max_lower_sets, deadline)
    maximize = mode == "memory"
    fstart, fend, ft, fpa, fpe = _final_front(G, fam, method, budget, maximize, deadline,
                                              overhead_bound, start=overhead_guess)
    last = fam.sets.shape[0] - 1
    ts = ft[fstart[last]:fend[last]]
    e = fstart[last] + int(np.argmax(ts) if maximize else np.argmin(ts))
    return _strategy(G, fam, fpa, fpe, e, ft[e], method=method, mode=mode, budget=budget,
                     planner_seconds=deadline.elapsed())


def _final_front(G, fam, method, budget, maximize, deadline, overhead_bound=None, start=None,
                 whole_front=False):
    """Run the DP of Sec. 4.2 at eq. (2) budget `budget` (feasible) until the front of V is
    reached; returns the arrays (fstart, fend, ft, fpa, fpe) of :func:`_kernels.dp_fronts`.
    Time-centric: the iterative deepening on the overhead cap starts at `start` (cost units;
    default :data:`_FIRST_TCAP`), grows 4x a pass and stops at `overhead_bound` (a pass capped
    there reaches V); states that cannot reach V within the cap are dropped as they appear
    (A*, :func:`_a_star_bound`). The bound costs a scan over all pairs of sets, so it is
    computed only on a family (`method`) where some pass has read more front entries than its
    scan: there it cuts the fronts, elsewhere the scan's own keys already do; its prices of the
    cache (64 sums per pair) only where some pass has read :data:`_PRICES_PAY` times more.

    With `whole_front` the caps are those alone (less those below the bound of ∅, where no
    sequence reaches V), so the front of V holds the states up to the same cap whatever the
    bound. Without it only the optimum is wanted, and the caps follow the bound
    (:func:`_start_at_bound`); the optimum and its lower sets do not depend on the caps."""
    # eq. (2) never exceeds about 6 M(V) <= 6 * 2**56 bytes: a larger budget is no constraint
    dp_budget = min(budget, _kernels.INF)
    last = fam.sets.shape[0] - 1
    T = G.total_cost()
    # Time-centric: iterative deepening on an overhead cap (exact, see dp_fronts); the fronts,
    # and so the work, shrink to the cap. Memory-centric fronts are narrow: no cap.
    # An overhead some strategy is known to reach ends the deepening there (time-centric), or
    # drops the states that cannot reach it (memory-centric).
    cap_max, bound, tcap = T, None, T
    if maximize and overhead_bound is not None:
        bound = _floor(fam, T, overhead_bound)
    elif not maximize:
        cap_max, tcap = _deepening_start(T, overhead_bound, start)
    guess = tcap
    pays, prices, cache = ("remaining bound pays", method), ("prices pay", method), _cache(G)
    weak = ("prices weak", method)
    scan = int(fam.class_start.sum())
    ratio_key, base, failed = None, 0, -1
    while True:
        # the caps the pass may reach, for the prices of the cache (0: none)
        reach = (cap_max if whole_front else tcap) if cache.get(prices) and not cache.get(
            weak) else 0
        if not maximize and cache.get(pays) and (bound is None or (
                bound.lam.shape[0] == 1 and _priced_pays(reach, bound))):
            bound = _a_star_bound(G, fam, method, dp_budget, reach, deadline, bound)
            if whole_front:
                while tcap < min(bound.lb[0], cap_max):
                    tcap = _deeper(tcap, 0, cap_max)   # a cap below the bound of ∅ fails
            else:
                ratio_key = ("bound ratio", method, bound.lam.shape[0])
                tcap, base = _start_at_bound(bound, tcap, cap_max, failed, cache.get(ratio_key))
        fstart, fend, ft, fm, fpa, fpe, capped, work = _run_front_dp(
            G, fam, dp_budget, maximize, deadline, tcap, bound)
        if work > 2 * scan:
            cache[pays] = True
        if work > _PRICES_PAY * scan:
            cache[prices] = True
        # done when V is reached, or when the cap cut nothing (then no cap can help)
        if fend[last] > fstart[last] or tcap >= T or capped == 0:
            break
        if tcap >= cap_max:  # the bound was not reached after all: deepen to T
            cap_max = T
        failed = tcap
        tcap = _next_cap(tcap, base, cap_max, guess)
    if fend[last] == fstart[last] and maximize and overhead_bound is not None:
        raise ArgumentError(f"overhead_bound={overhead_bound}: no strategy within budget "
                            f"{budget} reaches it (the memory-centric DP keeps only those "
                            "that do)")
    if fend[last] == fstart[last]:  # pragma: no cover - _check_feasible ruled this out
        raise LowersetError(f"internal error: budget {budget} passed the feasibility check, but "
                            "the DP found no strategy")
    optimum = int(ft[fstart[last]:fend[last]].min())
    if ratio_key is not None and base > 0:
        cache[ratio_key] = optimum / base
    if bound is not None and bound.lam.shape[0] > 1:
        cache[weak] = _WEAK_PRICES * bound.lb[0] < optimum
    return fstart, fend, ft, fpa, fpe


def _deepening_start(T, overhead_bound, start):
    """(largest cap, first cap) of the time-centric deepening (cost units): the largest is
    `overhead_bound` (an overhead some strategy reaches) or T(V) = `T`, the first `start` or
    :data:`_FIRST_TCAP`, at most the largest."""
    cap_max = T if overhead_bound is None else min(T, max(0, int(overhead_bound)))
    return cap_max, min(cap_max, max(_FIRST_TCAP, int(start or 0)))


def _floor(fam, T, overhead):
    """The memory-centric DP's cut (:func:`_kernels.dp_fronts`'s `lb`) for a known reachable
    `overhead` (cost units): per set L, the least overhead from which a sequence can still
    reach it, ``T(L) - (T(V) - overhead)``."""
    return _Bound(fam.tot_t - (T - int(overhead)), *_NO_LINES)


def _start_at_bound(bound, tcap, cap_max, failed, ratio):
    """(overhead cap, base) of the time-centric deepening once its A* `bound` is known (cost
    units): the base is the bound of ∅, ``lb0`` (no sequence recomputes less); the cap is at
    least ``lb0`` and above the last cap that `failed`, and at most ``lb0`` times `ratio` (the
    optimum over ``lb0`` in the family's last pass with this kind of bound, or None: 1 for a
    bound that prices the cache, none for one that does not) times :data:`_RATIO_MARGIN`, or
    the cap so far `tcap`."""
    base = min(cap_max, int(bound.lb[0]))
    if ratio is None and bound.lam.shape[0] > 1:
        ratio = 1.0
    if base > 0 and ratio:
        tcap = min(tcap, int(base * ratio * _RATIO_MARGIN) + 1)
    return max(tcap, base, failed + 1), base


def _next_cap(tcap, base, cap_max, guess):
    """The overhead cap after a pass capped at `tcap` failed to reach V (cost units): below the
    caller's `guess`, the guess, or with a bound of ∅ `base` > 0 (a start from the ratio of
    an earlier pass, :func:`_start_at_bound`) the deeper cap if that is lower; at or above the
    guess, :func:`_deeper`."""
    deeper = _deeper(tcap, base, cap_max)
    if tcap >= guess:
        return deeper
    return min(deeper, guess) if base > 0 else min(cap_max, guess)


def _deeper(tcap, base, cap_max):
    """The iterative deepening's next overhead cap: its excess over `base` 4x (cost units)."""
    return min(cap_max, base + 4 * max(_FIRST_TCAP, tcap - base))


def _priced_pays(tcap, scalar):
    """Whether the A* bound with multipliers of the cache pays for a pass capped at `tcap`
    (cost units), given the bound without them: where the cap is at least
    :data:`_BOUND_MIN_CAP` per multiplier and more than :data:`_SLACK` times that bound
    (elsewhere the fronts are short, or that bound cuts them already, and the multipliers
    would cost more than they save)."""
    return tcap >= _BOUND_MULTIPLIERS * _BOUND_MIN_CAP and tcap > scalar.lb[0] * _SLACK


def _a_star_bound(G, fam, method, budget, tcap, deadline, scalar=None):
    """The A* bound (:func:`_remaining_bound`) for a time-centric pass at eq. (2) budget
    `budget` (bytes) whose cap may reach `tcap` (cost units): without multipliers of the cache
    (`scalar`, when given), and with them where :func:`_priced_pays` and the sums kept fit in a
    quarter of :func:`lowerset._limits.memory_cap`.

    The sums with multipliers are kept for the family's last :data:`_BOUNDS_KEPT` budgets, and
    sums made at a budget at most :data:`_BOUND_REUSE` above `budget` serve it: a larger
    budget allows more transitions, so its sums are at most those at `budget` and the bound
    they give, with the room left under `budget`, is still a lower bound (a bisection's
    probes close in on one budget)."""
    if scalar is None:
        scalar = _remaining_bound(fam, G, budget, deadline, _NO_MULTIPLIERS)
    cap = _limits.memory_cap()
    kept_bytes = 8 * fam.sets.shape[0] * _BOUND_MULTIPLIERS * (_BOUNDS_KEPT + 1)
    if not _priced_pays(tcap, scalar) or (cap is not None and kept_bytes > cap // 4):
        return scalar   # the sums kept stay within a quarter of the memory a call may plan
    kept = _cache(G).setdefault(("bounds", method), {})
    with _BOUNDS_LOCK:
        near = [b for b in kept if budget <= b <= budget * (1 + _BOUND_REUSE)]
        if near:
            g, lam = kept[min(near)]
            return _Bound(_least_bound(fam, g, lam, budget), g, lam)
    bound = _remaining_bound(fam, G, budget, deadline)
    with _BOUNDS_LOCK:
        kept[budget] = (bound.g, bound.lam)
        while len(kept) > _BOUNDS_KEPT:
            del kept[next(iter(kept))]
    return bound


def _strategy(G, fam, fpa, fpe, e, overhead, **meta):
    """The strategy of front entry `e` of V, checked against eq. (1) and eq. (2)."""
    strat = CanonicalStrategy.from_segments(G, _trace_back(G, fam, fpa, fpe, e), **meta)
    if strat.overhead != overhead or strat.peak_memory > meta["budget"]:  # pragma: no cover
        raise LowersetError(
            f"internal error: DP overhead {overhead} vs eq. (1) {strat.overhead}, "
            f"eq. (2) peak {strat.peak_memory} vs budget {meta['budget']}")
    return strat


@requires_graph
def time_front(G: Graph, budget: Number, method: str = "exact", *,
               max_lower_sets: int = DEFAULT_MAX_LOWER_SETS, time_limit: Number | None = None,
               overhead_bound: int | None = None, overhead_floor: int = 0,
               start_at_bound: bool = False) -> list[CanonicalStrategy]:
    """Every strategy on the time-centric DP's final front at eq. (2) budget `budget`.

    The DP of :func:`solve` (``mode="time"``) ends with the states of V not dominated in
    (overhead, cached bytes); each is a canonical strategy within `budget`. The first has the
    least overhead (the result of :func:`solve`); the others recompute more and cache less,
    which a schedule with liveness analysis may turn into a lower peak. The iterative deepening
    (caps 4, 16, 64, ... cost units, at most `overhead_bound`) stops at the first cap that
    reaches V, so the front holds the states up to that cap.

    Errors and references as :func:`solve`.

    Parameters
    ----------
    G, budget, method, max_lower_sets, time_limit, overhead_bound
        As :func:`solve`; `budget` is required.
    overhead_floor : int, default 0
        An overhead (cost units) no strategy within `budget` goes below (the optimum at a
        larger budget): the deepening starts at twice it, which saves its first passes; the
        front then reaches up to that cap.
    start_at_bound : bool, default False
        With True, or where the deepening's start lies at least :data:`_JUMP_SHARE` of
        `overhead_bound`, one pass capped at `overhead_bound` (where it is close to the
        optimum: the optimum at a slightly smaller budget) replaces the deepening's passes,
        and its front is cut at the cap where the deepening stops: the same strategies (the
        states of overhead up to a cap, and their back-pointers, do not depend on how far
        above it a pass is capped; see :func:`_kernels.dp_fronts`).

    Returns
    -------
    list of CanonicalStrategy
        Overhead increasing (cost units), eq. (2) peak within `budget` (bytes).
    """
    _check_method(method)
    budget = check_budget(budget)
    max_lower_sets = check_count(max_lower_sets, "max_lower_sets")
    deadline = _limits.Deadline(check_time_limit(time_limit))
    _check_feasible(G, budget, method, max_lower_sets, deadline)
    fam = _get_family(G, method, max_lower_sets, deadline)
    T = G.total_cost()
    cap_max, first = _deepening_start(T, overhead_bound, 2 * int(overhead_floor))
    jump = overhead_bound is not None and (start_at_bound or first >= _JUMP_SHARE * cap_max)
    fstart, fend, ft, fpa, fpe = _final_front(G, fam, method, budget, False, deadline,
                                              overhead_bound, start=cap_max if jump else first,
                                              whole_front=True)
    last = fam.sets.shape[0] - 1
    stop = fend[last]
    if jump:   # the front of the deepening's last pass
        cut = _deepening_cap(first, cap_max, T, int(ft[fstart[last]]))
        stop = fstart[last] + int(np.searchsorted(ft[fstart[last]:stop], cut, "right"))
    return [_strategy(G, fam, fpa, fpe, e, ft[e], method=method, mode="time", budget=budget,
                      planner_seconds=deadline.elapsed())
            for e in range(fstart[last], stop)]


def _deepening_cap(first, cap_max, T, optimum):
    """The cap of the pass where :func:`_final_front`'s deepening over the whole front stops
    (cost units): its caps from `first` grow 4x up to `cap_max`, then to `T` (a cap below the
    A* bound of ∅ is skipped, but that bound is at most the `optimum`), and the first at or
    above the `optimum` reaches V."""
    cap = first
    while cap < optimum:
        if cap >= cap_max:
            cap_max = T
        cap = _deeper(cap, 0, cap_max)
    return cap
