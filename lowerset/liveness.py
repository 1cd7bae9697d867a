"""Peak memory of a canonical strategy run with liveness analysis, and planning against it.

Eq. (2) of the paper bounds the memory of segment i's backward pass by ``2 M(V_i)`` plus the
cache and the neighbouring values, as if every forward value and every gradient of the segment
lived at once. An executor with liveness analysis (which the paper applies after planning, end of
Sec. 3; :class:`chainer_ext.RecomputeHook`) frees each value right after its last use, gradients
included, so a coarse segment costs far less than eq. (2) says and the strategy with the least
*planned* peak is often not the one with the least *real* peak (footnote 2 of Sec. 5). Sec. 4.4
finds coarse partitions "through trial and error" (the memory-centric mode); here a simulation
does the trial.

:func:`simulate` replays a canonical strategy event by event, the way such an executor runs it,
and returns the bytes in use at every step: the forward pass (dropping ``V_i ∖ ∂(L_i)`` once its
consumers have run), and the backward pass in the order Chainer uses (highest rank first), with
recomputation of a segment's dropped values when a backward step needs them and each value,
function state and gradient freed at its last use. :func:`solve_liveness` runs the paper's DP
(:func:`lowerset.solve`) at a ladder of budgets and keeps the strategy whose simulated peak is
lowest.

What the simulation needs beyond G comes from optional node attributes (written by
``chainer_ext.trace``); a graph without them (the authors' ``cg_*.txt`` files) gets the paper's
conservative assumption that every function's backward reads all its inputs and its output:

=================== ============================================================ ==========
attribute           meaning                                                      default
=================== ============================================================ ==========
``output_bytes``    bytes of the node's output arrays                             M_v
``outputs``         ``[shape, dtype]`` per output (sizes each output's gradient)  one output
``state_bytes``     bytes the function keeps for backward besides inputs/outputs  0
``inputs``          ``["node", label, k]`` per argument (others are ignored)      all preds
``retained_inputs`` argument positions the function's backward reads              all
``retained_outputs`` output positions its backward reads (empty: none)            all
``backward``        whether the backward pass runs this function                  True
``requires_grad``   whether the node's output gets a gradient                     True
``stochastic``      state (a dropout mask) is kept when the node is dropped       False
=================== ============================================================ ==========
"""

import heapq
import math
import numbers
import time
from dataclasses import dataclass, field

import numpy as np

from .exceptions import InfeasibleBudgetError, SearchLimitError, StrategyError
from .strategy import CanonicalStrategy

__all__ = ["LivenessModel", "LivenessReport", "simulate", "solve_liveness"]


class LivenessModel:
    """Per-node facts about the executor that G does not hold (see the module table).

    Parameters
    ----------
    graph : Graph

    Attributes
    ----------
    order : ndarray of int64, shape (n,)
        Node ids in forward execution order (for traced graphs, the recorded order).
    value_bytes, state_bytes : ndarray of int64, shape (n,)
        Bytes of each node's outputs and of its function's saved state.
    grad_inputs : list of list of (int, int, int)
        ``grad_inputs[w]``: per argument of w that is a node's output and gets a gradient,
        ``(id, output index, bytes)``; w's backward adds one gradient array of that size.
    backward, stochastic, self_read : ndarray of bool, shape (n,)
        Whether the node's backward runs, whether its state survives a drop, whether its
        backward reads its own output.
    reads : list of frozenset of int
        ``reads[w]``: ids of the predecessors whose values w's backward reads.
    rank : ndarray of int64, shape (n,)
        Chainer's rank: 0 for a function of external inputs only, else 1 + the largest rank of
        a predecessor. The backward pass processes the highest rank first.

    Raises
    ------
    StrategyError
        If an ``inputs`` attribute names a label that is not a predecessor in G.
    """

    def __init__(self, graph):
        G = self.graph = graph
        n = G.n
        A = [G.attrs.get(v, {}) for v in G.labels]
        traced = all("inputs" in a for a in A)
        if traced and all(isinstance(v, int) for v in G.labels):
            self.order = np.array(sorted(range(n), key=G.labels.__getitem__), dtype=np.int64)
        else:
            self.order = np.arange(n, dtype=np.int64)
        M = G.memory
        self.value_bytes = np.array([int(a.get("output_bytes", M[i])) for i, a in enumerate(A)],
                                    dtype=np.int64)
        self.state_bytes = np.array([int(a.get("state_bytes", 0)) for a in A], dtype=np.int64)
        req = [bool(a.get("requires_grad", True)) for a in A]
        out_bytes = []
        for i, a in enumerate(A):
            outs = a.get("outputs")
            if outs and all(o is not None for o in outs):
                out_bytes.append([int(np.prod(sh, dtype=np.int64)) * np.dtype(dt).itemsize
                                  for sh, dt in outs])
            else:
                out_bytes.append([int(self.value_bytes[i])])
        self.backward = np.array([bool(a.get("backward", True)) for a in A])
        self.stochastic = np.array([bool(a.get("stochastic", False)) for a in A])
        self.self_read = np.array([bool(a.get("retained_outputs", [0])) for a in A])
        self.reads, self.grad_inputs = [], []
        for i, a in enumerate(A):
            preds = set(G.preds(i).tolist())
            if "inputs" not in a:
                self.reads.append(frozenset(preds))
                self.grad_inputs.append([(j, 0, out_bytes[j][0]) for j in sorted(preds)
                                         if req[j]])
                continue
            keep = a.get("retained_inputs")
            r, gi = set(), []
            for p, x in enumerate(a["inputs"]):
                if x[0] != "node":
                    continue
                j = G.index.get(x[1])
                if j is None or j not in preds or not 0 <= x[2] < len(out_bytes[j]):
                    raise StrategyError(f"node {G.labels[i]!r}: input {p} names {x[1:]!r}, "
                                        "which is not an output of a predecessor in the graph")
                if req[j]:
                    gi.append((j, int(x[2]), out_bytes[j][x[2]]))
                if keep is None or p in keep:
                    r.add(j)
            self.reads.append(frozenset(r))
            self.grad_inputs.append(gi)
        rank = np.zeros(n, dtype=np.int64)
        for i in self.order:
            ps = G.preds(i)
            if ps.size:
                rank[i] = rank[ps].max() + 1
        self.rank = rank


@dataclass
class LivenessReport:
    """Result of :func:`simulate` (all memory in bytes, not counting parameters, their
    gradients or the model inputs).

    Attributes
    ----------
    peak : int
        Highest bytes in use at any step.
    forward_peak, backward_peak : int
        The same within the forward and the backward pass.
    peak_at : tuple
        ``(phase, label)`` of the step that reached the peak; phase is "forward", "recompute"
        or "backward".
    boundary_peak : int
        The peak over function boundaries only, leaving out the moments inside a recomputation
        (what a sampler in the hooks' pre- and post-processes of forward and backward sees).
    final : int
        Bytes still held after the backward pass: the values without successors (the loss),
        and what a function whose backward never runs keeps.
    recomputed : list
        Labels recomputed, in order (a node at most once).
    recompute_cost : int
        Their total cost T, cost units (at most the strategy's eq. (1) overhead: a dropped value
        no backward step needs is not recomputed).
    """

    peak: int
    forward_peak: int
    backward_peak: int
    peak_at: tuple
    boundary_peak: int = 0
    final: int = 0
    recomputed: list = field(default_factory=list)
    recompute_cost: int = 0


def simulate(strategy, model=None):
    """Replay `strategy` as an executor with liveness analysis runs it; return its peak memory.

    Forward: nodes run in ``model.order``; a value of ``V_i ∖ ∂(L_i)`` (i < k) is dropped once all
    its consumers have run, a value no backward step and no dropped consumer needs is freed then
    too. Backward: functions run highest rank first; before a function's backward, the dropped
    values it reads (and, transitively, the dropped inputs needed to recompute them) are
    recomputed from the cache, and a value read only to recompute another is freed as soon as
    that one is recomputed; after it, its output gradient and state are freed, and so is every
    value whose last use it was. This is the policy of :class:`chainer_ext.RecomputeHook`.

    Parameters
    ----------
    strategy : CanonicalStrategy
    model : LivenessModel, optional
        Built from ``strategy.graph`` if not given (reuse one for many strategies).

    Returns
    -------
    LivenessReport

    Raises
    ------
    TypeError
        If `strategy` is not a CanonicalStrategy.
    StrategyError
        If `model` was built for another graph.

    References
    ----------
    .. [1] Kusumoto et al., NeurIPS 2019, Sec. 3 (canonical strategy; liveness analysis) and
       footnote 2 (eq. (2) overestimates the memory of an executor with liveness analysis).

    Examples
    --------
    >>> g = ls.Graph.chain(6, memory=10)
    >>> s = ls.CanonicalStrategy(g, [set(range(6))])   # no recomputation
    >>> s.peak_memory, ls.simulate(s).peak           # eq. (2) counts every gradient at once
    (120, 80)
    """
    if not isinstance(strategy, CanonicalStrategy):
        raise TypeError(f"strategy must be a CanonicalStrategy, got {type(strategy).__name__}")
    G = strategy.graph
    m = LivenessModel(G) if model is None else model
    if m.graph is not G and m.graph != G:
        raise StrategyError("the LivenessModel was built for another graph")
    return _Simulation(G, m, strategy).run()


class _Simulation:
    """One replay of a strategy (see :func:`simulate`); mirrors RecomputeHook's bookkeeping."""

    def __init__(self, G, m, s):
        n = G.n
        self.G, self.m = G, m
        k = len(s._segment_masks)
        seg = np.zeros(n, dtype=np.int64)
        for i, Vi in enumerate(s._segment_masks):
            seg[Vi] = i
        bnd = np.zeros(n, dtype=bool)
        for Bi in s._cached_masks:
            bnd |= Bi
        self.succ = succ = [sorted(set(G.succs(v).tolist())) for v in range(n)]
        self.preds = [sorted(set(G.preds(v).tolist())) for v in range(n)]
        self.sink = [not succ[v] for v in range(n)]
        drop = [bool(seg[v] < k - 1 and not bnd[v] and succ[v]) for v in range(n)]
        bw, reads = m.backward, m.reads
        uses, bw_uses = [], []
        for v in range(n):
            bu = {v} if bw[v] and m.self_read[v] else set()
            bu |= {w for w in succ[v] if bw[w] and v in reads[w]}
            uses.append(bu | {w for w in succ[v] if drop[w]})
            bw_uses.append(bu)
        self.used_by = [[] for _ in range(n)]
        self.recompute_only = [set() for _ in range(n)]
        for v in range(n):
            for w in uses[v]:
                self.used_by[w].append(v)
                if w not in bw_uses[v]:
                    self.recompute_only[w].add(v)
        self.count = [len(u) for u in uses]
        cache = [not drop[v] and any(drop[w] for w in succ[v]) for v in range(n)]
        # kept by Chainer itself past the forward pass: read by a backward that never runs
        held = [any(not bw[w] and v in reads[w] for w in succ[v])
                or (not bw[v] and m.self_read[v]) for v in range(n)]
        self.free_after_forward = [not drop[v] and self.count[v] == 0 and not self.sink[v]
                                   and not cache[v] and not held[v] for v in range(n)]
        self.drop = drop
        self.used = 0
        self.peak = 0
        self.peak_at = None
        self.boundary_peak = 0
        self.phase_peak = {"forward": 0, "backward": 0}
        self.val = [False] * n
        self.state = [False] * n
        self.grads = [{} for _ in range(n)]  # per node: output index -> [arrays, bytes each]
        self.pos = {int(v): i for i, v in enumerate(m.order)}
        self.discarded = [False] * n
        self.bw_done = [False] * n
        self.recomputed_flag = [False] * n
        self.recomputed = []

    # -- accounting ------------------------------------------------------------------------------

    def _sample(self, phase, v):
        if self.used > self.peak:
            self.peak, self.peak_at = self.used, (phase, self.G.labels[v])
        key = "forward" if phase == "forward" else "backward"
        if self.used > self.phase_peak[key]:
            self.phase_peak[key] = self.used
        if phase != "recompute" and self.used > self.boundary_peak:
            self.boundary_peak = self.used

    def _alloc_value(self, v):
        if not self.val[v]:
            self.val[v] = True
            self.used += int(self.m.value_bytes[v])

    def _free_value(self, v):
        if self.val[v]:
            self.val[v] = False
            self.used -= int(self.m.value_bytes[v])

    def _alloc_state(self, v):
        if not self.state[v]:
            self.state[v] = True
            self.used += int(self.m.state_bytes[v])

    def _free_state(self, v):
        if self.state[v]:
            self.state[v] = False
            self.used -= int(self.m.state_bytes[v])

    def _release(self, v):
        # the executor's free(): no effect on the values it never drops (the outputs)
        if not self.sink[v]:
            self._free_value(v)

    # -- passes ----------------------------------------------------------------------------------

    def run(self):
        G, m = self.G, self.m
        fwd_left = [len(s) for s in self.succ]
        for j in m.order:
            self._alloc_value(j)
            self._alloc_state(j)
            self._sample("forward", j)
            for i in self.preds[j]:
                fwd_left[i] -= 1
                if fwd_left[i]:
                    continue
                if self.drop[i]:
                    self._free_value(i)
                    if not m.stochastic[i]:
                        self._free_state(i)
                    self.discarded[i] = True
                elif self.free_after_forward[i]:
                    self._free_value(i)
        # backward: Chainer's heap of (-rank, insertion order)
        heap, seen = [], set()

        def push(v):
            if v not in seen and m.backward[v]:
                seen.add(v)
                heapq.heappush(heap, (-int(m.rank[v]), len(seen), v))

        for v in m.order[::-1]:
            if self.sink[v]:
                push(int(v))
        while heap:
            _, _, j = heapq.heappop(heap)
            # Chainer pops j's output gradients, summing (F.add) those of several consumers
            for pending in self.grads[j].values():
                cnt, b = pending
                if cnt > 1:
                    self.used += b
                    self._sample("backward", j)
                    self.used -= cnt * b
                    pending[0] = 1
            need = []
            if self.discarded[j] and (m.self_read[j] or m.state_bytes[j] > 0):
                need.append(j)
            need += [p for p in m.reads[j] if self.discarded[p]]
            if need:
                self._recompute(need)
            for p, k, b in m.grad_inputs[j]:  # one new gradient array per argument
                self.grads[p].setdefault(k, [0, b])[0] += 1
                self.used += b
            self._sample("backward", j)
            self.used -= sum(b for _, b in self.grads[j].values())
            self.grads[j].clear()
            self.bw_done[j] = True
            self._free_state(j)
            for v in self.used_by[j]:
                if self.recomputed_flag[j] and v in self.recompute_only[j]:
                    continue
                self.count[v] -= 1
                if self.count[v] == 0:
                    self._release(v)
            for p in self.preds[j]:
                push(p)
        return LivenessReport(
            peak=int(self.peak), forward_peak=int(self.phase_peak["forward"]),
            backward_peak=int(self.phase_peak["backward"]), peak_at=self.peak_at,
            boundary_peak=int(self.boundary_peak), final=int(self.used),
            recomputed=[G.labels[v] for v in self.recomputed],
            recompute_cost=int(sum(int(G.cost[v]) for v in self.recomputed)))

    def _keep(self, v, need):
        return (self.count[v] > 0 or v in need
                or (self.m.state_bytes[v] > 0 and self.m.backward[v] and not self.bw_done[v]))

    def _recompute(self, need):
        R, stack = set(), list(need)
        while stack:
            v = stack.pop()
            if v in R:
                continue
            R.add(v)
            stack.extend(p for p in self.preds[v] if self.discarded[p] and p not in R)
        todo = sorted(R, key=self.pos.__getitem__)
        for v in todo:
            self._alloc_value(v)
            self._alloc_state(v)
            self._sample("recompute", v)
            self.recomputed.append(v)
            self.recomputed_flag[v] = True
            for u in self.recompute_only[v]:
                self.count[u] -= 1
                if self.count[u] == 0:  # its value has no use left (its state is separate)
                    if u in R:
                        self._free_value(u)
                    else:
                        self._release(u)
        for v in todo:
            if self._keep(v, need):
                self.discarded[v] = False
            if self.count[v] == 0:  # kept for its state only, or not kept: the value is garbage
                self._free_value(v)
            if self.bw_done[v] or not self.m.backward[v]:
                self._free_state(v)


def _key(s):
    """Hashable identity of a strategy's lower-set sequence (node ids per lower set)."""
    return tuple(tuple(np.flatnonzero(mk)) for mk in s._masks)


def _budget_ladder(lo, hi, n):
    """`n` integer budgets from `lo` to `hi` bytes, spaced geometrically, distinct."""
    if n <= 1 or hi <= lo:
        return [lo]
    r = (hi / lo) ** (1.0 / (n - 1)) if lo > 0 else None
    out = []
    for i in range(n):
        b = hi if i == n - 1 else (int(math.ceil(lo * r ** i)) if r else lo + (hi - lo) * i // (n - 1))
        if not out or b > out[-1]:
            out.append(b)
    return out


def solve_liveness(G, method="exact", modes=("time", "memory"), *, n_budgets=12, refine=True,
                   max_budget=None, time_limit=None, model=None, return_candidates=False,
                   **solve_kwargs):
    """Plan with the paper's DP at several budgets; keep the lowest simulated peak.

    The approximate DP (Sec. 4.3-4.4) is run in each of `modes` at `n_budgets` budgets spaced
    geometrically from its minimal budget (eq. 2) to the eq. (2) peak of the one-segment
    strategy [V] (or `max_budget`), then (with `refine`) at `n_budgets` budgets between the two
    ladder steps around the best one found. For ``method="exact"`` the exact DP (Sec. 4.2), which
    can take seconds per budget, is then run in both modes at its own minimal budget, and in the
    mode of the approximate search's best strategy at ``n_budgets // 2`` (at least 3) budgets
    within one ladder step of that strategy's budget; the approximate search's strategies stay
    candidates (the pruned family's lower sets are lower sets of G), so the exact search is never
    worse than the approximate one, and its result may carry ``method="approx"``. Each
    strategy is replayed by :func:`simulate`; the one with the lowest simulated peak wins, ties
    going to the lower overhead (eq. 1). This is a search over budgets, not an optimum over all
    lower-set sequences of the simulated peak.

    Parameters
    ----------
    G : Graph
    method : {"exact", "approx"}
    modes : sequence of {"time", "memory"}
    n_budgets : int
        Budgets tried per mode and ladder (>= 1).
    refine : bool
        Search a second, finer ladder around the best budget of the first.
    max_budget : int, optional
        Largest budget tried, bytes.
    time_limit : float, optional
        Seconds for the whole call; raise :class:`SearchLimitError` past it.
    model : LivenessModel, optional
    return_candidates : bool
        Also return every distinct strategy tried with its :class:`LivenessReport`.
    **solve_kwargs
        Passed to :func:`lowerset.solve` (``max_lower_sets``).

    Returns
    -------
    CanonicalStrategy, or (CanonicalStrategy, list of (CanonicalStrategy, LivenessReport))
        The returned strategy also carries ``liveness`` (its :class:`LivenessReport`).

    Raises
    ------
    ValueError
        If `modes` is empty or unknown, or `n_budgets` < 1, or `max_budget` is not a positive
        integer.
    SearchLimitError
        If the time limit passes or the graph has too many lower sets.

    References
    ----------
    .. [1] Kusumoto et al., NeurIPS 2019, Sec. 4.2-4.4 (the DP, its budget, and the search for
       coarse partitions that liveness analysis favours), Sec. 3 and footnote 2 (liveness
       analysis).

    Examples
    --------
    >>> g = ls.Graph.chain(6, memory=10)
    >>> s = ls.solve_liveness(g)
    >>> s.liveness.peak <= ls.simulate(ls.solve(g, mode="time")).peak
    True
    """
    from .dp import MODES, min_budget, solve

    modes = tuple(modes)
    if not modes or any(md not in MODES for md in modes):
        raise ValueError(f"modes must be a non-empty sequence of {MODES}, got {modes!r}")
    if isinstance(n_budgets, bool) or not isinstance(n_budgets, numbers.Integral) \
            or n_budgets < 1:
        raise ValueError(f"n_budgets must be a positive integer, got {n_budgets!r}")
    if max_budget is not None and (isinstance(max_budget, bool)
                                   or not isinstance(max_budget, numbers.Integral)
                                   or max_budget <= 0):
        raise ValueError(f"max_budget must be a positive integer of bytes, got {max_budget!r}")
    start = time.perf_counter()

    def remaining():
        if time_limit is None:
            return None
        left = time_limit - (time.perf_counter() - start)
        if left <= 0:
            raise SearchLimitError(f"time limit of {time_limit:.3g} s exceeded",
                                   limit="time_limit")
        return left

    if model is None:
        model = LivenessModel(G)
    lo = min_budget(G, method, time_limit=remaining(),
                    **{k: v for k, v in solve_kwargs.items() if k == "max_lower_sets"})
    hi = CanonicalStrategy(G, [np.ones(G.n, dtype=bool)]).peak_memory
    if max_budget is not None:
        if max_budget < lo:
            raise InfeasibleBudgetError(max_budget, lo, method=method)
        hi = min(hi, int(max_budget))
    seen, cands, tried = set(), [], set()

    def run_ladder(budgets):
        for budget in budgets:
            if budget in tried:
                continue
            tried.add(budget)
            for mode in modes:
                s = solve(G, budget, mode=mode, method=method, time_limit=remaining(),
                          **solve_kwargs)
                key = _key(s)
                if key not in seen:
                    seen.add(key)
                    cands.append((s, simulate(s, model)))

    def best_candidate():
        return min(cands, key=lambda c: (c[1].peak, c[0].overhead))

    ladder = _budget_ladder(lo, max(lo, hi), int(n_budgets))
    if method == "exact":
        # the exact DP costs up to seconds per budget on graphs with many lower sets: search the
        # approximate family's ladder first, then the exact DP around the budget it chose
        seed, seed_cands = solve_liveness(G, "approx", modes, n_budgets=n_budgets,
                                          refine=refine, max_budget=max_budget,
                                          time_limit=remaining(), model=model,
                                          return_candidates=True)
        for c in seed_cands:  # lower sets of the pruned family are lower sets of G
            seen.add(_key(c[0]))
            cands.append(c)
        step = (ladder[-1] / ladder[0]) ** (1.0 / max(len(ladder) - 1, 1)) if lo > 0 else 1.0
        b = seed.budget
        run_ladder([lo])  # never worse than the paper's strategies at the minimal budget
        modes = (seed.mode,)  # a time-centric exact DP at a large budget is the slow one
        run_ladder(_budget_ladder(max(lo, int(b / step)), max(lo, min(hi, int(b * step))),
                                  max(3, int(n_budgets) // 2)))
        refine = False
    else:
        run_ladder(ladder)
    if refine and len(ladder) > 2:
        # one finer ladder between the neighbours of the budget that gave the best strategy
        b = best_candidate()[0].budget
        i = max(j for j, x in enumerate(ladder) if x <= b)
        run_ladder(_budget_ladder(ladder[max(i - 1, 0)], ladder[min(i + 1, len(ladder) - 1)],
                                  int(n_budgets)))
    best, rep = best_candidate()
    best.liveness = rep
    best.planner_seconds = time.perf_counter() - start
    return (best, cands) if return_candidates else best
