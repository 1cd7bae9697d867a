"""DTR's eviction heuristics: which evictable storage a runtime cache evicts next.

Kept apart from the runtime (:mod:`lowerset.baselines._dtr_runtime`), as simrd keeps
``simrd/heuristic/`` apart from ``simrd/runtime/``. A heuristic scores every evictable storage
(a buffer: an output that owns its memory with the views of it, or a function's state) and the
runtime evicts the lowest score. With ``c`` the storage's cost (the cost units T of the
functions whose outputs live in it), ``m`` its bytes and ``s`` its staleness (the runtime's
clock, in cost units, minus the clock at its last access):

- ``"dtr"``: h_DTR = (c + the cost of its evicted neighbourhood) / (m * s), the neighbourhood
  approximated by equivalence classes of evicted storages (union-find, :class:`EqClasses`);
- ``"dtr_local"``: c / (m * s);
- ``"lru"``: the clock at its last access (least recently used first);
- ``"size"``: 1 / m (largest first).

A score with a zero denominator is infinite. Ties go to the storage that became evictable last
(simrd scans its pool in that order and keeps the last minimum).

References
----------
.. [1] Kirisame et al., "Dynamic Tensor Rematerialization", ICLR 2021, Sec. 3-4 (h_DTR, the
   evicted neighbourhood, equivalence classes) and Appendix (h_DTR^eq, h_LRU, h_size).
.. [2] simrd: ``uwsampl/dtr-prototype`` ``simrd/simrd/heuristic/dtr.py`` (``DTREqClass``,
   ``DTRLocal``), ``heuristic/etc.py`` (``LRU``, ``LargestStorage``),
   ``optimization/eqclass.py``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .._typing import FloatArray, IntArray

__all__ = ["HEURISTICS", "EqClasses", "heuristic_code", "choose"]

#: Heuristic names, in the order of their codes.
HEURISTICS = ("dtr", "dtr_local", "lru", "size")
H_DTR, H_LOCAL, H_LRU, H_SIZE = range(4)


def heuristic_code(name: str) -> int:
    """The integer code of heuristic `name` (one of :data:`HEURISTICS`); KeyError if unknown."""
    return {h: i for i, h in enumerate(HEURISTICS)}[name]


class EqClasses:
    """Union-find over evicted storages, each class carrying the cost of its members.

    An evicted storage gets a new class holding its own cost, merged with the classes of its
    evicted neighbours; when it is rematerialized its cost leaves its class and it leaves the
    class (the links it made stay: the paper's "phantom" connections).

    Attributes
    ----------
    parent : ndarray of int64, shape (capacity,)
        Class tree; a root is its own parent.
    value : ndarray of float64, shape (capacity,)
        Cost units of a root's class.
    """

    parent: IntArray
    value: FloatArray
    size: int

    def __init__(self, capacity: int = 64) -> None:
        self.parent = np.arange(capacity, dtype=np.int64)
        self.value = np.zeros(capacity, dtype=np.float64)
        self.size = 0

    def new(self, cost: float) -> int:
        """A new class of cost `cost`; return its id."""
        if self.size == self.parent.shape[0]:
            cap = 2 * self.size
            self.parent = np.concatenate([self.parent, np.arange(self.size, cap)])
            self.value = np.concatenate([self.value, np.zeros(cap - self.size)])
        i = self.size
        self.parent[i] = i
        self.value[i] = cost
        self.size += 1
        return i

    def find(self, i: int) -> int:
        """The root of `i`'s class (compressing the path)."""
        return _find(self.parent, i)

    def merge(self, a: int, b: int) -> None:
        """Join the classes of `a` and `b` (b's root becomes the root, with both costs)."""
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[ra] = rb
            self.value[rb] += self.value[ra]

    def add(self, i: int, cost: float) -> None:
        """Add `cost` (negative to remove) to the cost of `i`'s class."""
        self.value[self.find(i)] += cost


@njit(cache=True)
def _find(parent, i):
    root = i
    while parent[root] != root:
        root = parent[root]
    while parent[i] != root:  # path compression
        nxt = parent[i]
        parent[i] = root
        i = nxt
    return root


@njit(cache=True)
def choose(code, evictable, held, lock, blocked, size, cost, last, stamp, clock, nb_ptr, nb_idx,
           made, ecn, parent, value):
    """The storage to evict next: the least score among the candidates (evictable, material,
    unpinned, not blocked).

    Parameters
    ----------
    code : int
        Heuristic code (:data:`HEURISTICS`).
    evictable : ndarray of bool, shape (S,)
        Storages the runtime may evict at all (bytes > 0, nothing pinned in them).
    held : ndarray of int64, shape (S,)
        Material arrays in each storage (0: not material).
    lock : ndarray of int64, shape (S,)
        Pins on each storage.
    blocked : ndarray of bool, shape (S,)
        Storages the runtime set aside for this allocation.
    size : ndarray of int64, shape (S,)
        Bytes of each storage.
    cost : ndarray of float64, shape (S,)
        Cost units of the functions whose outputs live in the storage.
    last : ndarray of float64, shape (S,)
        Clock at its last access (cost units).
    stamp : ndarray of int64, shape (S,)
        When it last became evictable (ties go to the largest).
    clock : float
    nb_ptr, nb_idx : ndarray of int64, shapes (S + 1,), (#links,)
        Neighbour storages (CSR): those of the arguments of its functions and of the outputs
        and states of the functions that read it.
    made : ndarray of bool, shape (S,)
        Made at least once (so one that is not material is evicted, or freed by eager
        eviction).
    ecn : ndarray of int64, shape (S,)
        The equivalence class of an evicted storage, -1 for a material one.
    parent, value : ndarray
        :class:`EqClasses` arrays.

    Returns
    -------
    int
        The storage id, or -1 when there is no candidate.
    """
    best = -1
    best_score = np.inf
    seen = np.empty(nb_idx.shape[0] + 1, dtype=np.int64)
    for s in range(evictable.shape[0]):
        if not evictable[s] or held[s] == 0 or lock[s] > 0 or blocked[s]:
            continue
        if code == H_LRU:
            score = last[s]
        elif code == H_SIZE:
            score = 1.0 / size[s]
        else:
            c = cost[s]
            if code == H_DTR:  # distinct classes of the evicted neighbours
                n_seen = 0
                for j in range(nb_ptr[s], nb_ptr[s + 1]):
                    t = nb_idx[j]
                    if not made[t] or held[t] > 0 or ecn[t] < 0:
                        continue
                    r = _find(parent, ecn[t])
                    new = True
                    for q in range(n_seen):
                        if seen[q] == r:
                            new = False
                    if new:
                        seen[n_seen] = r
                        n_seen += 1
                        c += value[r]
            denom = size[s] * (clock - last[s])
            score = c / denom if denom > 0 else np.inf
        if best < 0 or score < best_score or (score == best_score and stamp[s] > stamp[best]):
            best = s
            best_score = score
    return best
