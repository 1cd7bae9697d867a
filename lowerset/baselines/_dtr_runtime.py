"""DTR's runtime policy over one training step: a cache of arrays under a byte budget.

The step's program is fixed by the graph's :class:`~lowerset.ExecutionFacts`: every forward in
``forward_order``, then every backward in ``backward_order``. The runtime knows only what a
framework-level cache knows while the program runs: which arrays exist, their bytes, the
functions that made them and their costs, and the clock. Its policy (Kirisame et al., Sec. 3):

- before a function runs, the arrays it reads are pinned; each one that is evicted is
  rematerialized by replaying the function that made it, whose own evicted arguments are
  rematerialized first (recursively, each pinned while its consumer is replayed);
- before anything is allocated (a function's outputs, state, gradients and workspace, as the
  fold of :mod:`lowerset.scheduling` counts them), unpinned storages are evicted, lowest score
  first (:mod:`._dtr_heuristics`), until the allocation fits the budget;
- an array that no later call of the program reads (nor the step's code holds,
  ``held_until``) is freed at once (eager eviction); a freed array that is later
  rematerialized for a replay stays cached until it is evicted (simrd does the same).

Arrays are "slots": output ``o`` of the flattened facts (``0 .. n_out-1``) or the state of
node ``v`` (``n_out + v``). The unit of eviction is a storage: an output that owns its memory
with the views of it, or a state. Never evicted: returned outputs, outputs and state of a
pinned function or of an in-place function and the array it overwrites (a replay would repeat
a side effect or read an overwritten value), the state of a stochastic function (its random
draws), gradients (the fold keeps them as pending sums), parameters and inputs. A stochastic
function's outputs are evicted only while its state lives; an array whose rematerialization
would need a freed array that cannot be made again is not evicted, and such an array is kept
past its last read while an evicted array may need it.

References
----------
.. [1] Kirisame et al., "Dynamic Tensor Rematerialization", ICLR 2021, Sec. 3 (the runtime,
   Algorithm 1: PerformOp, Rematerialize, AllocateBuffer, eager eviction).
.. [2] simrd: ``uwsampl/dtr-prototype`` ``simrd/simrd/runtime/v2.py`` (``RuntimeV2Optimized``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .. import _schedule_kernels as _k
from ..exceptions import InfeasibleBudgetError
from ..graph import Graph
from ..scheduling import EventArrays, EventFold, _inplace_groups, flat_facts
from ..units import format_size
from . import _dtr_heuristics as _h

NEVER = np.iinfo(np.int64).max


class Static:
    """What the runtime derives once from a graph's facts (ids as in :data:`Flat`).

    Attributes
    ----------
    f : Flat
    n_slot : int
        ``n_out + n``.
    prod : ndarray of int64, shape (n_slot,)
        The node that makes each slot.
    storage : ndarray of int64, shape (n_slot,)
        Its storage (the slot id of the owning output, or ``n_out + v`` for a state); -1 for a
        view of an external array or a state of 0 bytes.
    members : list of list of int
        Per storage, its slots (the owner first).
    size, cost : ndarray, shape (n_slot,)
        Bytes (int64) and cost units (float64) per storage.
    evictable : ndarray of bool, shape (n_slot,)
        Storages the runtime may ever evict.
    nb_ptr, nb_idx : ndarray of int64
        Neighbour storages (CSR, see :func:`._dtr_heuristics.choose`).
    fwd_reads, bwd_reads, remat_reads : list of list of int
        Per node, the slots its forward, its backward and a replay of its forward read.
    death : ndarray of int64, shape (n_slot,)
        The program position (forward positions, then ``n`` + backward positions) after which
        nothing reads the slot; :data:`NEVER` for a returned output.
    consumers : list of list of int
        Per slot, the slots that a replay may need it for (outputs and state of the functions
        that read it; a stochastic function's outputs for its state).
    fragile : bool
        Some function cannot be replayed at some point (pinned, in place, stochastic): the
        runtime checks that what it evicts can be made again.
    """

    def __init__(self, g: Graph) -> None:
        f = self.f = flat_facts(g)
        n, n_out = f.n, f.n_out
        self.n_slot = n_out + n
        self.prod = np.concatenate([f.out_node, np.arange(n)]).astype(np.int64)
        self._storages(f)
        self._frozen(g, f)
        self._reads(f)
        self._death(f)
        self._neighbours(g, f)

    def _storages(self, f):
        n_out = f.n_out
        storage = np.full(self.n_slot, -1, dtype=np.int64)
        for o in range(n_out):
            r = o
            while f.out_view[r] >= 0:
                r = int(f.out_view[r])
            storage[o] = r if f.out_view[r] == -1 else -1
        has_state = f.state > 0
        storage[n_out:][has_state] = n_out + np.flatnonzero(has_state)
        self.storage = storage
        self.members: list[list[int]] = [[] for _ in range(self.n_slot)]
        for a in np.flatnonzero(storage >= 0).tolist():
            self.members[int(storage[a])].append(a)
        self.size = np.zeros(self.n_slot, dtype=np.int64)
        self.size[:n_out] = f.out_bytes
        self.size[n_out:] = f.state

    def _frozen(self, g, f):
        """Nodes never replayed; storages never evicted."""
        frozen = np.array([nf.pinned for nf in g.facts.nodes], dtype=bool)
        groups = _inplace_groups(g.facts)
        if groups is not None:
            frozen |= np.bincount(groups, minlength=f.n)[groups] > 1
        self.frozen = frozen
        self.stoch = f.stoch & (f.state > 0)
        returned = np.zeros(self.n_slot, dtype=bool)
        returned[:f.n_out] = f.returned
        ok = np.zeros(self.n_slot, dtype=bool)
        for s, mem in enumerate(self.members):
            if mem:
                ok[s] = (self.size[s] > 0 and not returned[mem].any()
                         and not frozen[self.prod[mem]].any()
                         and not (s >= f.n_out and self.stoch[s - f.n_out]))
        self.evictable = ok
        self.fragile = bool(frozen.any() or self.stoch.any())

    def _reads(self, f):
        n_out = f.n_out
        args = [[int(x) for x in f.arg_out[f.arg_ptr[v]:f.arg_ptr[v + 1]] if x >= 0]
                for v in range(f.n)]
        self.fwd_reads = args
        self.bwd_reads = []
        self.remat_reads = []
        for v in range(f.n):
            r = [int(f.arg_out[a]) for a in f.rarg_idx[f.rarg_ptr[v]:f.rarg_ptr[v + 1]]
                 if f.arg_out[a] >= 0]
            r += [int(o) for o in f.rout_idx[f.rout_ptr[v]:f.rout_ptr[v + 1]]]
            if f.state[v] > 0:
                r.append(n_out + v)
            self.bwd_reads.append(r)
            self.remat_reads.append(args[v] + ([n_out + v] if self.stoch[v] else []))

    def _death(self, f):
        n, n_out = f.n, f.n_out
        death = np.full(self.n_slot, -1, dtype=np.int64)
        death[:n_out] = f.fpos[f.out_node]
        death[n_out:] = f.fpos
        death[:n_out] = np.maximum(death[:n_out], f.held)
        for p, v in enumerate(f.fwd.tolist()):
            for a in self.fwd_reads[v]:
                death[a] = max(death[a], p)
        for q, v in enumerate(f.bwd.tolist()):
            for a in self.bwd_reads[v]:
                death[a] = max(death[a], n + q)
        death[:n_out][f.returned] = NEVER
        self.death = death
        self.dying: list[list[int]] = [[] for _ in range(n + f.bwd.shape[0])]
        order = np.lexsort((np.arange(self.n_slot), f.fpos[self.prod],
                            np.arange(self.n_slot) < n_out))  # states first, forward order
        for a in order.tolist():
            if death[a] != NEVER and (a < n_out or f.state[a - n_out] > 0):
                self.dying[int(death[a])].append(a)

    def _neighbours(self, g, f):
        n_out = f.n_out
        users: list[list[int]] = [[] for _ in range(n_out)]  # nodes reading each output
        for v in range(f.n):
            for a in self.fwd_reads[v]:
                users[a].append(v)
        made = [list(range(int(f.out_ptr[v]), int(f.out_ptr[v + 1])))
                + ([n_out + v] if f.state[v] > 0 else []) for v in range(f.n)]
        self.consumers = [sorted({b for w in users[a] for b in made[w]}) for a in range(n_out)]
        self.consumers += [made[v][:-1] if self.stoch[v] else [] for v in range(f.n)]
        self.cost = np.zeros(self.n_slot, dtype=np.float64)
        ptr, idx = [0], []
        for s, mem in enumerate(self.members):
            nodes = sorted({int(self.prod[a]) for a in mem})
            self.cost[s] = float(g.cost[nodes].sum()) if nodes else 0.0
            near = {int(self.storage[b]) for u in nodes for b in self.fwd_reads[u]}
            near |= {int(self.storage[b]) for a in mem if a < n_out for b in self.consumers[a]}
            near -= {s, -1}
            idx += sorted(near)
            ptr.append(len(idx))
        self.nb_ptr = np.array(ptr, dtype=np.int64)
        self.nb_idx = np.array(idx, dtype=np.int64)


class Events:
    """The events so far in growable int64 arrays, laid out as :attr:`lowerset.Schedule.arrays`
    (``optr`` holds absolute offsets into ``oidx``)."""

    def __init__(self, cap: int = 1024) -> None:
        self.kind = np.empty(cap, dtype=np.int64)
        self.node = np.empty(cap, dtype=np.int64)
        self.nbytes = np.empty(cap, dtype=np.int64)
        self.optr = np.zeros(cap + 1, dtype=np.int64)
        self.oidx = np.empty(cap, dtype=np.int64)
        self.n = 0

    def put(self, kind: int, v: int, nbytes: int, outs: Sequence[int]) -> None:
        """Write event ``n`` (not counted until :meth:`add`)."""
        i = self.n
        if i + 1 >= self.kind.shape[0] or self.optr[i] + len(outs) > self.oidx.shape[0]:
            self._grow(len(outs))
        self.kind[i] = kind
        self.node[i] = v
        self.nbytes[i] = nbytes
        lo = self.optr[i]
        self.oidx[lo:lo + len(outs)] = outs
        self.optr[i + 1] = lo + len(outs)

    def add(self, kind: int, v: int, nbytes: int, outs: Sequence[int]) -> None:
        self.put(kind, v, nbytes, outs)
        self.n += 1

    def window(self, lo: int, hi: int) -> EventArrays:
        """Events ``lo .. hi-1`` as fold arguments (views)."""
        return (self.kind[lo:hi], self.node[lo:hi], self.nbytes[lo:hi], self.optr[lo:hi + 1],
                self.oidx)

    def arrays(self) -> EventArrays:
        """Copies of the events, ``optr`` from 0."""
        n = self.n
        return (self.kind[:n].copy(), self.node[:n].copy(), self.nbytes[:n].copy(),
                self.optr[:n + 1].copy(), self.oidx[:self.optr[n]].copy())

    def _grow(self, extra):
        cap = 2 * self.kind.shape[0]
        for name in ("kind", "node", "nbytes"):
            setattr(self, name, np.concatenate([getattr(self, name), np.empty(cap // 2,
                                                                              dtype=np.int64)]))
        self.optr = np.concatenate([self.optr, np.zeros(cap // 2, dtype=np.int64)])
        self.oidx = np.concatenate([self.oidx, np.empty(self.oidx.shape[0] + extra,
                                                        dtype=np.int64)])


class Runtime:
    """One simulated step of DTR (see the module docstring).

    Parameters
    ----------
    g : Graph
    budget : int
        Bytes, the whole step (resident included).
    heuristic : str
        One of :data:`._dtr_heuristics.HEURISTICS`.
    max_overhead : float
        Thrashing bound: the rematerializations may cost at most this times T(V).

    Attributes
    ----------
    events : Events
    remats : ndarray of int64, shape (n,)
        Rematerializations per node.
    evictions : int
        Storages evicted.
    """

    def __init__(self, g: Graph, budget: int, heuristic: str, max_overhead: float) -> None:
        self.g = g
        S = self.S = Static(g)
        self.budget = budget
        self.code = _h.heuristic_code(heuristic)
        self.limit = max_overhead * float(g.total_cost())
        self.fold = EventFold(g)
        self.events = Events()
        self.folded = 0
        n_slot = S.n_slot
        self.mat = np.zeros(n_slot, dtype=bool)       # slot is material
        self.ever = np.zeros(n_slot, dtype=bool)      # slot made at least once
        self.held = np.zeros(n_slot, dtype=np.int64)  # material slots per storage
        self.made = np.zeros(n_slot, dtype=bool)      # storage made at least once
        self.lock = np.zeros(n_slot, dtype=np.int64)
        self.blocked = np.zeros(n_slot, dtype=bool)
        self.last = np.full(n_slot, -np.inf)
        self.stamp = np.zeros(n_slot, dtype=np.int64)
        self.ecn = np.full(n_slot, -1, dtype=np.int64)
        self.eq = _h.EqClasses()
        self.clock = 1.0
        self.n_stamp = 0
        self.remats = np.zeros(g.n, dtype=np.int64)
        self.remat_cost = 0.0
        self.evictions = 0
        self.retained: list[int] = []
        self.position = 0
        # plain lists for the per-event Python code
        f = S.f
        self.out_ptr = f.out_ptr.tolist()
        self.out_node = f.out_node.tolist()
        self.out_bytes = f.out_bytes.tolist()
        self.state = f.state.tolist()
        self.fpos = f.fpos.tolist()
        self.n_out = f.n_out
        self.storage = S.storage.tolist()
        self.size = S.size.tolist()
        self.cost = [float(c) for c in g.cost.tolist()]
        self.nb = [S.nb_idx[S.nb_ptr[s]:S.nb_ptr[s + 1]].tolist() for s in range(n_slot)]

    # -- the program ------------------------------------------------------------------------

    def run(self) -> Runtime:
        """Run the step; raise InfeasibleBudgetError where DTR cannot go on."""
        f = self.S.f
        for p, v in enumerate(f.fwd.tolist()):
            self._call(_k.FORWARD, v, p, self.S.fwd_reads[v])
        for q, v in enumerate(f.bwd.tolist()):
            self._call(_k.BACKWARD, v, f.n + q, self.S.bwd_reads[v])
        self.fold.apply(*self.events.window(self.folded, self.events.n))
        self.folded = self.events.n
        if self.fold.high > self.budget:  # the evictions freed less than they should have
            raise RuntimeError(f"DTR runtime: peak {self.fold.high} bytes above the budget")
        return self

    def _call(self, kind, v, p, reads):
        f = self.S.f
        self.position = p
        self._acquire(reads)
        lo, hi = self.out_ptr[v], self.out_ptr[v + 1]
        if kind == _k.FORWARD:
            outs = list(range(hi - lo))
            nbytes = sum(self.out_bytes[lo:hi]) + self.state[v]
        else:
            outs = []
            nbytes = int(f.out_bytes[lo:hi][f.grad_out[lo:hi]].sum())
        self._room(kind, v, nbytes, outs)
        self.events.add(kind, v, nbytes, outs)
        self.clock += self.cost[v]
        if kind == _k.FORWARD:  # the outputs join the pool before the reads rejoin it
            self._materialized(list(range(lo, hi)) + ([self.n_out + v] if self.state[v] else []),
                               fresh=True)
        for a in reads:
            self._unlock(a)
        if kind == _k.FORWARD and p == f.n - 1:
            self._seeds()
        elif kind == _k.BACKWARD and f.grad_out[lo:hi].any():
            self.events.add(_k.FREE_GRAD, v, nbytes, [])
        self._free_dead(self.S.dying[p])
        if self.retained:
            self._recheck_retained()

    def _seeds(self):
        f = self.S.f
        for o in np.flatnonzero(f.seed).tolist():
            u = self.out_node[o]
            outs = [o - self.out_ptr[u]]
            self._room(_k.SEED_GRAD, u, self.out_bytes[o], outs)
            self.events.add(_k.SEED_GRAD, u, self.out_bytes[o], outs)

    # -- pinning and rematerialization ---------------------------------------------------------

    def _acquire(self, reads):
        """Pin the slots a call reads, rematerializing the evicted ones."""
        missing = self._touch_and_lock(reads)
        for a in missing:
            if not self.mat[a]:
                self._rematerialize(a)
            self._lock(a)

    def _touch_and_lock(self, reads):
        """Mark `reads` accessed now, pin the material ones; return the others."""
        missing = []
        for a in reads:
            s = self.storage[a]
            if s >= 0:
                self.last[s] = self.clock
            if self.mat[a]:
                self._lock(a)
            else:
                missing.append(a)
        return missing

    def _rematerialize(self, a):
        """Make slot `a` material again by replaying its function, and what that needs first
        (depth first, without recursion: chains of evicted arrays can be as long as G)."""
        prod = self.S.prod
        frames = [self._frame(int(prod[a]))]
        while frames:
            u, reads, missing = frames[-1]
            while missing and self.mat[missing[-1]]:
                self._lock(missing.pop())
            if missing:
                frames.append(self._frame(int(prod[missing[-1]])))
                continue
            self._replay(u)
            for x in reads:
                self._unlock(x)
            frames.pop()

    def _frame(self, u):
        """Start replaying node `u`: (u, its reads, the evicted ones to make first, last
        first)."""
        S = self.S
        if S.frozen[u] or (S.stoch[u] and not self.mat[self.n_out + u]):
            raise RuntimeError(f"DTR runtime: node {self.g.labels[u]!r} cannot be replayed "
                               "(an eviction check failed)")
        reads = S.remat_reads[u]
        missing = self._touch_and_lock(reads)
        return u, reads, missing[::-1]

    def _replay(self, u):
        """A REMATERIALIZE of `u`: it makes the outputs and state of `u` that are not
        material."""
        self._room(_k.REMATERIALIZE, u, 0, ())
        lo, hi = self.out_ptr[u], self.out_ptr[u + 1]
        made = [o for o in range(lo, hi) if not self.mat[o]]
        s = self.n_out + u
        if self.state[u] and not self.S.stoch[u] and not self.mat[s]:
            made.append(s)
        nbytes = sum(self.size[a] for a in made)
        self.events.add(_k.REMATERIALIZE, u, nbytes, [o - lo for o in made if o < hi])
        self.clock += self.cost[u]
        self.remats[u] += 1
        self.remat_cost += self.cost[u]
        self._materialized(made, fresh=False)
        if self.remat_cost > self.limit:
            raise self._infeasible(
                f"DTR thrashes: its rematerializations cost {self.remat_cost:.0f} cost units, "
                f"past {self.limit / float(self.g.total_cost()):g} x T(V) = {self.limit:.0f}, "
                f"while replaying node {self.g.labels[u]!r}")

    def _lock(self, a):
        s = self.storage[a]
        if s >= 0:
            self.lock[s] += 1

    def _unlock(self, a):
        s = self.storage[a]
        if s >= 0:
            self.lock[s] -= 1
            if self.lock[s] == 0 and self.held[s] > 0:
                self._stamp(s)

    def _stamp(self, s):
        self.n_stamp += 1
        self.stamp[s] = self.n_stamp

    def _materialized(self, slots, fresh):
        """Slots made by a forward (`fresh`) or a replay."""
        for a in slots:
            self.mat[a] = True
            self.ever[a] = True
            s = self.storage[a]
            if s < 0:
                continue
            if self.held[s] == 0:
                if self.ecn[s] >= 0:  # it leaves its evicted neighbourhood
                    self.eq.add(self.ecn[s], -self.S.cost[s])
                    self.ecn[s] = -1
                self.made[s] = True
                if self.lock[s] == 0:
                    self._stamp(s)
            self.held[s] += 1
            if fresh:
                self.last[s] = self.clock

    # -- eviction and freeing --------------------------------------------------------------------

    def _room(self, kind, v, nbytes, outs):
        """Evict until event (kind, v) fits the budget: the fold says what it needs; an
        eviction frees its storage's bytes (:meth:`run` checks the fold's peak at the end)."""
        ev = self.events
        ev.put(kind, v, nbytes, outs)
        need = self.fold.need(*ev.window(self.folded, ev.n + 1))
        self.folded = ev.n
        used = self.fold.used
        while used + need > self.budget:
            s = self._victim()
            if s < 0:
                raise self._infeasible(
                    f"DTR cannot run the {_k.EVENT_CODES[kind]} of node {self.g.labels[v]!r}: "
                    f"it needs {used + need} bytes ({format_size(used + need)}) with every "
                    "evictable array evicted")
            self._evict(s)
            used -= self.size[s]
        self.blocked[:] = False

    def _victim(self):
        """The storage the heuristic evicts next (-1: none); storages that could not be made
        again are skipped (and blocked until the next allocation)."""
        S = self.S
        while True:
            s = int(_h.choose(self.code, S.evictable, self.held, self.lock, self.blocked,
                              S.size, S.cost, self.last, self.stamp, self.clock, S.nb_ptr,
                              S.nb_idx, self.made, self.ecn, self.eq.parent, self.eq.value))
            if s < 0 or not S.fragile or all(self._rebuildable(a, {}) for a in S.members[s]):
                return s
            self.blocked[s] = True

    def _evict(self, s):
        """Evict storage `s`: every material slot of it, one event per node."""
        slots = [a for a in self.S.members[s] if self.mat[a]]
        if s >= self.n_out:
            v = s - self.n_out
            self.events.add(_k.EVICT_STATE, v, self.state[v], [])
        else:
            nodes = sorted({self.out_node[a] for a in slots}, key=self.fpos.__getitem__)
            for u in nodes:
                lo = self.out_ptr[u]
                mine = [a for a in slots if self.out_node[a] == u]
                self.events.add(_k.EVICT, u, sum(self.out_bytes[a] for a in mine),
                                [a - lo for a in mine])
        for a in slots:
            self.mat[a] = False
        self.held[s] = 0
        self.evictions += 1
        self._join_neighbourhood(s)

    def _join_neighbourhood(self, s):
        """Storage `s` is no longer material: a new class, merged with its evicted
        neighbours' (simrd: RuntimeV2Optimized._evict)."""
        mine = self.ecn[s] = self.eq.new(self.S.cost[s])
        for t in self.nb[s]:
            if self.made[t] and self.held[t] == 0 and self.ecn[t] >= 0:
                self.eq.merge(self.ecn[t], mine)

    def _free_dead(self, slots):
        """Free the material slots among `slots` (dead now; in :attr:`Static.dying` order)
        but those to keep (:meth:`_must_keep`)."""
        free = []
        for a in slots:
            if not self.mat[a]:
                continue
            if self.S.fragile and self._must_keep(a):
                self.retained.append(a)
            else:
                free.append(a)
        self._emit_frees(free)

    def _emit_frees(self, slots):
        """FREE_STATE and FREE_VALUE events for `slots` (states, then values, both in forward
        order), grouped as the schedule groups its frees: one event per node."""
        n_out = self.n_out
        i = 0
        while i < len(slots):
            a = slots[i]
            if a >= n_out:
                self._free(a)
                self.events.add(_k.FREE_STATE, a - n_out, self.state[a - n_out], [])
                i += 1
                continue
            u = self.out_node[a]
            j = i
            while j < len(slots) and slots[j] < n_out and self.out_node[slots[j]] == u:
                self._free(slots[j])
                j += 1
            lo = self.out_ptr[u]
            group = slots[i:j]
            self.events.add(_k.FREE_VALUE, u, sum(self.out_bytes[b] for b in group),
                            [b - lo for b in group])
            i = j

    def _free(self, a):
        self.mat[a] = False
        s = self.storage[a]
        if s >= 0:
            self.held[s] -= 1
            if self.held[s] == 0:
                self._join_neighbourhood(s)

    def _recheck_retained(self):
        """Free the kept slots that no evicted array may need any more."""
        keep: list[int] = []
        free: list[int] = []
        for a in self.retained:
            (keep if self._must_keep(a) else free).append(a)
        self.retained = keep
        prod = self.S.prod
        self._emit_frees(sorted(free, key=lambda a: (a < self.n_out, self.fpos[prod[a]], a)))

    # -- what can be made again (only where some function cannot be replayed) -----------------

    def _replayable(self, u):
        S = self.S
        return not S.frozen[u] and not (S.stoch[u] and not self.mat[self.n_out + u])

    def _rebuildable(self, a, memo):
        """Slot `a`, were it not material, could be made again by replays (`memo`: node ->
        whether it can be replayed now)."""
        S = self.S
        stack = [int(S.prod[a])]
        while stack:  # post-order over the nodes whose replay the replay of prod(a) needs
            u = stack[-1]
            if u in memo:
                stack.pop()
                continue
            if not self._replayable(u):
                memo[u] = False
                stack.pop()
                continue
            args = [x for x in S.remat_reads[u] if x < self.n_out and not self.mat[x]]
            todo = [int(S.prod[x]) for x in args if int(S.prod[x]) not in memo]
            if todo:
                stack.extend(todo)
                continue
            memo[u] = all(memo[int(S.prod[x])] for x in args)
            stack.pop()
        return memo[int(S.prod[a])]

    def _needed(self, a):
        """Some evicted slot that a later call reads may need slot `a` for its replay."""
        S = self.S
        seen, stack = set(), [a]
        while stack:  # through slots made once and not material now
            for b in S.consumers[stack.pop()]:
                if b in seen or self.mat[b] or not self.ever[b]:
                    continue
                if S.death[b] > self.position:
                    return True
                seen.add(b)
                stack.append(b)
        return False

    def _must_keep(self, a):
        """Slot `a` is dead but cannot be made again and an evicted array may need it."""
        stoch_state = a >= self.n_out and self.S.stoch[a - self.n_out]
        return (stoch_state or not self._rebuildable(a, {})) and self._needed(a)

    def _infeasible(self, reason):
        return InfeasibleBudgetError(self.budget, method="dtr", reason=reason)
