"""Numba kernels of the planner: bitsets, lower-set enumeration, transitions and the DPs.

Every function here is ``@njit(cache=True)`` and takes only contiguous ndarrays and scalars.
Conventions (n = #V, W = number of uint64 words of a bitset = ceil(n / 64)):

- a node set is a row of W uint64 words; node id ``i`` is bit ``i % 64`` of word ``i // 64``;
- a family of sets is a ``(n_sets, W)`` uint64 array;
- costs are int64 cost units, memory int64 bytes;
- kernels never raise: they return a status code and the Python wrappers raise;
- long kernels do a bounded amount of work per call and keep their state in arrays, so the
  Python wrappers can check a deadline between calls (:mod:`lowerset._limits`).

References: Kusumoto et al., NeurIPS 2019, Sec. 2-4 and Algorithm 1 (appendix).
"""

import numpy as np
from numba import njit

INF = np.iinfo(np.int64).max // 4

STATUS_OK = 0
STATUS_MEMORY = 1

#: With ``hull``, :func:`dp_fronts` thins each time-centric front by :func:`thin_front` into
#: this many runs of overhead.
HULL_RUNS = 8


@njit(cache=True, inline="always")
def _has(bits, i):
    return (bits[i >> 6] >> np.uint64(i & 63)) & np.uint64(1)


@njit(cache=True, inline="always")
def _set(bits, i):
    bits[i >> 6] |= np.uint64(1) << np.uint64(i & 63)


@njit(cache=True, inline="always")
def _clear(bits, i):
    bits[i >> 6] &= ~(np.uint64(1) << np.uint64(i & 63))


@njit(cache=True, inline="always")
def _next_leaf(n, pred_ptr, pred_idx, cur, choice, state):
    """Advance the depth-first search over lower sets to its next leaf; False when exhausted.

    The search decides membership of nodes 0..n-1 in order: node ``v`` may join the set only
    when all its predecessors are in it, and may always be left out (its successors are then
    kept out automatically). Every leaf is a distinct lower set and every branch ends in a leaf.
    The whole search state lives in the arrays, so the search resumes where a call left it.

    Parameters
    ----------
    n : int
    pred_ptr : ndarray of int64, shape (n + 1,)
    pred_idx : ndarray of int64, shape (#E,)
    cur : ndarray of uint64, shape (W,)
        The current set; at a leaf, the lower set found.
    choice : ndarray of int8, shape (n + 1,)
        1 = node included (the search still has to try excluding it), 0 = excluded.
    state : ndarray of int64, shape (2,)
        ``state[0]``: 0 before the first leaf, 1 at a leaf, 2 exhausted; ``state[1]``: the
        number of nodes in `cur`.
    """
    if state[0] == 2:
        return False
    if state[0] == 1:
        # backtrack to the deepest node still included and exclude it instead
        v = n - 1
        while v >= 0 and choice[v] == 0:
            v -= 1
        if v < 0:
            state[0] = 2
            return False
        _clear(cur, v)
        choice[v] = 0
        state[1] -= 1
        v += 1
    else:
        v = 0
    while v < n:
        ok = True
        for k in range(pred_ptr[v], pred_ptr[v + 1]):
            if _has(cur, pred_idx[k]) == 0:
                ok = False
                break
        if ok:
            _set(cur, v)
            choice[v] = 1
            state[1] += 1
        else:
            choice[v] = 0
        v += 1
    state[0] = 1
    return True


@njit(cache=True)
def count_lower_sets_chunk(n, pred_ptr, pred_idx, cur, choice, state, hist, max_leaves):
    """Count up to `max_leaves` more lower sets, by size, without storing them.

    Parameters
    ----------
    n : int
    pred_ptr, pred_idx : ndarray of int64
        CSR predecessors; node ids in topological order.
    cur, choice, state : see :func:`_next_leaf`
        The search state, zeros before the first call, carried from call to call.
    hist : ndarray of int64, shape (n + 1,)
        ``hist[k]`` is incremented for each lower set of k nodes found.
    max_leaves : int
        Work of this call.

    Returns
    -------
    int
        Lower sets found by this call; fewer than `max_leaves` once the search is exhausted.
    """
    found = 0
    while found < max_leaves:
        if not _next_leaf(n, pred_ptr, pred_idx, cur, choice, state):
            break
        hist[state[1]] += 1
        found += 1
    return found


@njit(cache=True)
def enumerate_lower_sets_chunk(n, pred_ptr, pred_idx, cur, choice, state, out, pos, max_leaves):
    """Store up to `max_leaves` more lower sets, each at the next free row of its size class.

    With ``pos`` started at the first row of each size (the cumulative counts of
    :func:`count_lower_sets_chunk`), the rows of `out` end up sorted by size, an order
    consistent with inclusion, and in search order within a size.

    Parameters
    ----------
    n, pred_ptr, pred_idx, cur, choice, state : as in :func:`count_lower_sets_chunk`.
    out : ndarray of uint64, shape (#L_G, W)
        The family.
    pos : ndarray of int64, shape (n + 1,)
        ``pos[k]``: the next free row for a set of k nodes.
    max_leaves : int

    Returns
    -------
    int
        Lower sets stored by this call; fewer than `max_leaves` once the search is exhausted.
    """
    found = 0
    n_words = out.shape[1]
    while found < max_leaves:
        if not _next_leaf(n, pred_ptr, pred_idx, cur, choice, state):
            break
        k = state[1]
        row = pos[k]
        if row >= out.shape[0]:  # cannot happen with the counts of the same graph
            break
        for w in range(n_words):
            out[row, w] = cur[w]
        pos[k] = row + 1
        found += 1
    return found


@njit(cache=True)
def ancestor_sets(n, n_words, pred_ptr, pred_idx):
    """Return L_v = {w : v is reachable from w} (v included) for every node (Sec. 4.3).

    Returns
    -------
    ndarray of uint64, shape (n, n_words)
        Row ``v`` is the bitset of L_v. Node ids must be in topological order.
    """
    out = np.zeros((n, n_words), dtype=np.uint64)
    for v in range(n):
        for k in range(pred_ptr[v], pred_ptr[v + 1]):
            p = pred_idx[k]
            for w in range(n_words):
                out[v, w] |= out[p, w]
        _set(out[v], v)
    return out


@njit(cache=True)
def segments_of_path(sets, path, n):
    """The 0-based segment of each node (int64, shape (n,)) of the lower-set sequence
    ``sets[path[0]] ⊊ sets[path[1]] ⊊ ...`` (ascending, ending at V): ``seg[v] = i`` for v in
    ``sets[path[i]]`` but not in the sets before it."""
    seg = np.zeros(n, dtype=np.int64)
    n_words = sets.shape[1]
    for i in range(path.shape[0]):
        for w in range(n_words):
            new = sets[path[i], w]
            if i > 0:
                new &= ~sets[path[i - 1], w]
            if new != 0:
                for bit in range(64):
                    if (new >> np.uint64(bit)) & np.uint64(1):
                        seg[w * 64 + bit] = i
    return seg


@njit(cache=True)
def closure(ptr, idx, seeds, inside):
    """The nodes reachable from `seeds` along the CSR adjacency (`ptr`, `idx`: the successors
    or the predecessors of each node) through nodes where `inside` is true, the seeds where it
    is true among them (the local search's moves, :mod:`lowerset.refine`).

    Parameters
    ----------
    ptr : ndarray of int64, shape (n + 1,)
    idx : ndarray of int64, shape (#E,)
    seeds : ndarray of int64, shape (k,)
    inside : ndarray of bool, shape (n,)

    Returns
    -------
    ndarray of bool, shape (n,)
    """
    n = inside.shape[0]
    seen = np.zeros(n, dtype=np.bool_)
    stack = np.empty(n, dtype=np.int64)   # each node is pushed once at most
    top = 0
    for u in seeds:
        if inside[u] and not seen[u]:
            seen[u] = True
            stack[top] = u
            top += 1
    while top > 0:
        top -= 1
        u = stack[top]
        for k in range(ptr[u], ptr[u + 1]):
            w = idx[k]
            if inside[w] and not seen[w]:
                seen[w] = True
                stack[top] = w
                top += 1
    return seen


@njit(cache=True)
def is_lower_set_bits(bits, n, pred_ptr, pred_idx):
    """Return -1 if `bits` is a lower set, else the id of a member with a predecessor outside."""
    for v in range(n):
        if _has(bits, v) != 0:
            for k in range(pred_ptr[v], pred_ptr[v + 1]):
                if _has(bits, pred_idx[k]) == 0:
                    return v
    return -1


@njit(cache=True)
def set_stats_range(sets, lo, hi, n, cost, memory, pred_ptr, pred_idx, succ_ptr, succ_idx, size,
                    tot_t, tot_m, bnd_bits, bnd_t, bnd_m, bcount, extra, front, front_preds,
                    touched):
    """Fill the per-set quantities of sets ``lo <= i < hi`` (see :func:`set_stats`).

    Parameters
    ----------
    sets : ndarray of uint64, shape (s, W)
    lo, hi : int
        Rows to fill.
    n : int
    cost, memory : ndarray of int64, shape (n,)
    pred_ptr, pred_idx, succ_ptr, succ_idx : ndarray of int64
        CSR adjacency.
    size, tot_t, tot_m, bnd_t, bnd_m, bcount, extra : ndarray of int64, shape (s,)
        Outputs, as in :func:`set_stats`; ``bcount[i]`` = #∂(L_i).
    bnd_bits : ndarray of uint64, shape (s, W)
        Output: the boundaries; rows ``lo:hi`` must be zero on entry.
    front, front_preds : ndarray of bool, shape (n,)
        Work arrays, False on entry and left so.
    touched : ndarray of int64, shape (n,)
        Work array.
    """
    for i in range(lo, hi):
        L = sets[i]
        nt = 0
        size[i] = 0
        tot_t[i] = 0
        tot_m[i] = 0
        bnd_t[i] = 0
        bnd_m[i] = 0
        bcount[i] = 0
        for v in range(n):
            if _has(L, v) == 0:
                continue
            size[i] += 1
            tot_t[i] += cost[v]
            tot_m[i] += memory[v]
            in_bnd = False
            for k in range(succ_ptr[v], succ_ptr[v + 1]):
                w = succ_idx[k]
                if _has(L, w) == 0:
                    in_bnd = True
                    if not front[w]:
                        front[w] = True
                        touched[nt] = w
                        nt += 1
            if in_bnd:
                _set(bnd_bits[i], v)
                bnd_t[i] += cost[v]
                bnd_m[i] += memory[v]
                bcount[i] += 1
        # δ+(L)∖L is `front`; δ−(δ+(L))∖L are the predecessors of `front` outside L
        ex = 0
        for j in range(nt):
            w = touched[j]
            ex += memory[w]
            for k in range(pred_ptr[w], pred_ptr[w + 1]):
                p = pred_idx[k]
                if _has(L, p) == 0 and not front_preds[p]:
                    front_preds[p] = True
                    ex += memory[p]
        extra[i] = ex
        for j in range(nt):
            w = touched[j]
            front[w] = False
            for k in range(pred_ptr[w], pred_ptr[w + 1]):
                front_preds[pred_idx[k]] = False


@njit(cache=True)
def boundary_lists(bnd_bits, lo, hi, n, bptr, bidx):
    """Write the boundaries of sets ``lo <= i < hi`` as CSR node-id lists.

    Parameters
    ----------
    bnd_bits : ndarray of uint64, shape (s, W)
    lo, hi, n : int
    bptr : ndarray of int64, shape (s + 1,)
        Cumulative boundary sizes (filled beforehand).
    bidx : ndarray of int64, shape (bptr[s],)
        Output: the members of ∂(L_i) are ``bidx[bptr[i]:bptr[i + 1]]``, increasing.
    """
    for i in range(lo, hi):
        k = bptr[i]
        for v in range(n):
            if _has(bnd_bits[i], v) != 0:
                bidx[k] = v
                k += 1


@njit(cache=True)
def set_stats(sets, n, cost, memory, pred_ptr, pred_idx, succ_ptr, succ_idx):
    """Per-set quantities that the transitions of the DP need.

    One call over all sets; :func:`set_stats_range` and :func:`boundary_lists` do the same in
    chunks.

    Parameters
    ----------
    sets : ndarray of uint64, shape (s, W)
        Lower sets.
    cost, memory : ndarray of int64, shape (n,)
    pred_ptr, pred_idx, succ_ptr, succ_idx : ndarray of int64
        CSR adjacency.

    Returns
    -------
    size : ndarray of int64, shape (s,)
        #L.
    tot_t, tot_m : ndarray of int64, shape (s,)
        T(L) in cost units and M(L) in bytes.
    bnd_bits : ndarray of uint64, shape (s, W)
        The boundary ∂(L) = δ−(V∖L) ∩ L (Sec. 2).
    bnd_t, bnd_m : ndarray of int64, shape (s,)
        T(∂(L)) and M(∂(L)).
    bptr, bidx : ndarray of int64
        The boundary as CSR node-id lists.
    extra : ndarray of int64, shape (s,)
        M(δ+(L)∖L) + M(δ−(δ+(L))∖L), the last two terms of eq. (2), in bytes.
    """
    s = sets.shape[0]
    n_words = sets.shape[1]
    size = np.zeros(s, dtype=np.int64)
    tot_t = np.zeros(s, dtype=np.int64)
    tot_m = np.zeros(s, dtype=np.int64)
    bnd_bits = np.zeros((s, n_words), dtype=np.uint64)
    bnd_t = np.zeros(s, dtype=np.int64)
    bnd_m = np.zeros(s, dtype=np.int64)
    bcount = np.zeros(s, dtype=np.int64)
    extra = np.zeros(s, dtype=np.int64)
    front = np.zeros(n, dtype=np.bool_)
    front_preds = np.zeros(n, dtype=np.bool_)
    touched = np.zeros(n, dtype=np.int64)
    set_stats_range(sets, 0, s, n, cost, memory, pred_ptr, pred_idx, succ_ptr, succ_idx, size,
                    tot_t, tot_m, bnd_bits, bnd_t, bnd_m, bcount, extra, front, front_preds,
                    touched)
    bptr = np.zeros(s + 1, dtype=np.int64)
    for i in range(s):
        bptr[i + 1] = bptr[i] + bcount[i]
    bidx = np.zeros(bptr[s], dtype=np.int64)
    boundary_lists(bnd_bits, 0, s, n, bptr, bidx)
    return size, tot_t, tot_m, bnd_bits, bnd_t, bnd_m, bptr, bidx, extra


@njit(cache=True)
def chain_boundaries(sets, bptr, bidx, cost, memory):
    """For a family that is a chain (set ``i`` a strict subset of set ``i + 1``): each set's
    boundary ordered by the first set that holds each of its nodes, with prefix sums.

    Parameters
    ----------
    sets : ndarray of uint64, shape (s, W)
        The chain, sorted by size.
    bptr, bidx : ndarray of int64
        The boundaries as CSR node-id lists (:func:`set_stats`).
    cost, memory : ndarray of int64, shape (n,)

    Returns
    -------
    bfirst, bcum_t, bcum_m : ndarray of int64, shape (bptr[s],)
        In the range ``bptr[i]:bptr[i + 1]``, ascending: the index of the first set holding
        each node of ∂(L_i), and the sums of T and of M over the range's entries up to and
        including each one (cost units, bytes).
    """
    s, n_words = sets.shape
    n = cost.shape[0]
    first = np.zeros(n, dtype=np.int64)
    for i in range(s):
        for w in range(n_words):
            new = sets[i, w] & ~sets[i - 1, w] if i > 0 else sets[i, w]
            while new != 0:
                low = new & (~new + np.uint64(1))   # the lowest bit set
                bit = 0
                while (low >> np.uint64(bit)) != np.uint64(1):
                    bit += 1
                first[w * 64 + bit] = i
                new ^= low
    m = bidx.shape[0]
    bfirst = np.empty(m, dtype=np.int64)
    bcum_t = np.empty(m, dtype=np.int64)
    bcum_m = np.empty(m, dtype=np.int64)
    for i in range(s):
        lo, hi = bptr[i], bptr[i + 1]
        if hi == lo:
            continue
        nodes = bidx[lo:hi]
        keys = np.empty(hi - lo, dtype=np.int64)
        for k in range(hi - lo):
            keys[k] = first[nodes[k]]
        order = np.argsort(keys, kind="mergesort")
        ct = 0
        cm = 0
        for k in range(hi - lo):
            v = nodes[order[k]]
            ct += cost[v]
            cm += memory[v]
            bfirst[lo + k] = first[v]
            bcum_t[lo + k] = ct
            bcum_m[lo + k] = cm
    return bfirst, bcum_t, bcum_m


@njit(cache=True, inline="always")
def _is_subset(sets, span, a, b):
    """Whether L_a ⊆ L_b, reading only the words of `sets` from the first word of L_a that is
    not all ones to its last nonzero word (``span``, :func:`word_spans`): below it L_a is all
    ones, so L_b must be too (its own first such word at or above it), and above it L_a is
    empty. With node ids in topological order a lower set's span is a word or two, so the test
    does not grow with the graph."""
    if span[b, 0] < span[a, 0]:
        return False
    for w in range(span[a, 0], span[a, 1] + 1):
        if (sets[a, w] & ~sets[b, w]) != 0:
            return False
    return True


@njit(cache=True)
def word_spans(sets):
    """Per set of `sets` (uint64 bit rows, shape (s, W)): the index of its first word that is
    not all ones (W if none) and of its last nonzero word (-1 if none); int64, shape (s, 2)."""
    s, n_words = sets.shape
    full = ~np.uint64(0)
    out = np.empty((s, 2), dtype=np.int64)
    for i in range(s):
        lo = 0
        while lo < n_words and sets[i, lo] == full:
            lo += 1
        hi = n_words - 1
        while hi >= 0 and sets[i, hi] == 0:
            hi -= 1
        out[i, 0] = lo
        out[i, 1] = hi
    return out


@njit(cache=True)
def map_groups(q_sets, qid, n_words):
    """The rows of `q_sets` (bit rows over a quotient graph's ids) as bit rows over the nodes:
    node ``v`` is in a row where its quotient id ``qid[v]`` is; uint64, shape (s, n_words)."""
    s = q_sets.shape[0]
    out = np.zeros((s, n_words), dtype=np.uint64)
    one = np.uint64(1)
    for i in range(s):
        for v in range(qid.shape[0]):
            q = qid[v]
            if (q_sets[i, q >> 6] >> np.uint64(q & 63)) & one:
                out[i, v >> 6] |= one << np.uint64(v & 63)
    return out


@njit(cache=True, inline="always")
def _popcount(x):
    x = x - ((x >> np.uint64(1)) & np.uint64(0x5555555555555555))
    x = (x & np.uint64(0x3333333333333333)) + ((x >> np.uint64(2)) & np.uint64(0x3333333333333333))
    x = (x + (x >> np.uint64(4))) & np.uint64(0x0F0F0F0F0F0F0F0F)
    return (x * np.uint64(0x0101010101010101)) >> np.uint64(56)


@njit(cache=True, inline="always")
def _row_cmp(rows, span, size, a, b):
    """-1, 0 or 1 as row ``a`` comes before, equals or comes after row ``b``: by size, then
    word by word as unsigned integers (``np.unique(axis=0)``'s order). Below both rows' first
    word that is not all ones, and above both last nonzero words, the rows agree."""
    if size[a] != size[b]:
        return -1 if size[a] < size[b] else 1
    for w in range(min(span[a, 0], span[b, 0]), max(span[a, 1], span[b, 1]) + 1):
        x = rows[a, w]
        y = rows[b, w]
        if x != y:
            return -1 if x < y else 1
    return 0


@njit(cache=True)
def unique_rows_by_size(rows):
    """The distinct rows of `rows` (uint64 bit rows, shape (s, W)) sorted by their number of
    set bits, then in the order of ``np.unique(rows, axis=0)`` (word by word, unsigned): a
    stable merge sort whose comparisons read only the rows' spans (:func:`word_spans`), so a
    family of lower sets sorts in O(s log s) word reads, not O(s log s W). Returns uint64,
    shape (k, W)."""
    s = rows.shape[0]
    span = word_spans(rows)
    size = np.zeros(s, dtype=np.int64)
    for i in range(s):
        size[i] = 64 * span[i, 0]   # the all-ones words below the span
        for w in range(span[i, 0], span[i, 1] + 1):
            size[i] += np.int64(_popcount(rows[i, w]))
    idx = np.arange(s)
    tmp = np.empty(s, dtype=np.int64)
    width = 1
    while width < s:   # bottom-up merge sort, stable
        for lo in range(0, s, 2 * width):
            mid = min(lo + width, s)
            hi = min(lo + 2 * width, s)
            i, j, k = lo, mid, lo
            while i < mid and j < hi:
                if _row_cmp(rows, span, size, idx[j], idx[i]) < 0:
                    tmp[k] = idx[j]
                    j += 1
                else:
                    tmp[k] = idx[i]
                    i += 1
                k += 1
            while i < mid:
                tmp[k] = idx[i]
                i += 1
                k += 1
            while j < hi:
                tmp[k] = idx[j]
                j += 1
                k += 1
        idx, tmp = tmp, idx
        width *= 2
    keep = np.ones(s, dtype=np.bool_)
    for k in range(1, s):
        keep[k] = _row_cmp(rows, span, size, idx[k - 1], idx[k]) != 0
    return rows[idx[keep]]


@njit(cache=True)
def transition(a, b, tot_t, tot_m, bnd_bits, bnd_t, bnd_m, bptr, bidx, extra, cost, memory):
    """Cost of appending lower set ``b`` after lower set ``a`` (a ⊊ b) in a canonical strategy.

    With V' = L_b ∖ L_a:

    - ``dt = T(V' ∖ ∂(L_b))``, the term of eq. (1) for this step (cost units);
    - ``dm = M(U_b ∖ U_a) = M(∂(L_b) ∩ V')``, the growth of the cache (bytes), because a node of
      L_a in ∂(L_b) is already in ∂(L_a);
    - ``need = 2 M(V') + M(δ+(L_b)∖L_b) + M(δ−(δ+(L_b))∖L_b)`` (bytes), so that eq. (2) reads
      ``M(i) = M(U_{i-1}) + need``.

    The nodes of ∂(L_a) ∩ ∂(L_b) (those of ∂(L_b) in L_a) are found by testing the boundary of
    ``a`` node by node against that of ``b``; :func:`chain_transition` finds them faster in a
    chain.

    Returns
    -------
    (dt, dm, need) : tuple of int64
    """
    inter_t = 0
    inter_m = 0
    for k in range(bptr[a], bptr[a + 1]):
        v = bidx[k]
        if _has(bnd_bits[b], v) != 0:
            inter_t += cost[v]
            inter_m += memory[v]
    return _step(a, b, tot_t, tot_m, bnd_t, bnd_m, extra, inter_t, inter_m)


@njit(cache=True)
def chain_transition(a, b, tot_t, tot_m, bnd_t, bnd_m, bptr, extra, bfirst, bcum_t, bcum_m):
    """:func:`transition` in a family that is a chain (:func:`chain_boundaries` gives
    ``bfirst``, ``bcum_t``, ``bcum_m``): a node is in L_a when the first set holding it is at
    most ``a``, so the nodes of ∂(L_b) in L_a are a prefix of the boundary of ``b`` sorted by
    that set, and their sums are found by binary search."""
    lo = bptr[b]
    hi = bptr[b + 1]
    while lo < hi:   # the first entry of b's boundary whose first set is after a
        mid = (lo + hi) >> 1
        if bfirst[mid] <= a:
            lo = mid + 1
        else:
            hi = mid
    inter_t = 0
    inter_m = 0
    if lo > bptr[b]:
        inter_t = bcum_t[lo - 1]
        inter_m = bcum_m[lo - 1]
    return _step(a, b, tot_t, tot_m, bnd_t, bnd_m, extra, inter_t, inter_m)


@njit(cache=True, inline="always")
def _step(a, b, tot_t, tot_m, bnd_t, bnd_m, extra, inter_t, inter_m):
    """(dt, dm, need) of :func:`transition` from the sums over ∂(L_a) ∩ ∂(L_b)."""
    dm = bnd_m[b] - inter_m
    dt = (tot_t[b] - tot_t[a]) - (bnd_t[b] - inter_t)
    need = 2 * (tot_m[b] - tot_m[a]) + extra[b]
    return dt, dm, need


@njit(cache=True, nogil=True)
def remaining_bound(lo, hi, work_budget, budget, lam, sets, span, class_start, tot_t, tot_m,
                    bnd_bits, bnd_t, bnd_m, bptr, bidx, extra, cost, memory, chain, bfirst,
                    bcum_t, bcum_m, need_min, g):
    """Fill ``g[b, k]`` for the sets ``hi > b >= lo``, from the top down, stopping early after
    `work_budget` units of work: the least ``sum(dt + lam[k] * dm)`` over the transitions of
    any sequence from lower set ``b`` to V within eq. (2) budget `budget` (cost units), or inf
    when none can go on from ``b``. From it, a lower bound on the overhead (eq. 1) that a state
    (t, m) at ``b`` adds on its way to V (Lagrangian relaxation of its cache):

    ``overhead after b >= max over k of g[b, k] - lam[k] * (budget - m)``,

    because the cache only grows along a sequence and ends within the budget, so the bytes it
    adds after ``b`` (the sum of dm) are at most ``budget - m``. Each transition ``b -> c`` is
    allowed when ``bnd_m[b] + need <= budget`` (a state at ``b`` caches at least M(∂(L_b))),
    a relaxation of ``m + need <= budget``. With ``lam[0] = 0``, ``g[b, 0]`` bounds the
    overhead of every state at ``b``; the larger multipliers weigh the cache the state holds
    (A* pruning in :func:`dp_fronts`).

    Parameters
    ----------
    lo, hi : int
        Range of sets; the sets ``>= hi`` must be finished (``g[s - 1] = 0``, V).
    work_budget : int
        The call returns after the first set that brings its work (candidate sets scanned plus
        boundary entries read plus multipliers updated) to this many units.
    budget : int64
        B in bytes.
    lam : ndarray of float64, shape (K,)
        Multipliers (cost units per byte), ``lam[0] = 0``.
    sets, span, class_start, tot_t, tot_m, bnd_bits, bnd_t, bnd_m, bptr, bidx, extra, cost,
    memory, chain, bfirst, bcum_t, bcum_m
        As in :func:`dp_fronts`.
    need_min : ndarray of int64, shape (s,)
        ``need_min[c]``: the least ``2 tot_m[c'] + extra[c']`` over the sets ``c' >= c``,
        nondecreasing (:func:`suffix_need`): the scan from ``b`` stops at the first set past
        which no transition fits.
    g : ndarray of float64, shape (s, K)
        Output; inf on entry for the sets to fill.

    Returns
    -------
    b_next : int
        One past the last set not done (`lo` when the range is done).
    work : int
        Work units done.
    """
    n_lam = lam.shape[0]
    work = 0
    b = hi - 1
    while b >= lo and work < work_budget:
        # allowed when 2 M(L_c ∖ L_b) + extra[c] + bnd_m[b] <= budget
        room = budget - bnd_m[b] + 2 * tot_m[b]
        # past the first set from which no set is allowed, the scan stops
        end = b + 1 + np.searchsorted(need_min[b + 1:], room, side="right")
        work += (end - b) * (1 + n_lam // 8)
        for c in range(b + 1, end):
            if class_start[c] <= b or g[c, 0] == np.inf or 2 * tot_m[c] + extra[c] > room:
                continue
            # dt >= T(L_c ∖ L_b) - T(∂(L_c)) and dm >= 0: a set that improves no sum is
            # skipped before the subset test
            dt_low = tot_t[c] - tot_t[b] - bnd_t[c]
            helps = False
            for k in range(n_lam):
                helps |= dt_low + g[c, k] < g[b, k]
            if not helps:
                continue
            if not chain and not _is_subset(sets, span, b, c):
                continue
            work += (1 if chain else bptr[b + 1] - bptr[b]) + n_lam
            if chain:
                dt, dm, _ = chain_transition(b, c, tot_t, tot_m, bnd_t, bnd_m, bptr, extra, bfirst,
                                             bcum_t, bcum_m)
            else:
                dt, dm, _ = transition(b, c, tot_t, tot_m, bnd_bits, bnd_t, bnd_m, bptr, bidx,
                                       extra, cost, memory)
            for k in range(n_lam):
                g[b, k] = min(g[b, k], dt + lam[k] * dm + g[c, k])
        b -= 1
    return b + 1, work


def suffix_need(tot_m, extra):
    """``need_min`` of :func:`remaining_bound`: per set c, the least ``2 tot_m[c'] +
    extra[c']`` (bytes) over the sets ``c' >= c``; int64, shape (s,)."""
    need = 2 * tot_m + extra
    return np.minimum.accumulate(need[::-1])[::-1].copy()


@njit(cache=True, inline="always")
def _bound_at(g, lam, b, room):
    """The overhead bound of :func:`remaining_bound` for a state at set ``b`` whose cache
    leaves `room` bytes of the budget (cost units, a float at most the exact bound; 0 without
    multipliers)."""
    best = 0.0
    for k in range(lam.shape[0]):
        cut = lam[k] * room
        # less a margin above float rounding: the sums in g have at most a few 10^4 terms
        v = g[b, k] - cut - 1e-9 * (g[b, k] + cut)
        if v > best:
            best = v
    return best


@njit(cache=True)
def least_bounds(g, lam, budget, bnd_m, out):
    """Per set ``b``, :func:`_bound_at` for a state caching the least it can there,
    ``bnd_m[b]`` bytes, rounded up (the overhead is a whole number of cost units, so the
    rounded bound is still a bound): int64 cost units into `out`, shape (s,); INF where no
    sequence within `budget` goes on from ``b`` (``g[b, 0]`` infinite)."""
    for b in range(g.shape[0]):
        if g[b, 0] == np.inf:
            out[b] = INF
        else:
            v = np.ceil(_bound_at(g, lam, b, budget - bnd_m[b]))
            out[b] = INF if v >= INF else np.int64(v)


@njit(cache=True, nogil=True)
def dp_fronts(lo, hi, work_budget, max_entries, budget, maximize, tcap, lb, g, lam, sets, span,
              size, class_start, tot_t, tot_m, bnd_bits, bnd_t, bnd_m, bptr, bidx, extra, cost,
              memory, chain, bfirst, bcum_t, bcum_m, a_lo, pre, marks, fstart, fend, key_m, key_t,
              ft, fm, fpa, fpe, used, hull, scratch_m, scratch_a, scratch_e):
    """Fill the DP fronts of sets ``lo <= b < hi``, stopping early after `work_budget` units of
    work (Sec. 4.2, Algorithm 1; pull form).

    The sets are sorted by size, so every strict subset of set ``b`` has a smaller index and all
    of its transitions are final when ``b`` is reached (an order consistent with inclusion).
    The front of set ``b`` holds the states (b, t, m): t = overhead so far (eq. 1, cost units),
    m = M(U) bytes cached so far, keeping only states not dominated in (t, m): for the
    time-centric mode (t low, m low), for the memory-centric mode (t high, m low). A transition
    a -> b is allowed from state (t, m) when ``m + need <= budget`` (eq. 2).

    Parameters
    ----------
    lo, hi : int
        Range of target set indices; sets ``< lo`` must be finished.
    work_budget : int
        The call returns after the first target set that brings its work (subset tests plus
        front entries read or written) to this many units.
    max_entries : int
        The entry arrays may grow to this many entries at most (the caller's memory bound).
    budget : int64
        B in bytes.
    maximize : bool
        False: time-centric (min overhead); True: memory-centric (max overhead, Sec. 4.4).
    tcap : int64
        States with overhead above `tcap` are dropped. Overhead never decreases along a
        sequence, so a time-centric optimum <= `tcap` is still found exactly.
    lb : ndarray of int64, shape (s,)
        Time-centric: a state at set ``b`` is dropped when its overhead passes ``tcap - lb[b]``
        (zeros drop nothing more). Memory-centric: a state at set ``b`` is dropped when its
        overhead is below ``lb[b]``; with ``lb[b] = T(L_b) - (T(V) - floor)`` these are the
        states that cannot reach V with an overhead of `floor` or more, because no sequence
        adds more than ``T(V ∖ L_b)`` after ``b`` (dt <= T(L_b ∖ L_a) at every step), so a
        state dropped has no successor that reaches it either: the front of V keeps every
        state of overhead >= floor, with the same back-pointers (zeros drop nothing).
    g, lam : ndarray of float64, shapes (s, K) and (K,)
        Time-centric, with K > 0: a state (t, m) that survives `lb` is left out of the front of
        ``b`` when ``t + _bound_at(g, lam, b, budget - m) > tcap`` (:func:`remaining_bound`;
        `lb` is then that bound at the least cache ``bnd_m[b]``). Both bounds are at most the
        overhead every sequence adds after ``b`` from that state and grow with the state's
        overhead and cache, so a state dropped could not reach V within the cap and every
        state it dominates is dropped too: the states kept, their back-pointers and the front
        of V (bound 0) are those of the DP without the bounds, cut at the same cap. K <= 1:
        no such test (one multiplier, 0, prices no cache: `lb` holds that bound, rounded up
        by :func:`least_bounds`, and the test at reading drops the same states).
    sets : ndarray of uint64, shape (s, W)
        The family, sorted by size; set 0 is the empty set.
    span : ndarray of int64, shape (s, 2)
        Each set's span of words (:func:`word_spans`), for the subset tests.
    size : ndarray of int64, shape (s,)
    class_start : ndarray of int64, shape (s,)
        Index of the first set of the same size as set ``b``; only sets before it are tested.
    tot_t, tot_m, bnd_bits, bnd_t, bnd_m, bptr, bidx, extra : see :func:`set_stats`.
    cost, memory : ndarray of int64, shape (n,)
    chain : bool
        The family is a chain (each set a subset of the next): every smaller set is a subset,
        and the transitions use ``bfirst``, ``bcum_t``, ``bcum_m`` (:func:`chain_boundaries`;
        empty arrays otherwise).
    a_lo, pre : ndarray of int64, shape (s,); marks : ndarray of int64, shape (k,)
        The sets that may precede set ``b`` (:func:`_sources`, ``lowersets.windowed``):
        ``a_lo[b] <= a < class_start[b]``, and the landmarks ``marks[:pre[b]]`` (zeros and no
        marks: every smaller set).
    fstart, fend : ndarray of int64, shape (s,)
        Front of set ``b`` is entries ``fstart[b]:fend[b]`` of the entry arrays.
    key_m, key_t : ndarray of int64, shape (s,)
        Written for each finished set ``b`` (and given for the sets ``< lo``): its front's
        least cached bytes minus ``2 tot_m[b]``, and its least overhead minus ``tot_t[b]``
        (INF for an empty front). The scan over candidate subsets reads only these two
        contiguous arrays before the subset test.
    ft, fm : ndarray of int64, shape (capacity,)
        Overhead (cost units) and cached bytes of each entry.
    fpa, fpe : ndarray of int64, shape (capacity,)
        Back-pointers: predecessor set index and its entry index (-1 for the root).
    used : int
        Number of entries in use.
    hull : bool
        Time-centric: thin each front by :func:`thin_front` (:data:`HULL_RUNS` runs): within
        each run of overhead only the states on the lower convex hull of (overhead, cached
        bytes), the states that minimise ``t + lam * m`` for some ``lam >= 0``. The state of
        least cache stays, so every budget the full front reaches is reached; a state off the
        hull is lost, so the optimum may rise (measured in ``examples/bench_quality.py``).
        False: the exact fronts.
    scratch_m, scratch_a, scratch_e : ndarray of int64, shape (T(V) + 1,)
        Work arrays; scratch_m must be INF everywhere on entry and is left so.

    Returns
    -------
    ft, fm, fpa, fpe : ndarray of int64
        The entry arrays, reallocated when they had to grow.
    used : int
        Entries in use after the block.
    pairs : int
        Number of transitions a ⊊ b evaluated.
    capped : int
        Number of feasible states dropped because their overhead exceeded `tcap` (or
        ``tcap - lb[b]``).
    b_next : int
        The first target set not processed (`hi` when the range is done).
    work : int
        Work units done.
    status : int
        ``STATUS_OK``, or ``STATUS_MEMORY`` when the entry arrays would outgrow `max_entries`
        (set ``b_next`` is then unfinished and the fronts must be discarded).
    """
    pairs = 0
    capped = 0
    work = 0
    b = lo
    while b < hi and work < work_budget:
        tmin = INF
        tmax = -1
        n_pre, a0, n_cand = _sources(b, class_start, a_lo, pre)
        work += n_cand
        # eq. (2) needs 2 M(L_b ∖ L_a) + extra[b] on top of the cached bytes, whose least value
        # in a front is its last entry: a set a that fails this bound is skipped before the
        # subset test
        room = budget - 2 * tot_m[b] - extra[b]
        # dt >= T(L_b ∖ L_a) - T(∂(L_b)); a time-centric front's least overhead is its first
        # entry (a set skipped this way counts as capped: the deepening goes on)
        cap_b = tcap if maximize else tcap - lb[b]
        low_b = lb[b] if maximize else -1
        room_t = INF if maximize else cap_b - tot_t[b] + bnd_t[b]
        for j in range(n_cand):
            a = marks[j] if j < n_pre else a0 + j - n_pre
            if key_m[a] > room:
                continue
            if key_t[a] > room_t:
                capped += 1
                continue
            if not chain and not _is_subset(sets, span, a, b):
                continue
            pairs += 1
            if chain:
                dt, dm, need = chain_transition(a, b, tot_t, tot_m, bnd_t, bnd_m, bptr, extra,
                                                bfirst, bcum_t, bcum_m)
            else:
                dt, dm, need = transition(a, b, tot_t, tot_m, bnd_bits, bnd_t, bnd_m, bptr,
                                          bidx, extra, cost, memory)
            cap = budget - need
            # Cached bytes decrease along a front (see the sweeps below), so the entries with
            # m <= cap are a suffix
            e0 = _first_at_most(fm, fstart[a], fend[a], cap)
            if maximize:
                stop = fend[a]
                for e in range(e0, fend[a]):
                    t2 = ft[e] + dt
                    if t2 > cap_b:
                        capped += 1
                        continue
                    if t2 < low_b:   # t decreases along the front's suffix
                        stop = e + 1
                        break
                    m2 = fm[e] + dm
                    if m2 < scratch_m[t2]:
                        scratch_m[t2] = m2
                        scratch_a[t2] = a
                        scratch_e[t2] = e
                        if t2 < tmin:
                            tmin = t2
                        if t2 > tmax:
                            tmax = t2
            else:
                # t increases along a time-centric front: the entries with t2 <= cap_b are a
                # prefix of the suffix. The first candidate at an overhead is always written
                # (scratch_m is INF there), so the prefix's ends are the least and most written.
                stop = _first_above(ft, e0, fend[a], cap_b - dt)
                if stop < fend[a]:
                    capped += 1
                    work += 1   # the entry that ends the prefix is read
                if stop > e0:
                    tmin = min(tmin, ft[e0] + dt)
                    tmax = max(tmax, ft[stop - 1] + dt)
                for e in range(e0, stop):
                    t2 = ft[e] + dt
                    m2 = fm[e] + dm
                    if m2 < scratch_m[t2]:
                        scratch_m[t2] = m2
                        scratch_a[t2] = a
                        scratch_e[t2] = e
            work += stop - e0
        fstart[b] = used
        if tmax < 0:
            fend[b] = used
            key_m[b] = INF
            key_t[b] = INF
            b += 1
            continue
        work += tmax - tmin + 1
        if used + (tmax - tmin + 1) > ft.shape[0]:
            need = used + (tmax - tmin + 1)
            if need > max_entries:
                for t in range(tmin, tmax + 1):
                    scratch_m[t] = INF
                return ft, fm, fpa, fpe, used, pairs, capped, b, work, STATUS_MEMORY
            new_cap = min(max(2 * ft.shape[0], need), max_entries)
            ft = _grow(ft, new_cap)
            fm = _grow(fm, new_cap)
            fpa = _grow(fpa, new_cap)
            fpe = _grow(fpe, new_cap)
        # Keep the states not dominated: sweep overhead from the preferred end (low t for the
        # time-centric mode, high t for the memory-centric one), keeping each strictly lower m.
        if maximize:
            t, t_end, step = tmax, tmin - 1, -1
        else:
            t, t_end, step = tmin, tmax + 1, 1
        best = INF
        prune = not maximize and lam.shape[0] > 1
        while t != t_end:
            m = scratch_m[t]
            if m < best:
                best = m
                if prune and t + _bound_at(g, lam, b, budget - m) > tcap:
                    capped += 1
                    scratch_m[t] = INF
                    t += step
                    continue
                ft[used] = t
                fm[used] = m
                fpa[used] = scratch_a[t]
                fpe[used] = scratch_e[t]
                used += 1
            scratch_m[t] = INF
            t += step
        if hull and not maximize:
            used = thin_front(ft, fm, fpa, fpe, fstart[b], used, HULL_RUNS)
        fend[b] = used
        if used == fstart[b]:
            key_m[b] = INF
            key_t[b] = INF
        else:
            key_m[b] = fm[used - 1] - 2 * tot_m[b]
            key_t[b] = (tmin if maximize else ft[fstart[b]]) - tot_t[b]
        b += 1
    return ft, fm, fpa, fpe, used, pairs, capped, b, work, STATUS_OK


@njit(cache=True)
def thin_front(ft, fm, fpa, fpe, start, end, runs):
    """Thin the time-centric front in entries ``start:end`` (overhead ``ft`` increasing, cached
    bytes ``fm`` decreasing) in place and return its new end: split its overhead span into
    `runs` equal runs, keep the first entry of each run, and between two such entries only the
    lower convex hull in (overhead, cached bytes), each entry kept strictly below the segment
    joining its neighbours. The first and last entries (least overhead, least cache) stay. A
    front that spans fewer than `runs` cost units is left whole. ``fpa``, ``fpe`` move with
    their entries."""
    if end - start < 3 or ft[end - 1] - ft[start] < runs:
        return end
    t0 = ft[start]
    run = (ft[end - 1] - t0) // runs
    w = start
    for i in range(start, end):
        t = ft[i]
        m = fm[i]
        while w - start >= 2:
            t1 = ft[w - 2]
            m1 = fm[w - 2]
            t2 = ft[w - 1]
            m2 = fm[w - 1]
            if (t2 - t0) // run != (t1 - t0) // run:
                break   # the first entry kept in its run stays
            if float(t2 - t1) * float(m - m1) - float(m2 - m1) * float(t - t1) > 0.0:
                break   # strictly below the segment from the entry before it to this one
            w -= 1
        ft[w] = t
        fm[w] = m
        fpa[w] = fpa[i]
        fpe[w] = fpe[i]
        w += 1
    return w


@njit(cache=True, inline="always")
def _sources(b, class_start, a_lo, pre):
    """The candidate predecessors of set ``b`` in the DP's scan, in increasing order: the first
    ``n_pre`` landmarks (``marks[:n_pre]``, all below ``a0``), then the sets ``a0 <= a <
    class_start[b]``. Returns (n_pre, a0, n_cand), n_cand the count of both."""
    a0 = min(a_lo[b], class_start[b])
    return pre[b], a0, pre[b] + class_start[b] - a0


@njit(cache=True, inline="always")
def _first_at_most(values, lo, hi, cap):
    """First index i in [lo, hi) with values[i] <= cap, for values decreasing on [lo, hi)."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if values[mid] <= cap:
            hi = mid
        else:
            lo = mid + 1
    return lo


@njit(cache=True, inline="always")
def _first_above(values, lo, hi, cap):
    """First index i in [lo, hi) with values[i] > cap (or hi), for values increasing on
    [lo, hi)."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if values[mid] > cap:
            hi = mid
        else:
            lo = mid + 1
    return lo


@njit(cache=True)
def _grow(arr, new_cap):
    out = np.empty(new_cap, dtype=arr.dtype)
    out[: arr.shape[0]] = arr
    return out


@njit(cache=True)
def peak_fronts(lo, hi, work_budget, max_entries, upper, sets, span, class_start, tot_t, tot_m,
                bnd_bits, bnd_t, bnd_m, bptr, bidx, extra, cost, memory, chain, bfirst, bcum_t,
                bcum_m, a_lo, pre, marks, fstart, fend, key_m, fm, fp, fpa, fpe, used):
    """Fill the min-budget fronts of sets ``lo <= b < hi``, stopping early after `work_budget`
    units of work.

    A state (b, m, p) is a sequence ending at set ``b`` with cached bytes m = M(U) and peak
    p = max_i M(i) so far (eq. 2). A transition a -> b maps (m, p) to
    (m + dm, max(p, m + need)). The front of ``b`` keeps the states not dominated in (m low,
    p low); the minimal budget is the least p in the front of V. States with p > `upper` are
    dropped (`upper` is a known feasible peak, or INF).

    Parameters
    ----------
    lo, hi, work_budget, max_entries, sets, span, class_start, tot_t, ..., memory, chain, ...,
    bcum_m, a_lo, pre, marks : as in :func:`dp_fronts`.
    upper : int64
        Upper bound on the answer, in bytes.
    fstart, fend : ndarray of int64, shape (s,)
    key_m : ndarray of int64, shape (s,)
        As in :func:`dp_fronts`: per finished set, its front's least cached bytes minus
        ``2 tot_m[b]`` (INF for an empty front).
    fm, fp, fpa, fpe : ndarray of int64, shape (capacity,)
        Cached bytes, peak bytes, and back-pointers of each entry.
    used : int

    Returns
    -------
    fm, fp, fpa, fpe, used, pairs, b_next, work, status : as in :func:`dp_fronts`.
    """
    pairs = 0
    work = 0
    cap = 64
    # the front of the current target, kept sorted and free of dominated states
    cm = np.empty(cap, dtype=np.int64)
    cp = np.empty(cap, dtype=np.int64)
    ca = np.empty(cap, dtype=np.int64)
    ce = np.empty(cap, dtype=np.int64)
    b = lo
    while b < hi and work < work_budget:
        c = 0
        n_pre, a0, n_cand = _sources(b, class_start, a_lo, pre)
        work += n_cand
        # a transition reaches at least m + need, whose least value in a front is at its first
        # entry (cached bytes increase along it): a set a above `upper` that way is skipped
        room = upper - 2 * tot_m[b] - extra[b]
        for j in range(n_cand):
            a = marks[j] if j < n_pre else a0 + j - n_pre
            if key_m[a] > room:
                continue
            if not chain and not _is_subset(sets, span, a, b):
                continue
            pairs += 1
            if chain:
                dt, dm, need = chain_transition(a, b, tot_t, tot_m, bnd_t, bnd_m, bptr, extra,
                                                bfirst, bcum_t, bcum_m)
            else:
                dt, dm, need = transition(a, b, tot_t, tot_m, bnd_bits, bnd_t, bnd_m, bptr,
                                          bidx, extra, cost, memory)
            work += fend[a] - fstart[a]
            for e in range(fstart[a], fend[a]):
                m = fm[e]
                p = m + need
                if fp[e] > p:
                    p = fp[e]
                if p > upper:
                    continue
                m2 = m + dm
                # the front (cm ascending, cp strictly descending): the entry with the largest
                # cm <= m2 has the least cp among those, so one binary search tells dominance
                lo_i = 0
                hi_i = c
                while lo_i < hi_i:
                    mid = (lo_i + hi_i) >> 1
                    if cm[mid] <= m2:
                        lo_i = mid + 1
                    else:
                        hi_i = mid
                if lo_i > 0 and cp[lo_i - 1] <= p:
                    continue
                # entries with cm >= m2 and cp >= p are dominated by the new state: they form
                # the run starting at the insertion point (or at an equal cm just before it)
                first = lo_i - 1 if lo_i > 0 and cm[lo_i - 1] == m2 else lo_i
                last = first
                while last < c and cp[last] >= p:
                    last += 1
                if c + 1 > cap:
                    cap *= 2
                    cm = _grow(cm, cap)
                    cp = _grow(cp, cap)
                    ca = _grow(ca, cap)
                    ce = _grow(ce, cap)
                shift = 1 - (last - first)
                work += c - last
                if shift > 0:
                    for j in range(c - 1, last - 1, -1):
                        cm[j + shift] = cm[j]
                        cp[j + shift] = cp[j]
                        ca[j + shift] = ca[j]
                        ce[j + shift] = ce[j]
                elif shift < 0:
                    for j in range(last, c):
                        cm[j + shift] = cm[j]
                        cp[j + shift] = cp[j]
                        ca[j + shift] = ca[j]
                        ce[j + shift] = ce[j]
                cm[first] = m2
                cp[first] = p
                ca[first] = a
                ce[first] = e
                c += shift
        fstart[b] = used
        if used + c > fm.shape[0]:
            if used + c > max_entries:
                return fm, fp, fpa, fpe, used, pairs, b, work, STATUS_MEMORY
            new_cap = min(max(2 * fm.shape[0], used + c), max_entries)
            fm = _grow(fm, new_cap)
            fp = _grow(fp, new_cap)
            fpa = _grow(fpa, new_cap)
            fpe = _grow(fpe, new_cap)
        for j in range(c):
            fm[used] = cm[j]
            fp[used] = cp[j]
            fpa[used] = ca[j]
            fpe[used] = ce[j]
            used += 1
        fend[b] = used
        key_m[b] = (cm[0] if c > 0 else INF) - 2 * tot_m[b]
        b += 1
    return fm, fp, fpa, fpe, used, pairs, b, work, STATUS_OK
