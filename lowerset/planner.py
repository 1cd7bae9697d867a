"""Plan for the memory a training step really uses: budgets in device bytes.

The paper's DP (:mod:`lowerset.dp`, Sec. 4.2-4.4) is exact for eq. (2), which charges ``2 M(V_i)``
per segment and leaves out parameters, gradients of parameters and every function's workspace.
Here a plan is judged by its schedule (:func:`lowerset.schedule`): its peak is the whole step's
device memory, resident bytes included, and its overhead is what the executor recomputes
(``Schedule.recompute_cost``: eq. (1) without the last segment, which the executor keeps, and
without the dropped values no backward step reads).

:func:`pareto` builds a pool of canonical strategies and keeps the trade-off front of (overhead,
peak); :func:`min_peak` is its least peak. The pool holds the strategy [V] (no recomputation),
Chen's sqrt(n), the plan of least eq. (2) peak (:func:`lowerset.min_budget`), selective
checkpointing's strategies (:func:`lowerset.baselines.selective_family`: segments ending at the
expensive nodes, whose outputs stay, with the cheap nodes between them recomputed), and the
paper's DP over the pruned family (Sec. 4.3) at a ladder of eq. (2) budgets from its minimal
budget to the eq. (2) peak of [V], in both modes: the time-centric DP gives the fine partitions
and the memory-centric one the coarse partitions that liveness analysis favours (the "trial
and error" of Sec. 4.4, done with the schedule). With ``method="ordered"`` the ordered family
(:func:`lowerset.ordered_lower_sets`) joins the ladder; with an exhaustive method ("exact": all
lower sets, Sec. 4.2; "contracted", the default's where it is small enough: the lower sets
that keep each memoryless node with its input, :func:`lowerset.contracted_lower_sets`) its
family joins the memory-centric ladder where it has at most 5,000 sets. The pool's DP passes
run on a thread per core (:func:`_run_chains`).
:func:`solve` takes the least overhead on that front within the budget, then searches the
time-centric DP's eq. (2) budget for the largest one whose plan still fits the device budget
(its overhead decreases as the eq. (2) budget grows): the ladder and a bisection above its
largest fitting budget over the pruned family, the same over the ordered family ("ordered"),
and with an exhaustive method a descent from the pruned family's answer over its family,
where every plan on the DP's final front (:func:`lowerset.dp.time_front`) is a candidate. With
an exhaustive method, :func:`pareto` then improves its least-peak plan and :func:`solve` its
answer by local search over lower-set sequences judged by the schedule
(:func:`lowerset.refine.refine`). These are searches, not an optimum over all lower-set
sequences. Each public call has one time limit (:func:`default_time_limit`): a step it cuts
ends, and the call returns the best plan found with a :class:`TimeLimitWarning`.
``min_peak(G, measure="activations")`` runs the same search on the graph with
:func:`lowerset.activation_facts`, the paper's memory (no parameters, their gradients or
workspace), and returns the plan on `G`. Asked (``solve(..., beyond_canonical=True)``),
:func:`solve` then searches dropped sets that no lower-set sequence gives
(:mod:`lowerset.dropsearch`).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import math
import threading
import warnings
from typing import Any, Literal, overload

from . import _limits, _progress, dp
from ._typing import Number
from ._validate import check_budget, check_graph, check_time_limit
from .baselines import chen_sqrtn, selective_family
from .dropsearch import search_dropped
from .dropset import DropSetStrategy
from .exceptions import ArgumentError, InfeasibleBudgetError, SearchLimitError, TimeLimitWarning
from .execution import activation_facts
from .graph import Graph
from .lowersets import DEFAULT_MAX_LOWER_SETS, _contracted_count, count_lower_sets
from .refine import refine
from .scheduling import _known_peak_and_cost, dropped_nodes
from .strategy import CanonicalStrategy

__all__ = ["solve", "min_peak", "pareto", "default_time_limit", "MODELS", "MEASURES",
           "LADDER_SIZE", "DEFAULT"]

#: The `time_limit` of the planner calls that means :func:`default_time_limit`.
DEFAULT = "default"
#: :func:`default_time_limit`: seconds up to DEFAULT_NODES nodes, and per node above.
DEFAULT_SECONDS = 8.0
DEFAULT_NODES = 2500
SECONDS_PER_NODE = 0.0067

#: How a budget is read: "executor" (whole-step device bytes, :func:`lowerset.schedule`) or
#: "paper" (eq. (2), the paper's DP).
MODELS = ("executor", "paper")

#: What :func:`min_peak` minimises: "step" (the whole step's device bytes) or "activations"
#: (the paper's memory: :func:`lowerset.activation_facts`).
MEASURES = ("step", "activations")

#: Eq. (2) budgets at which the paper's memory-centric DP adds candidates to the pool (the
#: time-centric DP: half as many).
LADDER_SIZE = 24

#: Bisection steps of :func:`solve` on the eq. (2) budget, each a time-centric DP call; the
#: ratio of the interval's ends shrinks to its 2**-BISECTION_STEPS power. The exact family's
#: search takes EXACT_BISECTION_STEPS, descending by DESCENT per step until a plan fits.
BISECTION_STEPS = 8
EXACT_BISECTION_STEPS = 4
DESCENT = 0.85
#: The search of :func:`solve` stops once a plan that fits overheads (eq. 1) at most one cost
#: unit or this fraction above the least overhead its further probes could reach.
STOP_GAP = 0.02

# each DP family's subfamilies, itself included: their optima bound its own (see _paper)
_SUBFAMILIES = {"approx": ("approx",), "ordered": ("approx", "ordered"),
                "exact": ("approx", "exact"), "contracted": ("approx", "contracted")}
# the methods whose DP searches every lower set of a family too large to list by hand (all of
# G's, or those of its quotient): their plans are improved by local search
_EXHAUSTIVE = ("exact", "contracted")

# the exact family's DP runs at the whole ladder only when it has at most this many lower sets
# (a DP call over 10^4 lower sets takes about a second); above, only solve's search runs it
_EXACT_LADDER_MAX_SETS = 5000


# guards the per-graph cache of the paper's DP plans across the pool's threads
_CACHE_LOCK = threading.Lock()


def _ladder(lo, hi, n):
    """`n` integer budgets spaced geometrically from `lo` to `hi` bytes, distinct, ascending."""
    if n <= 1 or hi <= lo or lo <= 0:
        return [lo] if lo >= hi else [lo, hi]
    r = (hi / lo) ** (1.0 / (n - 1))
    out: list[int] = []
    for i in range(n):
        b = hi if i == n - 1 else int(math.ceil(lo * r ** i))
        if not out or b > out[-1]:
            out.append(b)
    return out


def default_time_limit(G: Graph) -> float:
    """The time limit (seconds) of a planner call on `G` when the caller gives none:
    :data:`DEFAULT_SECONDS` up to :data:`DEFAULT_NODES` nodes, :data:`SECONDS_PER_NODE` more
    per node above (58 s at 10,000 nodes).

    Parameters
    ----------
    G : Graph
        The graph planned; its node count sets the limit.
    """
    return DEFAULT_SECONDS + SECONDS_PER_NODE * max(0, G.n - DEFAULT_NODES)


def _limit(G, time_limit, method):
    """The seconds of a call's `time_limit` argument ("default", None or a number): "default"
    is :func:`default_time_limit`, or no limit for ``method="exact"``, which searches to the
    end unless told otherwise."""
    if isinstance(time_limit, str) and time_limit == DEFAULT:
        return None if method == "exact" else default_time_limit(G)
    return check_time_limit(time_limit)


class _Deadline(_limits.Deadline):
    """The time limit of one public planner call, shared by every step in it. Past it,
    :meth:`left` raises SearchLimitError; a step run by :func:`_anytime` then ends, the
    deadline notes it in :attr:`cut`, and the call returns the best plan found so far."""

    def __init__(self, time_limit):
        super().__init__(time_limit)
        self.cut = []

    def passed(self):
        return self.limit is not None and self.elapsed() >= self.limit

    def left(self):
        """Seconds left (None without a limit); raise SearchLimitError past the limit."""
        if self.limit is None:
            return None
        left = self.limit - self.elapsed()
        if left <= 0:
            raise SearchLimitError(f"time limit of {self.limit:.3g} s exceeded",
                                   limit="time_limit")
        return left

    def note_cut(self, step=None):
        step = step or _progress.current() or "search"
        if step not in self.cut:
            self.cut.append(step)


def _anytime(deadline, fn, *args, step=None):
    """``fn(*args)``, or None where the time limit passes inside it (noted on `deadline` as
    `step`, default the phase the progress bar shows)."""
    try:
        return fn(*args)
    except SearchLimitError as e:
        if e.limit != "time_limit" or not deadline.passed():
            raise
        deadline.note_cut(step)
        return None


def _warn_if_cut(deadline, call, G, plan):
    """Warn (:class:`TimeLimitWarning`) that `call` stopped at its time limit and returns
    `plan`, the best it found."""
    if not deadline.cut:
        return
    point = "" if plan is None else (f": peak {_point(plan)[1]:,} bytes, recomputation "
                                     f"{_point(plan)[0]:,} cost units")
    how = ("reached its time limit of" if deadline.passed()
           else "skipped search steps that would have run past its time limit of")
    warnings.warn(TimeLimitWarning(
        f"{call} {how} {deadline.limit:.3g} s on a graph of {G.n:,} "
        f"nodes and returns the best plan it found{point}; the search steps cut: "
        f"{', '.join(deadline.cut)}. Pass time_limit=None to search to the end, or a larger "
        "time_limit (seconds)"), stacklevel=3)


@contextlib.contextmanager
def _searching(desc, progress, time_limit):
    """Run a public planner call: its progress bar, and a time limit passed inside a DP pass
    named as the caller's `time_limit` (the pass itself only had the seconds left): raised
    where the call found no plan to return."""
    start = _limits.clock()
    try:
        with _progress.progress(desc, progress):
            yield
    except SearchLimitError as e:
        head = f"time limit of {time_limit:.3g} s" if time_limit is not None else None
        if e.limit != "time_limit" or head is None or str(e).startswith(head):
            raise
        raise SearchLimitError(f"{head} exceeded after {_limits.clock() - start:.3g} s in "
                               f"{desc} (its last step: {e})", limit="time_limit") from e


def _pool(G, method, max_lower_sets, deadline):
    """Candidate strategies (see the module docstring), each once."""
    _progress.phase("pool")
    seen, out = set(), []

    def add(s):
        key = s._seg.tobytes()
        if key not in seen:
            seen.add(key)
            out.append(s)

    add(CanonicalStrategy(G, [set(G.labels)], method="none"))
    add(chen_sqrtn(G))
    for s in selective_family(G):
        add(s)
    hi = CanonicalStrategy(G, [set(G.labels)]).peak_memory
    families = _anytime(deadline, _pool_families, G, method, max_lower_sets, deadline) or []
    leasts, chains = {}, []
    for fam in families:
        _progress.phase(f"{fam} minimal budget")
        found = _anytime(deadline, lambda: dp.min_budget(
            G, fam, max_lower_sets=max_lower_sets, time_limit=deadline.left(),
            return_strategy=True))
        if found is None:
            break
        lo, leasts[fam] = found
        budgets = _ladder(lo, max(lo, hi), LADDER_SIZE)
        if fam not in _EXHAUSTIVE:   # solve's search runs the exhaustive family's
            chains += [[(fam, "time", b) for b in _time_ladder(budgets)]]
        chains += [[(fam, "memory", b) for b in budgets]]
    plans = _run_chains(G, chains, max_lower_sets, deadline)
    for fam, least in leasts.items():   # per family: its least eq. (2) peak, its ladder
        ladder = [s for c, p in zip(chains, plans) if c[0][0] == fam for s in p
                  if s is not None]
        for s in [least] + [s for s in ladder if s.mode == "memory"] + \
                [s for s in ladder if s.mode == "time"]:
            add(s)
    return out


def _pool_families(G, method, max_lower_sets, deadline):
    """The DP families whose ladders join the pool: the pruned one, and that of `method`
    where it differs (the exhaustive ones only where small enough for a ladder)."""
    families = ["approx"]
    if method == "ordered" and _ordered_differs(G, max_lower_sets, deadline):
        families.append("ordered")
    if (method in _EXHAUSTIVE and not _large(G, method, max_lower_sets)
            and not dp.same_families(G, max_lower_sets, _limits.Deadline(deadline.left()),
                                     method)):
        families.append(method)   # where the families are the same, so are its plans
    return families


def _ordered_differs(G, max_lower_sets, deadline):
    """Whether the ordered family has sets the pruned one lacks (it holds the pruned one)."""
    left = _limits.Deadline(deadline.left())
    return (dp._get_family(G, "ordered", max_lower_sets, left).sets.shape[0]
            > dp._get_family(G, "approx", max_lower_sets, left).sets.shape[0])


class _Passes:
    """The pool's DP passes, handed to the threads of :func:`_run_chains` one at a time.

    A chain's passes start in its order, and its second waits for its first: that one is the
    costliest, and the others start from its optimum. After it, a free thread takes the next
    pass of a chain whose pass before it is done (time-centric chains before memory-centric
    ones, then the chain with the fewest passes started), and only where there is none the next
    pass of a chain whose pass before it still runs. Such a pass starts from the optima one
    budget further below (a time-centric deepening started further from its optimum costs more,
    a memory-centric pass drops fewer states), so it runs only where a thread would otherwise
    wait."""

    def __init__(self, chains):
        self.chains = chains
        self.started = [0] * len(chains)
        self.done: list[set[int]] = [set() for _ in chains]
        self.stopped = False
        self.changed = threading.Condition()

    def _rank(self, i):
        k = self.started[i]
        waiting = k > 0 and k - 1 not in self.done[i]
        return waiting, self.chains[i][0][1] != "time", k, i

    def take(self):
        """(chain, position) of the next pass to run; None when all have started or after
        :meth:`stop`. Waits while a chain's first pass runs and nothing else is left."""
        with self.changed:
            while not self.stopped:
                left = [i for i, c in enumerate(self.chains) if self.started[i] < len(c)]
                if not left:
                    return None
                free = [i for i in left if self.started[i] == 0 or 0 in self.done[i]]
                if free:
                    i = min(free, key=self._rank)
                    self.started[i] += 1
                    return i, self.started[i] - 1
                self.changed.wait()
            return None

    def finish(self, i, k):
        """Pass `k` of chain `i` is done."""
        with self.changed:
            self.done[i].add(k)
            self.changed.notify_all()

    def stop(self):
        """Hand out no more passes."""
        with self.changed:
            self.stopped = True
            self.changed.notify_all()


def _run_chains(G, chains, max_lower_sets, deadline):
    """The paper's DP at each (family, mode, eq. (2) budget) of each chain; the plans, per chain.

    The passes run on up to :func:`lowerset._limits.cores` threads (the DP kernel releases the
    GIL) in the order :class:`_Passes` gives, each allowed its share of the memory cap; a
    time-centric chain ascends, each pass's deepening starting from the optima cached below it
    (:func:`_paper`). The plans are the same whichever runs first: the DP's optimum and
    back-pointers do not depend on where its deepening starts or ends. An error stops the
    other threads after their pass in progress, and is raised; the time limit stops them too,
    and the passes it cut are None."""
    passes = _Passes(chains)
    out = [[None] * len(c) for c in chains]
    _progress.phase("ladder")

    def work():
        while (task := passes.take()) is not None:
            i, k = task
            fam, mode, b = chains[i][k]
            out[i][k] = _anytime(deadline, _paper, G, fam, mode, b, max_lower_sets, deadline,
                                 step="ladder")
            if out[i][k] is None:
                passes.stop()
                return
            passes.finish(i, k)

    workers = min(_limits.cores(), sum(len(c) for c in chains))
    if workers <= 1:
        work()
        return out

    def worker():
        with _limits.one_thread():   # the other workers fill the other cores
            work()

    with _limits.sharing_memory(workers), \
            concurrent.futures.ThreadPoolExecutor(workers) as pool:
        futures = [pool.submit(worker) for _ in range(workers)]
        try:
            concurrent.futures.wait(futures, return_when=concurrent.futures.FIRST_EXCEPTION)
        finally:
            passes.stop()   # on an error or an interrupt the others stop after their pass
        for f in futures:
            f.result()
    return out


def _large(G, method, max_lower_sets):
    """Whether the family of `method` ("exact" or "contracted") is too large for the pool's
    ladder (SearchLimitError above `max_lower_sets`)."""
    if method == "contracted":
        return _contracted_count(G, max_lower_sets, _limits.NO_DEADLINE) > _EXACT_LADDER_MAX_SETS
    return count_lower_sets(G, max_lower_sets) > _EXACT_LADDER_MAX_SETS


def _time_ladder(budgets):
    """The eq. (2) budgets of the memory-centric ladder at which the time-centric DP runs:
    every other one, and the last."""
    return [b for i, b in enumerate(budgets) if i % 2 == 0 or i == len(budgets) - 1]


def _paper(G, method, mode, budget, max_lower_sets, deadline):
    """The paper's DP at one eq. (2) budget, cached per graph.

    The time-centric optimum does not increase with the budget, and a family's is at most its
    subfamilies' (:data:`_SUBFAMILIES`) at the same budget, so the least optimum cached at a
    budget at most this one (of the family or a subfamily) bounds the DP's
    iterative deepening (``overhead_bound`` of :func:`dp.solve`); the family's last two optima
    below this budget extrapolate where the deepening starts (``overhead_guess``). Likewise
    the memory-centric optimum does not decrease with the budget and a family's is at least
    its subfamilies': the largest one cached at a budget at most this one is reached
    here, and the DP drops the states that cannot reach it. The same plan, found faster."""
    cache = G.__dict__.setdefault("_paper_cache", {})
    key = (method, mode, budget, max_lower_sets)
    with _CACHE_LOCK:   # the pool's threads (:func:`_run_chains`) share the cache
        if key in cache:
            return cache[key]
        below = sorted((b, m, s.overhead) for (m, md, b, n), s in cache.items()
                       if md == mode and n == max_lower_sets and b <= budget
                       and m in _SUBFAMILIES[method])
        guess = None
        if mode == "time":
            bound = min((o for _, _, o in below), default=None)
            guess = _guess([o for _, m, o in below if m == method], bound)
        else:
            bound = max((o for _, _, o in below), default=None)
    s = dp.solve(G, budget, mode=mode, method=method, max_lower_sets=max_lower_sets,
                 time_limit=deadline.left(), overhead_bound=bound, overhead_guess=guess)
    with _CACHE_LOCK:
        return cache.setdefault(key, s)


def _guess(optima, bound):
    """Where the time-centric deepening starts, from the family's optima at the budgets below
    (ascending budgets; cost units): the last one times the last ratio, 10% up; the bound where
    there is one optimum; None (the default start) where there are none."""
    if len(optima) < 2 or optima[-2] <= 0:
        return bound
    return min(bound, int(1.1 * optima[-1] * min(1.0, optima[-1] / optima[-2])) + 1)


def pareto(G: Graph, method: str = "auto", *, max_lower_sets: int = DEFAULT_MAX_LOWER_SETS,
           time_limit: Number | str | None = DEFAULT,
           progress: bool = True) -> list[CanonicalStrategy]:
    """Return the overhead/peak trade-off of the planner's pool of canonical strategies.

    Parameters
    ----------
    G : Graph
        With execution facts (from ``chainer_ext.trace``) or the defaults.
    method : {"auto", "exact", "contracted", "ordered", "approx"}
        "approx": the paper's DP over the pruned family (Sec. 4.3); "ordered": also over the
        ordered family (:func:`lowerset.ordered_lower_sets`); "exact": also over all lower
        sets (Sec. 4.2), and the least-peak plan improved by local search
        (:func:`lowerset.refine.refine`); "contracted": as "exact" over the lower sets that
        keep each memoryless node (a view, an in-place write) with its input
        (:func:`lowerset.contracted_lower_sets`); "auto" (default): "contracted" where that
        family is small enough, else "approx" (:func:`lowerset.dp.resolve_method` says which).
        On a graph of :func:`lowerset.dp.windowed_from` nodes or more (500 for "contracted",
        2,000 for the others) the DP over every family but "exact" is windowed, not exhaustive
        (see :func:`lowerset.lowersets.windowed`): with "exact" the DP over all lower sets is
        not, the pool's pruned family is from 2,000 nodes on.
    max_lower_sets : int
        For "exact" and "contracted": raise instead of enumerating more lower sets than this.
    time_limit : float, "default" or None
        Seconds for the call: "default" is :func:`default_time_limit` (8 s up to 2,500 nodes),
        and no limit for ``method="exact"``; None, no limit. Past it the call returns the best
        it found so far and warns (:class:`TimeLimitWarning`, naming the steps it cut).
    progress : bool
        On a terminal, a call running over 2 s shows a tqdm bar on stderr with the elapsed
        time and the search step (the ``cli`` extra; :mod:`lowerset._progress`). False: none.

    Returns
    -------
    list of CanonicalStrategy
        Overhead increasing, peak decreasing: no strategy of the pool has both a lower or equal
        overhead and a lower or equal peak than one on the list (equal ones are kept once).
        Each has ``schedule`` (its :class:`~lowerset.Schedule`; ``schedule.peak`` in bytes,
        ``schedule.recompute_cost`` in cost units).

    Raises
    ------
    ArgumentTypeError
        If `G` is not a Graph.
    ArgumentError
        If `method` is unknown.
    SearchLimitError
        If the graph has too many lower sets for "exact" or "contracted".

    Warns
    -----
    TimeLimitWarning
        If the time limit passed: the front holds the plans found until then.

    References
    ----------
    .. [1] Kusumoto et al., NeurIPS 2019, Sec. 3 (liveness analysis), 4.2-4.4.

    Examples
    --------
    >>> g = ls.Graph.chain(8, memory=10)
    >>> front = ls.pareto(g, "approx")
    >>> [s.schedule.recompute_cost for s in front] == sorted(s.schedule.recompute_cost
    ...                                                      for s in front)
    True
    """
    deadline = _Deadline(_limit(G, time_limit, method))
    method = dp.resolve_method(G, method, max_lower_sets)
    with _searching("pareto", progress, deadline.limit):
        front = _pareto_front(G, method, max_lower_sets, deadline)
    _warn_if_cut(deadline, "pareto", G, front[-1])
    return front


def _pareto_front(G, method, max_lower_sets, deadline):
    """:func:`pareto`'s front: cached on `G`, else made (:func:`_pareto`)."""
    front = G.__dict__.get("_pareto_cache", {}).get((method, max_lower_sets))
    return list(front) if front is not None else _pareto(G, method, max_lower_sets, deadline)


def _pareto(G, method, max_lower_sets, deadline, check=None):
    """:func:`pareto`'s front, made and cached on `G` (where the time limit cut nothing): the
    pool's front, then with an exhaustive method its least-peak plan improved by local search
    (`check`, called between its moves, may raise to stop it; default ``deadline.left``)."""
    front = _pool_front(G, method, max_lower_sets, deadline)
    if method in _EXHAUSTIVE:
        if not deadline.passed():
            _progress.phase("local search")
            front = _front(front + [refine(G, front[-1], deadline=check or deadline.left)])
        if deadline.passed():
            deadline.note_cut("local search")
    elapsed = deadline.elapsed()
    for s in front:
        s.planner_seconds = elapsed
    if not deadline.cut:
        G.__dict__.setdefault("_pareto_cache", {})[method, max_lower_sets] = front
    return front


def _pool_front(G, method, max_lower_sets, deadline):
    """The front of the candidate pool (:func:`_pool`), cached on `G` where the time limit cut
    nothing."""
    cache = G.__dict__.setdefault("_pool_cache", {})
    key = (method, max_lower_sets)
    if key in cache:
        return list(cache[key])
    front = _front(_pool(G, method, max_lower_sets, deadline))
    if not deadline.cut:
        cache[key] = front
    return list(front)


def _point(s):
    """(recompute cost, peak) of strategy `s`'s schedule (cost units, bytes), cached on `s`.

    From the one-kernel fold (:func:`lowerset.scheduling._known_peak_and_cost`, equal to
    ``s.schedule``'s figures: tests/test_refine.py): the planner compares thousands of
    candidates and so builds the whole schedule (its events, about 4x the time) only of the
    plans a caller reads it from."""
    point = s.__dict__.get("_point")
    if point is None:
        if "schedule" in s.__dict__:
            point = (s.schedule.recompute_cost, s.schedule.peak)
        else:
            peak, cost = _known_peak_and_cost(s.graph, dropped_nodes(s))
            point = (cost, peak)
        s.__dict__["_point"] = point
    return point


def _front(strategies):
    """The strategies not dominated in (recompute cost, schedule peak), overhead increasing."""
    ranked = sorted(strategies, key=_point)
    front: list[CanonicalStrategy] = []
    for s in ranked:
        if not front or _point(s)[1] < _point(front[-1])[1]:
            front.append(s)
    return front


def _merge(G, method, max_lower_sets, strategies):
    """Add `strategies` to the cached front of (method, max_lower_sets)."""
    cache = G.__dict__.get("_pareto_cache", {})
    key = (method, max_lower_sets)
    if key in cache:   # a front the time limit cut is not cached
        cache[key] = _front(cache[key] + list(strategies))


def min_peak(G: Graph, method: str = "auto", *, measure: str = "step",
             max_lower_sets: int = DEFAULT_MAX_LOWER_SETS,
             time_limit: Number | str | None = DEFAULT,
             progress: bool = True) -> CanonicalStrategy:
    """Return the planner's strategy with the least schedule peak, with the least overhead
    :func:`solve` finds at that peak.

    Parameters
    ----------
    G, method
        As :func:`pareto`.
    measure : {"step", "activations"}
        The peak minimised. "step": the whole step's device bytes (``schedule.peak``).
        "activations": the paper's memory, activations and their gradients at function
        boundaries and the inputs, without parameters, their gradients and workspace
        (the schedule over :func:`lowerset.activation_facts`); the plan is planned on
        ``G.with_facts(activation_facts(G.facts))`` and returned on `G`, so its ``schedule``
        is still the whole step's.
    max_lower_sets, time_limit, progress
        As :func:`pareto`.

    Returns
    -------
    CanonicalStrategy
        On `G`; with ``measure="step"``, ``schedule.peak`` is the least whole-step peak the
        planner reaches, in bytes.

    Raises
    ------
    ArgumentError
        If `measure` is unknown; the errors of :func:`pareto`.

    Warns
    -----
    TimeLimitWarning
        If the time limit passed: the least peak of the plans found until then.

    Examples
    --------
    >>> g = ls.Graph.chain(8, memory=10)
    >>> ls.min_peak(g).schedule.peak <= ls.schedule(g).peak
    True
    """
    if measure not in MEASURES:
        raise ArgumentError(f"unknown measure {measure!r}; expected one of {MEASURES}")
    check_graph(G)
    deadline = _Deadline(_limit(G, time_limit, method))
    with _searching("min_peak", progress, deadline.limit):
        s = _min_peak(G, method, measure, max_lower_sets, deadline)
    _warn_if_cut(deadline, "min_peak", G, s)
    return s


def _min_peak(G, method, measure, max_lower_sets, deadline):
    """:func:`min_peak` under `deadline` (`method` not resolved yet): the front, then
    :func:`_solve` at its least peak."""
    if measure == "activations":
        s = _min_peak(_activation_view(G), method, "step", max_lower_sets, deadline)
        # no budget: the one it was planned at counts activation bytes, not the step's
        return CanonicalStrategy.from_segments(G, s.segment_of_nodes(), method=s.method,
                                               mode=s.mode, planner_seconds=s.planner_seconds)
    method = dp.resolve_method(G, method, max_lower_sets)
    front = _pareto_front(G, method, max_lower_sets, deadline)
    if deadline.passed():
        return front[-1]
    return _solve(G, _point(front[-1])[1], method, max_lower_sets, deadline)


def _activation_view(G):
    """`G` with :func:`activation_facts`, cached on `G` (so are the planner's results on it)."""
    view = G.__dict__.get("_activation_view")
    if view is None:
        view = G.__dict__["_activation_view"] = G.with_facts(activation_facts(G.facts))
    return view


@overload
def solve(G: Graph, budget: Number | None = None, mode: str = "time", method: str = "auto", *,
          model: str = "executor", max_lower_sets: int = DEFAULT_MAX_LOWER_SETS,
          time_limit: Number | str | None = DEFAULT, progress: bool = True,
          beyond_canonical: Literal[False] = False) -> CanonicalStrategy: ...


@overload
def solve(G: Graph, budget: Number | None = None, mode: str = "time", method: str = "auto", *,
          model: str = "executor", max_lower_sets: int = DEFAULT_MAX_LOWER_SETS,
          time_limit: Number | str | None = DEFAULT, progress: bool = True,
          beyond_canonical: bool) -> CanonicalStrategy | DropSetStrategy: ...


def solve(G: Graph, budget: Number | None = None, mode: str = "time", method: str = "auto", *,
          model: str = "executor", max_lower_sets: int = DEFAULT_MAX_LOWER_SETS,
          time_limit: Number | str | None = DEFAULT, progress: bool = True,
          beyond_canonical: bool = False) -> CanonicalStrategy | DropSetStrategy:
    """Plan a canonical strategy (or, asked, any dropped set) within a memory budget.

    Parameters
    ----------
    G : Graph
    budget : int or float, optional
        Bytes. With ``model="executor"`` (default): the device memory of the whole training
        step, as ``schedule(s).peak`` predicts it (parameters, inputs, gradients, workspace
        included); a float such as ``11.4e9`` is rounded down. None: the least peak
        (:func:`min_peak`). With ``model="paper"``: the eq. (2) budget of the paper's DP, an
        int; None: its minimal budget (:func:`lowerset.min_budget`).
    mode : {"time", "memory"}
        For ``model="paper"``: time-centric (least eq. (1) overhead) or memory-centric (largest,
        Sec. 4.4). The executor model is time-centric: least overhead within the budget;
        :func:`min_peak` is its memory-centric end.
    method : {"auto", "exact", "contracted", "ordered", "approx"}
        Search all lower sets (Sec. 4.2; under the executor model the answer is then improved
        by local search, :func:`lowerset.refine.refine`), the lower sets that keep each
        memoryless node with its input (the same, :func:`lowerset.contracted_lower_sets`),
        the ordered family (:func:`lowerset.ordered_lower_sets`) or the pruned family
        (Sec. 4.3); "auto" (default): as :func:`lowerset.dp.resolve_method` says. On a graph
        of :func:`lowerset.dp.windowed_from` nodes or more (500 for "contracted", 2,000 for the
        others) the DP over every family but "exact" is windowed
        (:func:`lowerset.lowersets.windowed`): with "exact" the DP over all lower sets is not,
        the pool's pruned family is from 2,000 nodes on.
    model : {"executor", "paper"}
        How the budget is read (:data:`MODELS`).
    max_lower_sets : int
        For "exact" and "contracted": raise instead of enumerating more lower sets than this.
    time_limit : float, "default" or None
        Executor model: as :func:`pareto` (the best plan within `budget` found until then).
        Paper model: seconds after which :class:`SearchLimitError` is raised ("default":
        none).
    progress : bool
        As :func:`pareto` (the executor model).
    beyond_canonical : bool
        Executor model with a budget: then search the dropped sets of every plan the executor
        runs, not only those of lower-set sequences, from the canonical plan found
        (:func:`lowerset.dropsearch.search_dropped`), and return a
        :class:`DropSetStrategy` where one recomputes less within `budget`.

    Returns
    -------
    CanonicalStrategy or DropSetStrategy
        Executor model: the least overhead (``schedule.recompute_cost``) of the planner's
        :func:`pareto` front whose ``schedule.peak`` is at most `budget` (with
        `beyond_canonical`, of the drop-set search's plan too). Paper model: the paper's DP
        result (``overhead`` eq. (1), ``peak_memory`` eq. (2)).

    Raises
    ------
    ArgumentTypeError
        If `G` is not a Graph or `budget` is not a number.
    ArgumentError
        If `model`, `mode` or `method` is unknown, `mode="memory"` is asked of the executor
        model, `beyond_canonical` of the paper model, or `budget` is NaN, infinite or
        negative.
    InfeasibleBudgetError
        If no plan fits `budget`; carries the least reachable peak (``min_budget``) in bytes.
    SearchLimitError
        If the graph has too many lower sets for "exact" or "contracted"; if the time limit
        passes before a plan within `budget` is found (the paper model: at all).

    Warns
    -----
    TimeLimitWarning
        If the time limit passed after a plan within `budget` was found: the best one.

    References
    ----------
    .. [1] Kusumoto et al., NeurIPS 2019, Sec. 3, 4.2-4.4.

    Examples
    --------
    >>> g = ls.Graph.chain(8, memory=10)
    >>> plain = ls.schedule(g).peak
    >>> s = ls.solve(g, budget=0.9 * plain)
    >>> s.schedule.peak <= 0.9 * plain
    True
    """
    check_graph(G)
    if model not in MODELS:
        raise ArgumentError(f"unknown model {model!r}; expected one of {MODELS}")
    if model == "paper":
        if beyond_canonical:
            raise ArgumentError("beyond_canonical=True plans for the executor's schedule: the "
                                "paper model's DP plans canonical strategies only")
        # any other str goes on to dp, whose check_time_limit names it
        limit: Any = None if isinstance(time_limit, str) and time_limit == DEFAULT else time_limit
        method = dp.resolve_method(G, method, max_lower_sets, limit)
        return dp.solve(G, budget, mode=mode, method=method, max_lower_sets=max_lower_sets,
                        time_limit=limit)
    if mode != "time":
        if mode in dp.MODES:
            raise ArgumentError("mode='memory' is the paper's memory-centric DP: use "
                                "model='paper'; the least peak under the executor is min_peak()")
        raise ArgumentError(f"unknown mode {mode!r}; expected one of {dp.MODES}")
    if budget is not None:
        budget = check_budget(budget)
    deadline = _Deadline(_limit(G, time_limit, method))
    with _searching("solve", progress, deadline.limit):
        if budget is None:
            best = _min_peak(G, method, "step", max_lower_sets, deadline)
        else:
            best = _solve(G, budget, dp.resolve_method(G, method, max_lower_sets),
                          max_lower_sets, deadline)
            if beyond_canonical:
                best = _beyond_canonical(G, budget, best, deadline)
    _warn_if_cut(deadline, "solve", G, best)
    return best


def _beyond_canonical(G, budget, best, deadline):
    """`best`, or the plan of the drop-set search from it where that recomputes less."""
    if _point(best)[0] == 0:
        return best   # it recomputes nothing: no drop set does better
    found = None
    if not deadline.passed():
        _progress.phase("drop-set search")
        found = search_dropped(G, budget, best, deadline=deadline.left)
    if deadline.passed():
        deadline.note_cut("drop-set search")
    if found is None:
        return best
    found.planner_seconds = deadline.elapsed()
    return found


def _solve(G, budget, method, max_lower_sets, deadline):
    """:func:`solve` under the executor model at `budget` (bytes), `method` resolved."""
    front, found = _front_and_search(G, budget, method, max_lower_sets, deadline)
    fits = [s for s in front if _point(s)[1] <= budget]
    if not fits and not deadline.cut:
        raise InfeasibleBudgetError(budget, _point(front[-1])[1], method=method)
    if fits and _point(fits[0])[0] == 0:
        return fits[0]
    if found is None:
        found = _bisect(G, budget, method, max_lower_sets, deadline)
    found = fits[:1] + found
    if not found:
        raise SearchLimitError(
            f"time limit of {deadline.limit:.3g} s passed before a plan within the budget of "
            f"{budget:,} bytes was found (the least peak found: {_point(front[-1])[1]:,} "
            "bytes); pass a larger time_limit or time_limit=None", limit="time_limit")
    best = min(found, key=_point)
    if method in _EXHAUSTIVE:
        if not deadline.passed():
            _progress.phase("local search")
            found.append(refine(G, best, budget, deadline=deadline.left))
            best = min([best, found[-1]], key=_point)
        if deadline.passed():
            deadline.note_cut("local search")
    _merge(G, method, max_lower_sets, found)
    best.planner_seconds = deadline.elapsed()
    return best


def _front_and_search(G, budget, method, max_lower_sets, deadline):
    """(:func:`pareto`'s front, :func:`_bisect` at `budget` or None).

    With ``method="exact"`` and the front not cached, the front's local search (one thread's
    Python and the schedules on the others) and the search at `budget` (DP passes, one thread)
    run at once, where the pool's front already shows that the search is needed: a plan of the
    pool fits `budget` and recomputes. Each is what it would be alone: the local search
    touches no DP cache, and the search reads none of the front. Elsewhere the search is None:
    :func:`_solve` runs it after the front if it needs it. An error in the search stops the
    local search at its next move and is raised; one in the local search is raised when the
    search ends (a time limit stops both)."""
    if (method not in _EXHAUSTIVE
            or (method, max_lower_sets) in G.__dict__.get("_pareto_cache", {})
            or _limits.cores() < 2):
        return _pareto_front(G, method, max_lower_sets, deadline), None
    pool = _pool_front(G, method, max_lower_sets, deadline)
    fits = [s for s in pool if _point(s)[1] <= budget]
    if not fits or _point(fits[0])[0] == 0:
        return _pareto(G, method, max_lower_sets, deadline), None
    stop = threading.Event()

    def check():
        if stop.is_set():
            # never reaches the caller: the search's own error is raised instead
            raise SearchLimitError("stopped: the search beside it failed", limit="stopped")
        return deadline.left()

    with concurrent.futures.ThreadPoolExecutor(1) as side:
        future = side.submit(_pareto, G, method, max_lower_sets, deadline, check)
        try:
            found = _bisect(G, budget, method, max_lower_sets, deadline)
        except BaseException:
            stop.set()
            raise
        return future.result(), found


def _bisect(G, budget, method, max_lower_sets, deadline):
    """Time-centric DP plans near the largest eq. (2) budget whose schedule fits `budget`.

    First the pruned family's plans at the pool's ladder, then a geometric bisection between
    the largest ladder budget whose plan fits and the next one (:func:`_ladder_and_bisection`);
    with ``method="ordered"``, the same over the ordered family. With ``method="exact"``, then
    a search over all lower sets that starts
    at the largest eq. (2) budget whose approximate plan fit (the exact plan there recomputes
    no more and usually peaks close to it): up from there when the exact plan fits, else down
    (by at least :data:`DESCENT` per step, below each failing plan's own eq. (2) peak) until one
    fits, then by bisection, not below the exact minimal budget (the pruned family's when the
    family is too large for the pool: its exact minimal budget costs several DP passes). Each
    exact DP call's iterative deepening is bounded by the optima already found
    (:func:`_paper_time`)."""
    hi = CanonicalStrategy(G, [set(G.labels)]).peak_memory
    lo = _anytime(deadline, lambda: dp.min_budget(G, "approx", max_lower_sets=max_lower_sets,
                                                  time_limit=deadline.left()))
    if lo is None:
        return []
    found, ok, bad = _ladder_and_bisection(G, budget, "approx", lo, hi, max_lower_sets,
                                           deadline)
    if deadline.passed():
        return found
    if method == "ordered" and _ordered_differs(G, max_lower_sets, deadline):
        lo_o = _anytime(deadline, lambda: dp.min_budget(
            G, "ordered", max_lower_sets=max_lower_sets, time_limit=deadline.left()))
        if lo_o is None:
            return found
        found += _ladder_and_bisection(G, budget, "ordered", lo_o, hi, max_lower_sets,
                                       deadline)[0]
    if method in _EXHAUSTIVE and not deadline.passed():
        _progress.phase(f"{method} DP")
        lo_e = _anytime(deadline, _exhaustive_floor, G, method, lo, max_lower_sets, deadline)
        if lo_e is None:
            return found
        more, _, _ = _bisect_family(G, budget, method, lo_e, max(lo_e, bad),
                                    EXACT_BISECTION_STEPS, max_lower_sets, deadline,
                                    start=ok if ok is not None else lo_e, reserve=True)
        found += more
    return found


def _leaves_local_search(deadline, pace):
    """Whether a DP call of solve's search over the exhaustive family that takes `pace`
    seconds (the last one's) ends at least `pace` before `deadline`'s time limit (True without
    a limit). The local search after that search turns the plans found into the one returned
    (LLaMA-style stack at 32 layers, halfway: 7,359 cost units before it, 5,254 after) and
    takes about as long as one such call (LLaMA-style stack at 16 layers: 0.6 s and 0.6 s; at
    32: 1.6 s and 1.8 s); a limit passed before it returns the plan unrefined."""
    return deadline.limit is None or deadline.elapsed() + 2 * pace <= deadline.limit


def _exhaustive_floor(G, method, lo, max_lower_sets, deadline):
    """The least eq. (2) budget the search over the family of `method` probes: its minimal
    budget, or the pruned family's `lo` where that family is the pruned one or too large for
    its minimal budget to be worth its passes."""
    if _large(G, method, max_lower_sets) or dp.same_families(
            G, max_lower_sets, _limits.Deadline(deadline.left()), method):
        return lo
    return dp.min_budget(G, method, max_lower_sets=max_lower_sets, time_limit=deadline.left())


def _ladder_and_bisection(G, budget, family, lo, hi, max_lower_sets, deadline):
    """`family`'s time-centric plans at the pool's ladder of eq. (2) budgets from `lo` to `hi`
    (:func:`_scan_ladder`), then at a bisection between the largest ladder budget whose plan
    fits `budget` and the next one. Returns (plans that fit, the last eq. (2) budget that fit
    or None, the first that did not)."""
    name = "" if family == "approx" else f"{family} "
    _progress.phase(f"{name}ladder")
    found, ok, bad = _scan_ladder(G, budget, family, lo, hi, max_lower_sets, deadline)
    if ok is not None:
        _progress.phase(f"{name}bisection")
        more, ok, bad = _bisect_family(G, budget, family, ok, bad, BISECTION_STEPS,
                                       max_lower_sets, deadline)
        found += more
    return found, ok, bad


def _scan_ladder(G, budget, family, lo, hi, max_lower_sets, deadline):
    """`family`'s time-centric plans at the pool's ladder of eq. (2) budgets (cached:
    :func:`pareto` made them). Whether a plan fits `budget` is not monotone in its eq. (2)
    budget (the plan at the minimal one often peaks above plans at larger ones), so the whole
    ladder is tried. Returns (plans that fit, the largest ladder budget that fit or None, the
    next ladder budget above it, or `hi`)."""
    budgets = _time_ladder(_ladder(lo, max(lo, hi), LADDER_SIZE))
    found, ok, bad = [], None, hi
    for b in budgets:
        plans = _anytime(deadline, _paper_time, G, family, b, max_lower_sets, deadline)
        if plans is None:
            break
        s = plans[0]
        if _point(s)[1] <= budget:
            found.append(s)
            ok, bad = b, hi
        elif ok is not None and bad == hi:
            bad = b
    return found, ok, bad


def _paper_time(G, family, b, max_lower_sets, deadline):
    """The paper's time-centric DP of `family` at eq. (2) budget `b`, cached per graph: a list
    whose first plan is the DP's optimum. For the exact family it is the DP's whole final
    front (:func:`dp.time_front`): plans that recompute more and cache less, found by the
    same pass."""
    if family not in _EXHAUSTIVE:
        return [_paper(G, family, "time", b, max_lower_sets, deadline)]
    cache = G.__dict__.setdefault("_paper_cache", {})
    key = ("front", family, b, max_lower_sets)
    if key not in cache:
        # the optimum is monotone in the budget: plans found at budgets <= b bound it from
        # above (the approximate plan at b is one of them), those at budgets >= b from below
        done = {k[2]: v[0].overhead for k, v in cache.items()
                if k[:2] == ("front", family) and k[3] == max_lower_sets}
        below = min([o for c, o in done.items() if c <= b], default=None)
        floor = max([o for c, o in done.items() if c >= b], default=0)
        bound = below
        try:
            approx = _paper(G, "approx", "time", b, max_lower_sets, deadline).overhead
            bound = approx if bound is None else min(bound, approx)
        except InfeasibleBudgetError:
            pass   # b is below the pruned family's minimal budget
        # an optimum of this family at a smaller budget lies close above the one here: one
        # pass capped at it costs less than the deepening's passes below it
        cache[key] = dp.time_front(G, b, family, max_lower_sets=max_lower_sets,
                                   time_limit=deadline.left(), overhead_bound=bound,
                                   overhead_floor=floor,
                                   start_at_bound=below is not None and below == bound)
    return cache[key]


def _bisect_family(G, budget, family, lo, hi, steps, max_lower_sets, deadline, start=None,
                   reserve=False):
    """Search the eq. (2) budget in [lo, hi] of the time-centric DP of `family` for the largest
    one whose plan's schedule fits `budget` (bytes), in at most ``steps + 1`` DP calls.

    The first probe is at `start` (default `lo`). Until a plan fits, each next probe is
    :data:`DESCENT` times the last, or below the last plan's eq. (2) peak if that is lower (not
    below `lo`); after that, the geometric midpoint of the last budget that fit and the first
    that did not. With `reserve`, a probe that at the last one's pace (half the first one's)
    would leave the local search after it too little time (:func:`_leaves_local_search`) is
    not made, and the deadline notes the cut. Returns (plans that fit, last eq. (2) budget
    that fit or None, first that did not)."""
    found, ok, bad = [], None, hi
    floor = 0   # the DP's least overhead at `bad` (plans below `bad` overhead at least this)
    b = lo if start is None else min(max(start, lo), hi)
    # the seconds a next probe takes: the last one's, or half the first one's (it deepens
    # from 4 cost units with caps 4x apart, and its passes before the last take about as
    # long as its last: 1.0-2.6 s against 1.3-2.0 s on the traced LLaMA-style stack at 32
    # layers and the Inception-like one at 2,499 nodes; a later probe is one pass)
    pace = None
    for i in range(steps + 1):
        if reserve and pace is not None and not _leaves_local_search(deadline, pace):
            deadline.note_cut(f"{family} DP (its last calls, leaving the local search time)")
            break
        began = deadline.elapsed()
        plans = _anytime(deadline, _paper_time, G, family, b, max_lower_sets, deadline)
        pace = (deadline.elapsed() - began) / (2 if i == 0 else 1)
        if plans is None:
            break
        s = plans[0]
        found += [p for p in plans if _point(p)[1] <= budget]
        if _point(s)[1] <= budget:
            ok = b
        else:
            bad, floor = b, s.overhead
        if ok is None:
            if b <= lo:
                break
            # every eq. (2) budget from the plan's own eq. (2) peak up to b gives a plan of the
            # same overhead: the next probe is below it
            b = max(lo, min(int(b * DESCENT), s.peak_memory - 1))
        else:
            b = int(math.sqrt(ok * bad))
            if b <= ok or b >= bad:
                break
        # once a plan that fits is within STOP_GAP of `floor` (eq. (1)), the probes stop: the
        # next ones could not do much better
        if found and min(p.overhead for p in found) <= floor + max(1, STOP_GAP * floor):
            break
    return found, ok, bad
