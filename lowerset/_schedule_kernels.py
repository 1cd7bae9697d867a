"""Numba kernels of the execution schedule (:mod:`lowerset.scheduling`).

Every function here is ``@njit(cache=True)``, takes only contiguous ndarrays and scalars, and
never raises. The graph's execution facts arrive flattened (:class:`lowerset.scheduling.Flat`):

- node ids ``0..n-1``; ``fwd`` is the forward order, ``fpos[v]`` its inverse, ``bwd`` the
  backward order;
- outputs are numbered ``0..n_out-1``: node ``v`` owns ``out_ptr[v]:out_ptr[v+1]``;
  ``out_view[o]`` is -1 (owns its memory), -2 (a view of an external array) or the output it is
  a view of;
- arguments are numbered ``0..n_args-1``: node ``v`` owns ``arg_ptr[v]:arg_ptr[v+1]``;
  ``arg_out[a]`` is the output it reads or -1 (external); ``arg_target[a]`` numbers the array
  whose gradient it receives (outputs first, then externals);
- ``rarg`` and ``rout`` (CSR by node) list the arguments and outputs a backward reads.

Event kinds are the integer codes of :data:`EVENT_CODES` (EVICT, EVICT_STATE and REMATERIALIZE
are the events of a runtime cache, :func:`lowerset.baselines.dtr`, which :func:`fold` counts
too); the event arrays are ``kind``, ``node``, ``nbytes`` (int64, one entry per event) and the
outputs of each event in CSR form (``optr``, ``oidx``, output indexes local to the node).

The passes take their int64 arrays from an *arena* ``ws`` (int64, shape (k,)) from index
``top`` on and return the index after what they took (:func:`_take`): a local search that
schedules thousands of labellings on one thread reuses one arena instead of allocating and
freeing some 30 arrays per schedule, which on glibc costs about as much as the passes
themselves (the freed heap is trimmed and faulted in again). Where the arena ends, a pass
allocates what it needs, and the index returned still counts it: a caller that keeps the
results passes an empty arena, and one that reuses an arena grows it to that index.

References: Kusumoto et al., NeurIPS 2019, Sec. 3 (canonical strategy; liveness analysis).
"""

import numpy as np
from numba import njit

FORWARD, DROP, FREE_VALUE, FREE_STATE, SEED_GRAD, RECOMPUTE, BACKWARD, FREE_GRAD = range(8)
EVICT, EVICT_STATE, REMATERIALIZE = range(8, 11)  # a runtime cache's events (baselines.dtr)
EVENT_CODES = ("forward", "drop", "free_value", "free_state", "seed_grad", "recompute",
               "backward", "free_grad", "evict", "evict_state", "rematerialize")

#: A byte bound no schedule reaches: :func:`fold_run` and :func:`peak_and_cost` without a stop.
NO_STOP = 1 << 62


@njit(cache=True, inline="always")
def _take(ws, top, size):
    """`size` int64 entries of the arena `ws` from index `top` (a fresh array where the arena
    ends before them; contents undefined), and the index after them."""
    end = top + size
    if end <= ws.shape[0]:
        return ws[top:end], end
    return np.empty(size, dtype=np.int64), end


@njit(cache=True, inline="always")
def _filled(ws, top, size, value):
    """:func:`_take` with every entry set to `value`."""
    a, top = _take(ws, top, size)
    a[:] = value
    return a, top


@njit(cache=True)
def compute_events(dropped, fwd, fpos, bwd, state, stoch, arg_ptr, arg_node, rarg_ptr,
                   rarg_idx, rout_ptr, ws, top):
    """Pass 1: the forward, recompute and backward events of a hooked step, in order.

    Parameters
    ----------
    dropped : ndarray of bool, shape (n,)
        The strategy drops the node's outputs after the forward pass.
    fwd, fpos : ndarray of int64, shape (n,)
    bwd : ndarray of int64, shape (nb,)
    state : ndarray of int64, shape (n,)
        State bytes.
    stoch : ndarray of bool, shape (n,)
    arg_ptr, arg_node, rarg_ptr, rarg_idx, rout_ptr : ndarray of int64
        See the module docstring (``arg_node[a]`` is the producing node or -1).
    ws, top : the arena and its first free index (see the module docstring).

    Returns
    -------
    kind, node : ndarray of int64, shape (#compute events,)
        FORWARD for every node in forward order; then, per node of `bwd`, the RECOMPUTE of the
        dropped values its backward needs (transitively through dropped inputs; forward order),
        then its BACKWARD. A recomputed value is never recomputed again.
    top : int
        The arena's first free index after the pass.
    """
    n = fwd.shape[0]
    cap = 2 * n + bwd.shape[0]
    kind, top = _take(ws, top, cap)
    node, top = _take(ws, top, cap)
    c = 0
    for i in range(n):
        kind[c] = FORWARD
        node[c] = fwd[i]
        c += 1
    missing = dropped.copy()
    in_todo = np.zeros(n, dtype=np.bool_)
    stack, top = _take(ws, top, n + arg_node.shape[0] + 1)
    todo, top = _take(ws, top, n)
    keys, top = _take(ws, top, n)
    order, top = _take(ws, top, n)
    for j in bwd:
        ns = 0
        if missing[j] and (rout_ptr[j + 1] > rout_ptr[j] or (state[j] > 0 and not stoch[j])):
            stack[ns] = j
            ns += 1
        for r in range(rarg_ptr[j], rarg_ptr[j + 1]):
            s = arg_node[rarg_idx[r]]
            if s >= 0 and missing[s]:
                stack[ns] = s
                ns += 1
        nt = 0
        while ns > 0:  # the dropped values needed, and the dropped inputs that make them
            ns -= 1
            v = stack[ns]
            if in_todo[v]:
                continue
            in_todo[v] = True
            todo[nt] = v
            nt += 1
            for a in range(arg_ptr[v], arg_ptr[v + 1]):
                s = arg_node[a]
                if s >= 0 and missing[s] and not in_todo[s]:
                    stack[ns] = s
                    ns += 1
        for i in range(nt):
            keys[i] = fpos[todo[i]]
        if nt > 1:   # (most backward calls recompute nothing or one node)
            _sort_by_key(keys, order, nt)
        elif nt == 1:
            order[0] = 0
        for i in order[:nt]:
            v = todo[i]
            kind[c] = RECOMPUTE
            node[c] = v
            c += 1
            missing[v] = False
            in_todo[v] = False
        kind[c] = BACKWARD
        node[c] = j
        c += 1
    return kind[:c], node[:c], top


@njit(cache=True)
def liveness(ckind, cnode, n_out, state, stoch, out_ptr, arg_ptr, arg_out, rarg_ptr, rarg_idx,
             rout_ptr, rout_idx, returned, held, ws, top):
    """Pass 2: the last read of every materialization of every array.

    Slots ``0..n_out-1`` are outputs, ``n_out + v`` the state of node ``v``. A FORWARD or
    RECOMPUTE of ``v`` writes ``v``'s outputs and its state (a stochastic recomputation reuses
    the state: it reads it) and reads all ``v``'s arguments; a BACKWARD reads the arguments in
    ``rarg``, the outputs in ``rout`` and its state. A write closes the slot's previous
    materialization. Returned outputs stay open (never freed). The FORWARD copy of output ``o``
    is read at least until compute event ``held[o]`` (a forward position: the forward events
    come first, in forward order), the last function during which the step's code holds it.

    Returns
    -------
    slot, start, last : ndarray of int64, shape (#materializations,)
        Each closed materialization: its slot, the compute event that made it and the index of
        its last read (its own index when it is never read).
    top : int
        The arena's first free index after the pass (`ws`, `top`: see the module docstring).
    """
    n = state.shape[0]
    n_slot = n_out + n
    open_at, top = _filled(ws, top, n_slot, -1)
    last, top = _filled(ws, top, n_slot, 0)
    floor, top = _filled(ws, top, n_slot, -1)  # the held_until of an open forward copy
    cap = 2 * n_slot + ckind.shape[0] + 1
    r_slot, top = _take(ws, top, cap)
    r_start, top = _take(ws, top, cap)
    r_last, top = _take(ws, top, cap)
    r = 0
    for e in range(ckind.shape[0]):
        k = ckind[e]
        v = cnode[e]
        if k == BACKWARD:
            for i in range(rarg_ptr[v], rarg_ptr[v + 1]):
                o = arg_out[rarg_idx[i]]
                if o >= 0:
                    last[o] = e
            for i in range(rout_ptr[v], rout_ptr[v + 1]):
                last[rout_idx[i]] = e
            if state[v] > 0:
                last[n_out + v] = e
            continue
        for a in range(arg_ptr[v], arg_ptr[v + 1]):
            o = arg_out[a]
            if o >= 0:
                last[o] = e
        makes_state = state[v] > 0
        if k == RECOMPUTE and stoch[v]:
            makes_state = False
            if state[v] > 0:
                last[n_out + v] = e
        # the slots it writes (outputs, then the state): each closes its open materialization
        # (recorded at index r; it lives at least until event floor[x]) and opens a new one.
        # Written out here, not in a helper taking the arrays: Numba counts references to
        # each array a call in this loop takes, even inlined, and a helper per slot makes the
        # pass about 9 times as long (0.47 against 0.05 ms at 2,500 nodes).
        n_w = out_ptr[v + 1] - out_ptr[v]
        for j in range(n_w + 1 if makes_state else n_w):
            x = out_ptr[v] + j if j < n_w else n_out + v
            if open_at[x] >= 0:
                r_slot[r] = x
                r_start[r] = open_at[x]
                r_last[r] = max(last[x], floor[x])
                r += 1
            open_at[x] = e
            last[x] = e
            floor[x] = held[x] if k == FORWARD and j < n_w else -1
    for x in range(n_slot):
        if open_at[x] >= 0 and not (x < n_out and returned[x]):
            r_slot[r] = x
            r_start[r] = open_at[x]
            r_last[r] = max(last[x], floor[x])
            r += 1
    return r_slot[:r], r_start[:r], r_last[:r], top


@njit(cache=True)
def emit_events(ckind, cnode, r_slot, r_start, r_last, dropped, n_out, fpos, out_ptr,
                out_node, out_bytes, state, stoch, seed, grad_out, ws, top):
    """Pass 2, second half: the ordered events of a hooked step.

    After each compute event: the seeds' initial gradients (after the last forward), the
    node's output gradients (after a backward), then the states and the values whose last read
    it was: states in forward order, then values grouped per node (forward order), a DROP for
    the forward copy of a dropped value and FREE_VALUE otherwise.

    Returns
    -------
    kind, node, nbytes, optr, oidx : ndarray of int64
        The events (see the module docstring).
    top : int
        The arena's first free index after the pass (`ws`, `top`: see the module docstring).
    """
    n_c = ckind.shape[0]
    n_r = r_slot.shape[0]
    cap = 2 * n_c + n_r + n_out + 2   # compute events, a FREE_GRAD per backward, frees, seeds
    kind, top = _take(ws, top, cap)
    node, top = _take(ws, top, cap)
    nbytes, top = _take(ws, top, cap)
    optr, top = _take(ws, top, cap + 1)
    optr[0] = 0
    oidx, top = _take(ws, top, 3 * n_out + n_r + 2)
    # bucket the closed materializations by their last read
    cnt, top = _filled(ws, top, n_c + 1, 0)
    for i in range(n_r):
        cnt[r_last[i] + 1] += 1
    for e in range(n_c):
        cnt[e + 1] += cnt[e]
    fill, top = _take(ws, top, n_c)
    fill[:] = cnt[:-1]
    order, top = _take(ws, top, n_r)
    for i in range(n_r):
        order[fill[r_last[i]]] = i
        fill[r_last[i]] += 1
    n = state.shape[0]
    stride = n_out + 1
    # the keys of one event's closed materializations and their sorted order (reused)
    keys, top = _take(ws, top, n_r + 1)
    srt, top = _take(ws, top, n_r + 1)
    last_forward = -1
    for e in range(n_c):
        if ckind[e] == FORWARD:
            last_forward = e
    ev = 0
    no = 0
    for e in range(n_c):
        v = cnode[e]
        k = ckind[e]
        kind[ev] = k
        node[ev] = v
        if k == BACKWARD:
            b = 0
            for o in range(out_ptr[v], out_ptr[v + 1]):
                if grad_out[o]:
                    b += out_bytes[o]
            nbytes[ev] = b
        else:
            b = 0
            for o in range(out_ptr[v], out_ptr[v + 1]):
                b += out_bytes[o]
                oidx[no] = o - out_ptr[v]
                no += 1
            if state[v] > 0 and not (k == RECOMPUTE and stoch[v]):
                b += state[v]
            nbytes[ev] = b
        ev += 1
        optr[ev] = no
        if e == last_forward:
            for o in range(n_out):
                if seed[o]:
                    kind[ev] = SEED_GRAD
                    node[ev] = out_node[o]
                    nbytes[ev] = out_bytes[o]
                    oidx[no] = o - out_ptr[out_node[o]]
                    no += 1
                    ev += 1
                    optr[ev] = no
        if k == BACKWARD:
            b = 0
            got = False
            for o in range(out_ptr[v], out_ptr[v + 1]):
                if grad_out[o]:
                    b += out_bytes[o]
                    got = True
            if got:
                kind[ev] = FREE_GRAD
                node[ev] = v
                nbytes[ev] = b
                ev += 1
                optr[ev] = no
        lo, hi = cnt[e], cnt[e + 1]
        if lo == hi:
            continue
        # order: states by forward position, then values by (node position, kind, output)
        for i in range(lo, hi):
            x = r_slot[order[i]]
            if x >= n_out:
                keys[i - lo] = fpos[x - n_out]
            else:
                u = out_node[x]
                is_drop = dropped[u] and ckind[r_start[order[i]]] == FORWARD
                keys[i - lo] = n + (fpos[u] * 2 + (0 if is_drop else 1)) * stride + x
        if hi - lo > 1:   # (most events close one materialization)
            _sort_by_key(keys, srt, hi - lo)
        else:
            srt[0] = 0
        i = 0
        while i < hi - lo:
            x = r_slot[order[lo + srt[i]]]
            if x >= n_out:
                u = x - n_out
                kind[ev] = FREE_STATE
                node[ev] = u
                nbytes[ev] = state[u]
                ev += 1
                optr[ev] = no
                i += 1
                continue
            u = out_node[x]
            group = (keys[srt[i]] - n) // stride
            kind[ev] = DROP if group % 2 == 0 else FREE_VALUE
            node[ev] = u
            b = 0
            while i < hi - lo and keys[srt[i]] >= n and (keys[srt[i]] - n) // stride == group:
                x = r_slot[order[lo + srt[i]]]
                b += out_bytes[x]
                oidx[no] = x - out_ptr[u]
                no += 1
                i += 1
            nbytes[ev] = b
            ev += 1
            optr[ev] = no
    return kind[:ev], node[:ev], nbytes[:ev], optr[:ev + 1], oidx[:no], top


@njit(cache=True, inline="always")
def _sort_by_key(keys, srt, m):
    """Write into ``srt[:m]`` the positions of ``keys[:m]`` (distinct) in increasing key order:
    an insertion sort where an event closes one to a few materializations, else argsort.
    Callers skip it for one key: Numba counts references to the two arrays at each call in
    their loops, which costs as much as the rest of those passes."""
    if m > 32:
        srt[:m] = np.argsort(keys[:m])
        return
    for i in range(m):
        j = i
        while j > 0 and keys[srt[j - 1]] > keys[i]:
            srt[j] = srt[j - 1]
            j -= 1
        srt[j] = i


@njit(cache=True)
def _new(bsize, brefs, nb, nbytes):
    bsize[nb] = nbytes
    brefs[nb] = 1
    return nb


@njit(cache=True)
def fold(kind, node, nbytes, optr, oidx, resident, n_out, n_targets, out_ptr, out_bytes,
         out_view, state, stoch, arg_ptr, arg_target, arg_size, arg_gsize, arg_grad, arg_gview,
         grad_out, fpeak, bpeak, sum_inplace, ext_bytes, made_ptr, made_idx, efree_ptr,
         efree_idx, out_at, bwd, gs_target, gs_bytes, gs_arrivals):
    """Pass 3: bytes in use after each event and at each event's highest point.

    :func:`fold_run` over the events from :func:`fold_start` (with the gradients that exist
    at the start, `gs_target`, `gs_bytes`, `gs_arrivals`), with the resident bytes added.

    Returns
    -------
    timeline, highs : ndarray of int64, shape (#events,)
        Bytes in use (resident included) after each event and at its highest point.
    """
    ws = np.empty(0, dtype=np.int64)
    st, _ = fold_start(n_out, n_targets, state.shape[0], arg_ptr[state.shape[0]], gs_target,
                       gs_bytes, gs_arrivals, sum_inplace, ws, 0)
    st, timeline, highs, _ = fold_run(st, kind, node, nbytes, optr, oidx, out_ptr, out_bytes,
                                      out_view, state, stoch, arg_ptr, arg_target, arg_size,
                                      arg_gsize, arg_grad, arg_gview, grad_out, fpeak, bpeak,
                                      sum_inplace, ext_bytes, made_ptr, made_idx, efree_ptr,
                                      efree_idx, out_at, bwd, ws, 0)
    timeline += resident
    highs += resident
    return timeline, highs


@njit(cache=True, inline="always")
def _fold_cap(n_out, n, n_args, n_ext):
    """The buffer table's first capacity (entries); :func:`fold_run` doubles it where it
    fills up."""
    return 4 * n_out + 2 * n + 2 * n_args + n_ext + 8


@njit(cache=True)
def fold_start(n_out, n_targets, n, n_args, gs_target, gs_bytes, gs_arrivals, sum_inplace, ws,
               top):
    """The state of a fold before the first event (its arrays from the arena `ws` at `top`,
    see the module docstring): no buffer in use but the gradients that exist when the step
    starts, which the resident bytes count (so the bytes in use start at 0).

    Parameters
    ----------
    n_out, n_targets, n, n_args : int
        Outputs, gradient targets (outputs, then externals), nodes, arguments.
    gs_target, gs_bytes, gs_arrivals : ndarray of int64, shape (#gradients at start,)
        Per gradient that exists at the start (``ExecutionFacts.grads_at_start``): its target,
        its bytes, and how many gradients the backward pass sums into that target.
    sum_inplace : bool
        With False (Chainer) each is its target's pending gradient; with True (PyTorch) each
        waits apart (``gacc``) while the arrivals gather in the pending gradient, and takes
        them in after the last (:func:`fold_run`).
    ws, top : the arena and its first free index.

    Returns
    -------
    st : tuple of 11 ndarray of int64
        ``(bsize, brefs, val, sbuf, pend, gy, gx, scal, ebuf, gacc, left)``: per buffer its
        bytes and references (shape (capacity,)); the buffer of each output (shape (n_out,))
        and state (shape (n,)), -1 when not held, -2 for a view of an external array; the
        pending gradient of each target (shape (n_targets,)); the output gradients a backward
        is using (shape (n_out,)); the argument gradients of one backward (shape (max(1,
        n_args),)); ``scal = [bytes in use, buffers made, bytes outside the graph now,
        backward events folded (-1 before the backward pass)]`` (shape (4,)); the buffer of each
        external array made in the step, -1 when not held (shape (n_targets - n_out,)); per
        target, the gradient that existed at the start while it waits for the arrivals, -1
        when none waits, and the arrivals still to come (shape (n_targets,) each).
    top : int
        The arena's first free index after them.
    """
    n_ext = n_targets - n_out
    cap = _fold_cap(n_out, n, n_args, n_ext)
    bsize, top = _filled(ws, top, cap, 0)
    brefs, top = _filled(ws, top, cap, 0)
    val, top = _filled(ws, top, n_out, -1)
    sbuf, top = _filled(ws, top, n, -1)
    pend, top = _filled(ws, top, n_targets, -1)
    gy, top = _filled(ws, top, n_out, -1)
    gx, top = _take(ws, top, max(1, n_args))
    scal, top = _filled(ws, top, 4, 0)
    scal[3] = -1
    ebuf, top = _filled(ws, top, n_ext, -1)
    gacc, top = _filled(ws, top, n_targets, -1)
    left, top = _filled(ws, top, n_targets, 0)
    for i in range(gs_target.shape[0]):  # resident: allocated, not counted in use
        t = gs_target[i]
        if sum_inplace:
            gacc[t] = _new(bsize, brefs, i, gs_bytes[i])
            left[t] = gs_arrivals[i]
        else:
            pend[t] = _new(bsize, brefs, i, gs_bytes[i])
    scal[1] = gs_target.shape[0]
    return (bsize, brefs, val, sbuf, pend, gy, gx, scal, ebuf, gacc, left), top


@njit(cache=True)
def fold_compact(st, cap):
    """`st` with its buffers renumbered: the ones still in use get ids ``0 .. k-1`` in a
    table of `cap` entries (at least ``k``), and every reference follows; the bytes in use do
    not change. A fold that runs for long (a runtime cache's replays make new buffers without
    end) keeps its state small with it."""
    bsize, brefs, val, sbuf, pend, gy, gx, scal, ebuf, gacc, left = st
    nb = scal[1]
    new_id = np.full(nb, -1, dtype=np.int64)
    live = 0
    for b in range(nb):
        if brefs[b] > 0:
            live += 1
    size2 = np.zeros(max(cap, live), dtype=np.int64)
    refs2 = np.zeros(max(cap, live), dtype=np.int64)
    k = 0
    for b in range(nb):
        if brefs[b] > 0:
            new_id[b] = k
            size2[k] = bsize[b]
            refs2[k] = brefs[b]
            k += 1
    for arr in (val, sbuf, pend, gy, ebuf, gacc):
        for i in range(arr.shape[0]):
            if arr[i] >= 0:
                arr[i] = new_id[arr[i]]
    scal[1] = k
    return (size2, refs2, val, sbuf, pend, gy, gx, scal, ebuf, gacc, left)


@njit(cache=True)
def fold_need(st, kind, node, nbytes, optr, oidx, out_ptr, out_bytes, out_view, state, stoch,
              arg_ptr, arg_target, arg_size, arg_gsize, arg_grad, arg_gview, grad_out, fpeak,
              bpeak, sum_inplace, ext_bytes, made_ptr, made_idx, efree_ptr, efree_idx, out_at,
              bwd):
    """Fold all events but the last into `st` (:func:`fold_run`), then say what the last would
    need: the bytes above the level after them that it would reach at its highest point (run
    on a copy of the state, which it leaves as it is).

    Returns
    -------
    st : tuple
        The state after all events but the last.
    need : int
    high : int
        The highest point of the events folded in, -1 when there were none (resident bytes not
        included).
    """
    n = kind.shape[0]
    ws = np.empty(0, dtype=np.int64)
    st, timeline, highs, _ = fold_run(st, kind[:n - 1], node, nbytes, optr, oidx, out_ptr,
                                      out_bytes, out_view, state, stoch, arg_ptr, arg_target,
                                      arg_size, arg_gsize, arg_grad, arg_gview, grad_out, fpeak,
                                      bpeak, sum_inplace, ext_bytes, made_ptr, made_idx,
                                      efree_ptr, efree_idx, out_at, bwd, ws, 0)
    copy = (st[0].copy(), st[1].copy(), st[2].copy(), st[3].copy(), st[4].copy(),
            st[5].copy(), st[6].copy(), st[7].copy(), st[8].copy(), st[9].copy(),
            st[10].copy())
    copy, last, last_high, _ = fold_run(copy, kind[n - 1:], node[n - 1:], nbytes[n - 1:],
                                        optr[n - 1:], oidx, out_ptr, out_bytes, out_view, state,
                                        stoch, arg_ptr, arg_target, arg_size, arg_gsize,
                                        arg_grad, arg_gview, grad_out, fpeak, bpeak,
                                        sum_inplace, ext_bytes, made_ptr, made_idx, efree_ptr,
                                        efree_idx, out_at, bwd, ws, 0)
    high = highs.max() if n > 1 else -1
    return st, last_high[0] - st[7][0] - st[7][2], high


@njit(cache=True)
def fold_run(st, kind, node, nbytes, optr, oidx, out_ptr, out_bytes, out_view, state, stoch,
             arg_ptr, arg_target, arg_size, arg_gsize, arg_grad, arg_gview, grad_out, fpeak,
             bpeak, sum_inplace, ext_bytes, made_ptr, made_idx, efree_ptr, efree_idx, out_at,
             bwd, ws, top, stop=NO_STOP):
    """The memory fold of events from state `st` (:func:`fold_start`); the one statement of
    how events use memory, for :func:`fold` and for a runtime that builds its events one by
    one (:func:`lowerset.baselines.dtr`).

    Memory is counted per buffer: a view shares its base's buffer (its bytes are in use while
    any array refers to it). A FORWARD or RECOMPUTE allocates the outputs that are not views and
    the state; a REMATERIALIZE (a runtime cache's replay of a forward) allocates those of its
    outputs and state that are not held and makes the held ones again as transient duplicates;
    DROP, FREE_VALUE and EVICT release outputs, FREE_STATE and EVICT_STATE a state. A BACKWARD
    takes its outputs' pending gradients, allocates one gradient per argument it gives one to
    (``arg_gsize`` bytes, or a view of an output gradient when ``arg_gview`` says so; a sum
    has the argument's ``arg_size`` bytes), then sums each into the pending
    gradient of its target in argument order. With `sum_inplace` False (Chainer) a target with
    more than one gradient gets one new array; with it True (PyTorch) the output gradients are
    released first, then each arriving gradient is added into the pending one if no other array
    shares that buffer, else the pending one into the arriving one if none shares that, else
    both into a new array. A target whose gradient existed when the step started
    (:func:`fold_start`) takes, after the backward that brings its last arrival, the pending
    gradient into that one in place (PyTorch's AccumulateGrad once its input buffer is
    complete); the pending one is released. The initial gradient of a seed is also held by
    the caller for the whole step. A FORWARD of node ``v`` first allocates the external arrays
    made in the step before it (``made_idx[made_ptr[v]:made_ptr[v+1]]``, ``ext_bytes`` each;
    its start level includes them) and, after its highest point, frees those freed after it
    (``efree_idx`` from ``efree_ptr``). An event's highest point is its start level plus the
    larger of what it allocates (for a BACKWARD with its sums, for a REMATERIALIZE with its
    duplicates) and its measured peak (`fpeak`, `bpeak`). Beside the graph's arrays, the step
    holds bytes outside it that no plan changes (``ExecutionFacts.outside_forward``,
    ``outside_backward``): ``out_at[v]`` during the FORWARD of ``v`` and the events after it
    up to the next compute event, ``out_at[n + w]`` from the backward pass's first compute
    event for ``w`` (the recomputations before its BACKWARD) through that BACKWARD and the
    frees after it, where ``w`` is the next node of `bwd` whose BACKWARD has not run (a
    REMATERIALIZE before the backward pass counts as forward); they are added to the bytes in
    use. The fold stops after the first event whose highest point passes `stop` (bytes,
    resident not included): a search that only needs to know whether a schedule stays within
    a peak.

    Returns
    -------
    st : tuple
        The state after the events (its buffer table grown where it filled up).
    timeline, highs : ndarray of int64, shape (#events folded,)
        Bytes in use after each event and at its highest point (resident bytes not included):
        all the events, or up to the one that passed `stop`.
    top : int
        The arena's first free index after `timeline` and `highs` (`ws`, `top`: see the module
        docstring).
    """
    n_ev = kind.shape[0]
    n = state.shape[0]
    bsize, brefs, val, sbuf, pend, gy, gx, scal, ebuf, gacc, left = st
    used = scal[0]
    nb = scal[1]
    out = scal[2]
    kb = scal[3]
    cap = bsize.shape[0]
    timeline, top = _take(ws, top, n_ev)
    highs, top = _take(ws, top, n_ev)
    # grow the buffer table before the loop, not in it: Numba counts references to an array
    # reassigned in the loop at every call that takes it (_new, _unref, the sums), which
    # makes the fold about twice as long
    most = nb + _most_buffers(kind, node, out_ptr, arg_ptr, made_ptr)
    if most > cap:
        while most > cap:
            cap *= 2
        bsize = _grown(bsize, cap)
        brefs = _grown(brefs, cap)
    for i in range(n_ev):
        k = kind[i]
        v = node[i]
        if k == FORWARD:
            out = out_at[v]
        elif k == SEED_GRAD or k == RECOMPUTE or k == BACKWARD or (k == REMATERIALIZE
                                                                    and kb >= 0):
            kb = max(kb, 0)
            out = out_at[n + bwd[kb]] if kb < bwd.shape[0] else 0
        if k == FORWARD:  # the arrays the step makes outside the graph before this function
            for j in range(made_ptr[v], made_ptr[v + 1]):
                e = made_idx[j]
                ebuf[e] = _new(bsize, brefs, nb, ext_bytes[e])
                nb += 1
                used += ext_bytes[e]
        before = used
        extra = 0
        if k == FORWARD or k == RECOMPUTE or k == REMATERIALIZE:
            dup = 0
            for o in range(out_ptr[v], out_ptr[v + 1]):
                w = out_view[o]
                if k == REMATERIALIZE and val[o] != -1:  # held: made again and released
                    if w == -1:
                        dup += out_bytes[o]
                elif w == -1:
                    val[o] = _new(bsize, brefs, nb, out_bytes[o])
                    nb += 1
                    used += out_bytes[o]
                elif w == -2 or val[w] < 0:
                    val[o] = -2
                else:
                    val[o] = val[w]
                    brefs[val[w]] += 1
            if state[v] > 0 and not (k != FORWARD and stoch[v]):
                if k == REMATERIALIZE and sbuf[v] >= 0:
                    dup += state[v]
                else:
                    sbuf[v] = _new(bsize, brefs, nb, state[v])
                    nb += 1
                    used += state[v]
            extra = max(dup, fpeak[v] - (used - before))
            if k == FORWARD and efree_ptr[v + 1] > efree_ptr[v]:
                top = used + extra
                for j in range(efree_ptr[v], efree_ptr[v + 1]):
                    e = efree_idx[j]
                    used -= _unref(bsize, brefs, ebuf[e])
                    ebuf[e] = -1
                extra = top - used
        elif k == DROP or k == FREE_VALUE or k == EVICT:
            for j in range(optr[i], optr[i + 1]):
                o = out_ptr[v] + oidx[j]
                used -= _unref(bsize, brefs, val[o])
                val[o] = -1
        elif k == FREE_STATE or k == EVICT_STATE:
            used -= _unref(bsize, brefs, sbuf[v])
            sbuf[v] = -1
        elif k == SEED_GRAD:
            o = out_ptr[v] + oidx[optr[i]]
            pend[o] = _new(bsize, brefs, nb, nbytes[i])
            brefs[nb] += 1  # the caller holds the initial gradient too
            nb += 1
            used += nbytes[i]
        elif k == BACKWARD:
            for o in range(out_ptr[v], out_ptr[v + 1]):
                if grad_out[o]:
                    gy[o] = pend[o]
                    pend[o] = -1
            for a in range(arg_ptr[v], arg_ptr[v + 1]):
                if not arg_grad[a]:
                    continue
                w = arg_gview[a]
                if w >= 0 and gy[out_ptr[v] + w] >= 0:
                    gx[a] = gy[out_ptr[v] + w]
                    brefs[gx[a]] += 1
                else:
                    gx[a] = _new(bsize, brefs, nb, arg_gsize[a])
                    nb += 1
                    used += arg_gsize[a]
            high = used
            if sum_inplace:
                for o in range(out_ptr[v], out_ptr[v + 1]):
                    used -= _unref(bsize, brefs, gy[o])
                    gy[o] = -1
                used, high, nb = _sum_inplace(v, arg_ptr, arg_grad, arg_target, arg_size, gx,
                                              pend, bsize, brefs, nb, used, high, gacc, left)
            else:
                used, high, nb = _sum_new(v, arg_ptr, arg_grad, arg_target, arg_size, gx, pend,
                                          bsize, brefs, nb, used, high)
            extra = max(0, bpeak[v] - (high - before)) + (high - used)
        elif k == FREE_GRAD:
            for o in range(out_ptr[v], out_ptr[v + 1]):
                if gy[o] >= 0:
                    used -= _unref(bsize, brefs, gy[o])
                    gy[o] = -1
        timeline[i] = used + out
        highs[i] = used + extra + out
        if k == BACKWARD:
            kb += 1
        if highs[i] > stop:
            n_ev = i + 1
            break
    scal[0] = used
    scal[1] = nb
    scal[2] = out
    scal[3] = kb
    return ((bsize, brefs, val, sbuf, pend, gy, gx, scal, ebuf, gacc, left), timeline[:n_ev],
            highs[:n_ev], top)


@njit(cache=True)
def _most_buffers(kind, node, out_ptr, arg_ptr, made_ptr):
    """The most buffers :func:`fold_run` can make for these events: a forward, recomputation or
    rematerialization at most one per output, one state and (a forward) the external arrays
    made before it; a seed's gradient one; a backward one gradient and one sum per argument."""
    most = 0
    for i in range(kind.shape[0]):
        k = kind[i]
        v = node[i]
        if k == FORWARD or k == RECOMPUTE or k == REMATERIALIZE:
            most += out_ptr[v + 1] - out_ptr[v] + 1
            if k == FORWARD:
                most += made_ptr[v + 1] - made_ptr[v]
        elif k == SEED_GRAD:
            most += 1
        elif k == BACKWARD:
            most += 2 * (arg_ptr[v + 1] - arg_ptr[v])
    return most


@njit(cache=True, inline="always")
def _sum_new(v, arg_ptr, arg_grad, arg_target, arg_size, gx, pend, bsize, brefs, nb, used,
             high):
    """The gradient sums of node `v`'s backward, Chainer's way (see :func:`fold`): a target
    that gets more than one gradient (a pending one included) gets one new array holding their
    sum. Return the bytes in use, the highest level reached and the next buffer id."""
    for a in range(arg_ptr[v], arg_ptr[v + 1]):
        if not arg_grad[a]:
            continue
        t = arg_target[a]
        first = True
        for a2 in range(arg_ptr[v], a):
            if arg_grad[a2] and arg_target[a2] == t:
                first = False
        if not first:
            continue
        count = 1 if pend[t] >= 0 else 0
        for a2 in range(a, arg_ptr[v + 1]):
            if arg_grad[a2] and arg_target[a2] == t:
                count += 1
        if count == 1:
            pend[t] = gx[a]
            continue
        s = _new(bsize, brefs, nb, arg_size[a])
        nb += 1
        used += arg_size[a]
        if used > high:
            high = used
        if pend[t] >= 0:
            used -= _unref(bsize, brefs, pend[t])
        for a2 in range(a, arg_ptr[v + 1]):
            if arg_grad[a2] and arg_target[a2] == t:
                used -= _unref(bsize, brefs, gx[a2])
        pend[t] = s
    return used, high, nb


@njit(cache=True)
def _sum_inplace(v, arg_ptr, arg_grad, arg_target, arg_size, gx, pend, bsize, brefs, nb, used,
                 high, gacc, left):
    """The gradient sums of node `v`'s backward, PyTorch's way (see :func:`fold`): each
    argument's gradient in order joins its target's pending gradient; then a target whose
    gradient existed at the start and got its last arrival adds the pending one into it.
    Return the bytes in use, the highest level reached and the next buffer id."""
    for a in range(arg_ptr[v], arg_ptr[v + 1]):
        if not arg_grad[a]:
            continue
        t = arg_target[a]
        if gacc[t] >= 0:
            left[t] -= 1
        g = gx[a]
        old = pend[t]
        if old < 0:
            pend[t] = g
        elif brefs[old] == 1:
            used -= _unref(bsize, brefs, g)
        elif brefs[g] == 1:
            used -= _unref(bsize, brefs, old)
            pend[t] = g
        else:
            pend[t] = _new(bsize, brefs, nb, arg_size[a])
            nb += 1
            used += arg_size[a]
            if used > high:
                high = used
            used -= _unref(bsize, brefs, old)
            used -= _unref(bsize, brefs, g)
    for a in range(arg_ptr[v], arg_ptr[v + 1]):  # AccumulateGrad, after the node's backward
        t = arg_target[a]
        if arg_grad[a] and gacc[t] >= 0 and left[t] == 0:
            used -= _unref(bsize, brefs, pend[t])
            pend[t] = gacc[t]
            gacc[t] = -1
    return used, high, nb


@njit(cache=True)
def _unref(bsize, brefs, b):
    """Drop one reference to buffer `b`; return the bytes released (0 while others remain)."""
    if b < 0:
        return 0
    brefs[b] -= 1
    if brefs[b] == 0:
        return bsize[b]
    return 0


@njit(cache=True)
def _grown(arr, cap):
    out = np.zeros(cap, dtype=arr.dtype)
    out[: arr.shape[0]] = arr
    return out


@njit(cache=True, nogil=True)
def peak_and_cost(dropped, fwd, fpos, bwd, state, stoch, arg_ptr, arg_node, rarg_ptr, rarg_idx,
                  rout_ptr, rout_idx, n_out, n_targets, resident, out_ptr, out_node, out_bytes,
                  out_view, arg_out, arg_target, arg_size, arg_gsize, arg_grad, arg_gview,
                  returned, held, seed, grad_out, fpeak, bpeak, sum_inplace, ext_bytes,
                  made_ptr, made_idx, efree_ptr, efree_idx, out_at, gs_target, gs_bytes,
                  gs_arrivals, cost, ws, cost_cap=NO_STOP, peak_cap=NO_STOP):
    """The peak (bytes, resident included) and the recomputation cost (cost units) of the
    schedule that drops `dropped`: the three passes and the fold, in one call that releases
    the GIL (a local search evaluates moves on several threads), its arrays from the arena
    `ws` (see the module docstring). The recomputation cost comes from the first pass; where
    it passes `cost_cap`, or the fold passes `peak_cap` (bytes, resident included), the call
    stops there and returns -1 for the peak.

    Returns
    -------
    peak : int
        -1 where a cap stopped the call.
    recompute_cost : int
    top : int
        The arena entries the call used (more than ``ws.shape[0]`` where it had to allocate).
    """
    ckind, cnode, top = compute_events(dropped, fwd, fpos, bwd, state, stoch, arg_ptr,
                                       arg_node, rarg_ptr, rarg_idx, rout_ptr, ws, 0)
    total = 0
    for i in range(ckind.shape[0]):
        if ckind[i] == RECOMPUTE:
            total += cost[cnode[i]]
    if total > cost_cap:
        return -1, total, top
    slot, start, last, top = liveness(ckind, cnode, n_out, state, stoch, out_ptr, arg_ptr,
                                      arg_out, rarg_ptr, rarg_idx, rout_ptr, rout_idx, returned,
                                      held, ws, top)
    kind, node, nbytes, optr, oidx, top = emit_events(ckind, cnode, slot, start, last, dropped,
                                                      n_out, fpos, out_ptr, out_node,
                                                      out_bytes, state, stoch, seed, grad_out,
                                                      ws, top)
    st, top = fold_start(n_out, n_targets, fwd.shape[0], arg_ptr[fwd.shape[0]], gs_target,
                         gs_bytes, gs_arrivals, sum_inplace, ws, top)
    st, timeline, highs, top = fold_run(st, kind, node, nbytes, optr, oidx, out_ptr, out_bytes,
                                        out_view, state, stoch, arg_ptr, arg_target, arg_size,
                                        arg_gsize, arg_grad, arg_gview, grad_out, fpeak, bpeak,
                                        sum_inplace, ext_bytes, made_ptr, made_idx, efree_ptr,
                                        efree_idx, out_at, bwd, ws, top, peak_cap - resident)
    high = 0
    for i in range(highs.shape[0]):
        if highs[i] > high:
            high = highs[i]
    if resident + high > peak_cap:
        return -1, total, top
    return resident + high, total, top
