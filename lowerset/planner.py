"""Plan for the memory a training step really uses: budgets in device bytes.

The paper's DP (:mod:`lowerset.dp`, Sec. 4.2-4.4) is exact for eq. (2), which charges ``2 M(V_i)``
per segment and leaves out parameters, gradients of parameters and every function's workspace.
Here a plan is judged by its schedule (:func:`lowerset.schedule`): its peak is the whole step's
device memory, resident bytes included, and its overhead is what the executor recomputes
(``Schedule.recompute_cost``: eq. (1) without the last segment, which the executor keeps, and
without the dropped values no backward step reads).

:func:`pareto` builds a pool of canonical strategies and keeps the trade-off front of (overhead,
peak); :func:`min_peak` is its least peak. The pool holds the strategy [V] (no recomputation),
Chen's sqrt(n), the plan of least eq. (2) peak (:func:`lowerset.min_budget`), and the paper's DP
at a ladder of eq. (2) budgets from its minimal budget to the eq. (2) peak of [V], in both
modes: the time-centric DP gives the fine partitions and the memory-centric one the coarse
partitions that liveness analysis favours (the "trial and error" of Sec. 4.4, done with the
schedule), and selective checkpointing's strategies
(:func:`lowerset.baselines.selective_family`: segments ending at the expensive nodes, whose
outputs stay, with the cheap nodes between them recomputed), which eq. (2) does not favour.
The pruned family (Sec. 4.3) always joins the pool. With ``method="ordered"`` the ordered
family (:func:`lowerset.ordered_lower_sets`: the pruned sets and the prefixes of two
topological orders) joins it too (its passes cost more: "auto" does not pick it); with
``method="exact"``, all lower sets (Sec. 4.2) where there are at most 5,000 of them, because
one exact DP pass over 10^4 lower sets takes about a second. The pool's DP passes run on a
thread per core (:func:`_run_chains`).
:func:`solve` takes the least overhead on that front within the budget, then searches the
time-centric DP's eq. (2) budget for the largest one whose plan still fits the device budget
(its overhead decreases as the eq. (2) budget grows): the ladder and a bisection above its
largest fitting budget over the pruned family, the same over the ordered family ("ordered"),
or (exact) a descent from the pruned family's answer
over all lower sets, where every plan on the DP's final front (:func:`lowerset.dp.time_front`)
is a candidate. With ``method="exact"``, :func:`pareto` then improves its least-peak plan and
:func:`solve` its answer by local search over lower-set sequences judged by the schedule
(:func:`lowerset.refine.refine`). These are searches, not an optimum over all lower-set
sequences. ``min_peak(G, measure="activations")`` runs the same search on the graph with
:func:`lowerset.activation_facts`, the paper's memory (no parameters, their gradients or
workspace), and returns the plan on `G`.
"""

import concurrent.futures
import contextlib
import math
import threading
import time

from . import _limits, _progress, dp
from .baselines import chen_sqrtn, selective_family
from .execution import activation_facts
from .exceptions import ArgumentError, InfeasibleBudgetError, SearchLimitError
from .lowersets import DEFAULT_MAX_LOWER_SETS, count_lower_sets
from .refine import refine
from .scheduling import _known_peak_and_cost, dropped_nodes
from ._validate import check_budget, check_graph
from .strategy import CanonicalStrategy

__all__ = ["solve", "min_peak", "pareto", "MODELS", "MEASURES", "LADDER_SIZE"]

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
                "exact": ("approx", "exact")}

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
    out = []
    for i in range(n):
        b = hi if i == n - 1 else int(math.ceil(lo * r ** i))
        if not out or b > out[-1]:
            out.append(b)
    return out


class _Deadline:
    def __init__(self, time_limit):
        self.start = time.perf_counter()
        self.limit = time_limit

    def left(self):
        """Seconds left (None without a limit); raise SearchLimitError past the limit."""
        if self.limit is None:
            return None
        left = self.limit - (time.perf_counter() - self.start)
        if left <= 0:
            raise SearchLimitError(f"time limit of {self.limit:.3g} s exceeded",
                                   limit="time_limit")
        return left


@contextlib.contextmanager
def _searching(desc, progress, time_limit):
    """Run a public planner call: its progress bar, and a time limit passed inside a DP pass
    named as the caller's `time_limit` (the pass itself only had the seconds left)."""
    start = time.perf_counter()
    try:
        with _progress.progress(desc, progress):
            yield
    except SearchLimitError as e:
        head = f"time limit of {time_limit:.3g} s" if time_limit is not None else None
        if e.limit != "time_limit" or head is None or str(e).startswith(head):
            raise
        raise SearchLimitError(f"{head} exceeded after {time.perf_counter() - start:.3g} s in "
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
    families = ["approx"]
    if method == "ordered" and _ordered_differs(G, max_lower_sets, deadline):
        families.append("ordered")
    if (method == "exact" and not _large(G, max_lower_sets)
            and not dp.same_families(G, max_lower_sets, _limits.Deadline(deadline.left()))):
        families.append("exact")   # where the families are the same, so are its plans
    leasts, chains = [], []
    for fam in families:
        lo, least = dp.min_budget(G, fam, max_lower_sets=max_lower_sets,
                                  time_limit=deadline.left(), return_strategy=True)
        leasts.append(least)
        budgets = _ladder(lo, max(lo, hi), LADDER_SIZE)
        chains += [[(fam, "time", b) for b in _time_ladder(budgets)]]
        chains += [[(fam, "memory", b) for b in budgets]]
    plans = _run_chains(G, chains, max_lower_sets, deadline)
    for fam, least in zip(families, leasts):   # per family: its least eq. (2) peak, its ladder
        ladder = [s for c, p in zip(chains, plans) if c[0][0] == fam for s in p]
        for s in [least] + [s for s in ladder if s.mode == "memory"] + \
                [s for s in ladder if s.mode == "time"]:
            add(s)
    return out


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
        self.done = [set() for _ in chains]
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
    other threads after their pass in progress, and is raised."""
    passes = _Passes(chains)
    out = [[None] * len(c) for c in chains]

    def work():
        while (task := passes.take()) is not None:
            i, k = task
            fam, mode, b = chains[i][k]
            out[i][k] = _paper(G, fam, mode, b, max_lower_sets, deadline)
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


def _large(G, max_lower_sets):
    """Whether the exact family is too large for the pool's ladder (SearchLimitError above
    `max_lower_sets`)."""
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


def pareto(G, method="auto", *, max_lower_sets=DEFAULT_MAX_LOWER_SETS, time_limit=None,
           progress=True):
    """Return the overhead/peak trade-off of the planner's pool of canonical strategies.

    Parameters
    ----------
    G : Graph
        With execution facts (from ``chainer_ext.trace``) or the defaults.
    method : {"auto", "exact", "ordered", "approx"}
        "approx": the paper's DP over the pruned family (Sec. 4.3); "ordered": also over the
        ordered family (:func:`lowerset.ordered_lower_sets`); "exact": also over all lower
        sets (Sec. 4.2), and the least-peak plan improved by local search
        (:func:`lowerset.refine.refine`); "auto" (default): "exact" where the graph has at most
        `max_lower_sets` lower sets, else "approx" (:func:`lowerset.dp.resolve_method` says
        which).
    max_lower_sets : int
        For "exact": raise instead of enumerating more lower sets than this.
    time_limit : float, optional
        Seconds; raise :class:`SearchLimitError` past it.
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
        If the graph has too many lower sets for "exact", or the time limit passes.

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
    method = dp.resolve_method(G, method, max_lower_sets, time_limit)
    if (method, max_lower_sets) not in G.__dict__.get("_pareto_cache", {}):
        deadline = _Deadline(time_limit)
        with _searching("pareto", progress, time_limit):
            _pareto(G, method, max_lower_sets, deadline)
    return list(G.__dict__["_pareto_cache"][method, max_lower_sets])


def _pareto(G, method, max_lower_sets, deadline, check=None):
    """:func:`pareto`'s front, made and cached on `G`: the pool's front (cached too), then with
    ``method="exact"`` its least-peak plan improved by local search (`check`, called between
    its moves, may raise to stop it; default ``deadline.left``)."""
    front = _pool_front(G, method, max_lower_sets, deadline)
    if method == "exact":
        _progress.phase("local search")
        front = _front(front + [refine(G, front[-1], deadline=check or deadline.left)])
    elapsed = time.perf_counter() - deadline.start
    for s in front:
        s.planner_seconds = elapsed
    G.__dict__.setdefault("_pareto_cache", {})[method, max_lower_sets] = front
    return front


def _pool_front(G, method, max_lower_sets, deadline):
    """The front of the candidate pool (:func:`_pool`), cached on `G`."""
    cache = G.__dict__.setdefault("_pool_cache", {})
    key = (method, max_lower_sets)
    if key not in cache:
        cache[key] = _front(_pool(G, method, max_lower_sets, deadline))
    return list(cache[key])


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
    front = []
    for s in ranked:
        if not front or _point(s)[1] < _point(front[-1])[1]:
            front.append(s)
    return front


def _merge(G, method, max_lower_sets, strategies):
    """Add `strategies` to the cached front of (method, max_lower_sets)."""
    cache = G.__dict__["_pareto_cache"]
    key = (method, max_lower_sets)
    cache[key] = _front(cache[key] + list(strategies))


def min_peak(G, method="auto", *, measure="step", max_lower_sets=DEFAULT_MAX_LOWER_SETS,
             time_limit=None, progress=True):
    """Return the planner's strategy with the least schedule peak, with the least overhead
    :func:`solve` finds at that peak.

    Parameters
    ----------
    measure : {"step", "activations"}
        The peak minimised. "step": the whole step's device bytes (``schedule.peak``).
        "activations": the paper's memory, activations and their gradients at function
        boundaries and the inputs, without parameters, their gradients and workspace
        (the schedule over :func:`lowerset.activation_facts`); the plan is planned on
        ``G.with_facts(activation_facts(G.facts))`` and returned on `G`, so its ``schedule``
        is still the whole step's.
    G, method, max_lower_sets, time_limit, progress
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

    Examples
    --------
    >>> g = ls.Graph.chain(8, memory=10)
    >>> ls.min_peak(g).schedule.peak <= ls.schedule(g).peak
    True
    """
    if measure not in MEASURES:
        raise ArgumentError(f"unknown measure {measure!r}; expected one of {MEASURES}")
    deadline = _Deadline(time_limit)
    method = dp.resolve_method(G, method, max_lower_sets, time_limit)
    with _searching("min_peak", progress, time_limit):
        return _min_peak(G, method, measure, max_lower_sets, deadline)


def _min_peak(G, method, measure, max_lower_sets, deadline):
    """:func:`min_peak`: `pareto`, then `solve` at the front's least peak, each given the
    seconds of `deadline` left (one time limit for the whole call)."""
    if measure == "activations":
        check_graph(G)
        s = min_peak(_activation_view(G), method, max_lower_sets=max_lower_sets,
                     time_limit=deadline.left())
        # no budget: the one it was planned at counts activation bytes, not the step's
        return CanonicalStrategy.from_segments(G, s.segment_of_nodes(), method=s.method,
                                               mode=s.mode, planner_seconds=s.planner_seconds)
    front = pareto(G, method, max_lower_sets=max_lower_sets, time_limit=deadline.left())
    return solve(G, _point(front[-1])[1], method=method, max_lower_sets=max_lower_sets,
                 time_limit=deadline.left())


def _activation_view(G):
    """`G` with :func:`activation_facts`, cached on `G` (so are the planner's results on it)."""
    view = G.__dict__.get("_activation_view")
    if view is None:
        view = G.__dict__["_activation_view"] = G.with_facts(activation_facts(G.facts))
    return view


def solve(G, budget=None, mode="time", method="auto", *, model="executor",
          max_lower_sets=DEFAULT_MAX_LOWER_SETS, time_limit=None, progress=True):
    """Plan a canonical strategy within a memory budget.

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
    method : {"auto", "exact", "ordered", "approx"}
        Search all lower sets (Sec. 4.2; under the executor model the answer is then improved
        by local search, :func:`lowerset.refine.refine`), the ordered family
        (:func:`lowerset.ordered_lower_sets`) or the pruned family (Sec. 4.3); "auto"
        (default): "exact" where the graph has at most `max_lower_sets` lower sets, else
        "approx" (:func:`lowerset.dp.resolve_method` says which).
    model : {"executor", "paper"}
        How the budget is read (:data:`MODELS`).
    max_lower_sets : int
        For "exact": raise instead of enumerating more lower sets than this.
    time_limit : float, optional
        Seconds for the whole call; raise :class:`SearchLimitError` past it.
    progress : bool
        As :func:`pareto` (the executor model).

    Returns
    -------
    CanonicalStrategy
        Executor model: the least overhead (``schedule.recompute_cost``) of the planner's
        :func:`pareto` front whose ``schedule.peak`` is at most `budget`. Paper model: the
        paper's DP result (``overhead`` eq. (1), ``peak_memory`` eq. (2)).

    Raises
    ------
    ArgumentTypeError
        If `G` is not a Graph or `budget` is not a number.
    ArgumentError
        If `model`, `mode` or `method` is unknown, `mode="memory"` is asked of the executor
        model, or `budget` is NaN, infinite or negative.
    InfeasibleBudgetError
        If no plan fits `budget`; carries the least reachable peak (``min_budget``) in bytes.
    SearchLimitError
        If the graph has too many lower sets for "exact", or the time limit passes.

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
    method = dp.resolve_method(G, method, max_lower_sets, time_limit)
    if model == "paper":
        return dp.solve(G, budget, mode=mode, method=method, max_lower_sets=max_lower_sets,
                        time_limit=time_limit)
    if mode != "time":
        if mode in dp.MODES:
            raise ArgumentError("mode='memory' is the paper's memory-centric DP: use "
                                "model='paper'; the least peak under the executor is min_peak()")
        raise ArgumentError(f"unknown mode {mode!r}; expected one of {dp.MODES}")
    if budget is not None:
        budget = check_budget(budget)
    with _searching("solve", progress, time_limit):
        return _solve(G, budget, method, max_lower_sets, time_limit)


def _solve(G, budget, method, max_lower_sets, time_limit):
    """:func:`solve` under the executor model, `budget` checked (bytes or None)."""
    deadline = _Deadline(time_limit)
    if budget is None:
        return min_peak(G, method, max_lower_sets=max_lower_sets, time_limit=deadline.left())
    front, found = _front_and_search(G, budget, method, max_lower_sets, deadline)
    fits = [s for s in front if _point(s)[1] <= budget]
    if not fits:
        raise InfeasibleBudgetError(budget, _point(front[-1])[1], method=method)
    if _point(fits[0])[0] == 0:
        return fits[0]
    if found is None:
        found = _bisect(G, budget, method, max_lower_sets, deadline)
    best = min(fits[:1] + found, key=_point)
    if method == "exact":
        _progress.phase("local search")
        found.append(refine(G, best, budget, deadline=deadline.left))
        best = min([best, found[-1]], key=_point)
    _merge(G, method, max_lower_sets, found)
    best.planner_seconds = time.perf_counter() - deadline.start
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
    if (method != "exact" or (method, max_lower_sets) in G.__dict__.get("_pareto_cache", {})
            or _limits.cores() < 2):
        return pareto(G, method, max_lower_sets=max_lower_sets,
                      time_limit=deadline.left()), None
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
    lo = dp.min_budget(G, "approx", max_lower_sets=max_lower_sets, time_limit=deadline.left())
    found, ok, bad = _ladder_and_bisection(G, budget, "approx", lo, hi, max_lower_sets,
                                           deadline)
    if method == "ordered" and _ordered_differs(G, max_lower_sets, deadline):
        lo_o = dp.min_budget(G, "ordered", max_lower_sets=max_lower_sets,
                             time_limit=deadline.left())
        found += _ladder_and_bisection(G, budget, "ordered", lo_o, hi, max_lower_sets,
                                       deadline)[0]
    if method == "exact":
        _progress.phase("exact DP")
        lo_e = lo if (_large(G, max_lower_sets) or dp.same_families(
            G, max_lower_sets, _limits.Deadline(deadline.left()))) else dp.min_budget(
            G, "exact", max_lower_sets=max_lower_sets, time_limit=deadline.left())
        more, _, _ = _bisect_family(G, budget, "exact", lo_e, max(lo_e, bad),
                                    EXACT_BISECTION_STEPS, max_lower_sets, deadline,
                                    start=ok if ok is not None else lo_e)
        found += more
    return found


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
        s = _paper_time(G, family, b, max_lower_sets, deadline)[0]
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
    if family != "exact":
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


def _bisect_family(G, budget, family, lo, hi, steps, max_lower_sets, deadline, start=None):
    """Search the eq. (2) budget in [lo, hi] of the time-centric DP of `family` for the largest
    one whose plan's schedule fits `budget` (bytes), in at most ``steps + 1`` DP calls.

    The first probe is at `start` (default `lo`). Until a plan fits, each next probe is
    :data:`DESCENT` times the last, or below the last plan's eq. (2) peak if that is lower (not
    below `lo`); after that, the geometric midpoint of the
    last budget that fit and the first that did not. Returns (plans that fit, last eq. (2)
    budget that fit or None, first that did not)."""
    found, ok, bad = [], None, hi
    floor = 0   # the DP's least overhead at `bad` (plans below `bad` overhead at least this)
    b = lo if start is None else min(max(start, lo), hi)
    for _ in range(steps + 1):
        plans = _paper_time(G, family, b, max_lower_sets, deadline)
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
