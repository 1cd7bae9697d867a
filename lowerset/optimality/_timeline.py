"""The part of both optimum models that follows the schedule's memory rules: positions in
time, which arrays are alive at each, and the memory in use there.

A training step is laid out as **positions**, in order:

- forward stage t (t = 0..n-1): the forward of node ``fwd[t]`` (the stage's *target*), preceded,
  in the general model, by optional recomputations of nodes ``fwd[0..t-1]`` in forward order;
- a *gap* (the end of the forward pass: nothing happens there);
- backward stage q: optional recomputations of candidate nodes in forward order, then the
  backward of ``bwd[q]``.

An optional recomputation at a position is a binary column R (1: the node runs there). For
every array (a *slot*: an output of a node, or a node's saved state) and every position from
its first forward to its last possible read there is a column ``alive`` in [0, 1]:

- a slot is alive where it is read (a forward or recomputation reads all its arguments' outputs
  and, when stochastic, its own kept state; a backward reads ``reads_args``, ``reads_outputs``
  and its state; ``held_until`` holds a forward copy; a returned output lives to the end), and
  where its node makes it (outputs at every run, the state at the forward and, when not
  stochastic, at every recomputation);
- a slot alive at a position was alive at the one before or is made there (``alive[p] <=
  alive[p-1] + R[p]``): once freed, an array comes back only by a recomputation.

Minimising memory puts ``alive`` at 1 exactly from each making to the last read before the next
one: liveness analysis, the schedule's rule (frees right after the last read). The memory at a
position (one row, at most the peak column P) counts, in bytes, every buffer alive there (a view
shares its base's buffer and keeps it alive: the buffer counts while any of its arrays is
alive), the resident bytes, the arrays the step makes outside the graph (``external_made``,
alive as the facts say whatever the plan), the gradients alive there and, at a run, its
workspace beyond what it allocates (``forward_peak``). Gradients do not depend on the plan:
their bytes at each
backward (its highest point, its workspace included) and between backward steps come from the
schedule's own fold (:func:`lowerset.scheduling.simulate`) over the gradient events alone, which
also counts the gradients that exist when the step starts (``grads_at_start``: resident, and
released or summed into as the fold says). The step's initial gradients (``seed_grad``) count
from the last forward on.

Where the schedule counts more than this model, the model is a relaxation (its peak a lower
bound): a recomputed value whose previous buffer a view still holds is counted once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from .. import _schedule_kernels as _k
from .._typing import IntArray
from ..graph import Graph

if TYPE_CHECKING:
    from ._milp import Milp
from ..scheduling import _fold, _hooked_arrays, flat_facts

FORWARD, GAP, RECOMPUTE, BACKWARD = range(4)

#: The fine model (a position per recomputation) is built while positions x slots stays at most
#: this; above, ``coarse="auto"`` builds the coarse relaxation (about 10^5 columns take HiGHS
#: seconds to minutes; a traced ResNet50 would need about 5 10^6).
FINE_LIMIT = 300_000


def byte_scale(g: Graph) -> int:
    """A power of two that brings the step's largest array to at most 2^13 units: the memory
    rows are divided by it (exactly, in floating point), because HiGHS declared a feasible
    model with coefficients of 10^9 bytes infeasible."""
    f = flat_facts(g)
    top = max([1, int(f.out_bytes.max(initial=0)), int(f.state.max(initial=0)),
               int(f.fpeak.max(initial=0))])
    return 2 ** max(0, top.bit_length() - 13)


def is_coarse(coarse: bool | str, g: Graph, n_run_positions: int) -> bool:
    """Resolve ``coarse="auto"`` for a model whose runs would take `n_run_positions`."""
    if coarse != "auto":
        return bool(coarse)
    f = flat_facts(g)
    slots = f.n_out + int((f.state > 0).sum())
    return (g.n + 1 + f.bwd.shape[0] + n_run_positions) * slots > FINE_LIMIT


def gradient_levels(g: Graph) -> tuple[int, IntArray, IntArray]:
    """Bytes of gradients in use, from the schedule's fold of the gradient events alone.

    Returns
    -------
    seed : int
        After the initial gradients (the end of the forward pass).
    high, after : ndarray of int64, shape (#backward,)
        At backward step q's highest point (its workspace included) and after it (its output
        gradients freed).
    """
    arrays = _hooked_arrays(g, np.zeros(g.n, dtype=bool))
    kind, node, nbytes, optr, oidx = arrays
    keep = np.isin(kind, (_k.SEED_GRAD, _k.BACKWARD, _k.FREE_GRAD))
    lens = np.diff(optr)[keep]
    optr2 = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    oidx2 = np.concatenate([oidx[optr[i]:optr[i + 1]] for i in np.flatnonzero(keep)]
                           + [np.empty(0, dtype=np.int64)]).astype(np.int64)
    sub = (kind[keep], node[keep], nbytes[keep], optr2, oidx2)
    fold = _fold(g, sub)
    res = fold.resident
    k = sub[0]
    seed, high, after = 0, [], []
    for i in range(k.shape[0]):
        if k[i] == _k.SEED_GRAD:
            seed = int(fold.timeline[i]) - res
        elif k[i] == _k.BACKWARD:
            high.append(int(fold.highs[i]) - res)
            after.append(int(fold.timeline[i]) - res)
        else:   # FREE_GRAD right after its backward
            after[-1] = int(fold.timeline[i]) - res
    return seed, np.array(high, dtype=np.int64), np.array(after, dtype=np.int64)


class Timeline:
    """Positions, compute columns, alive columns and memory rows of one model (see the module
    docstring).

    Parameters
    ----------
    g : Graph
    milp : Milp
        The model the columns and rows go to.
    forward_recompute : callable(int) -> bool, or None
        Whether a node may be recomputed in a forward stage (general model); None: never.
    backward_candidates : list of list of int
        Per backward step q, the nodes that may be recomputed in it.
    coarse : bool
        Give the recomputations no positions of their own (a relaxation for large graphs, see
        below).

    Attributes
    ----------
    peak : int
        Column of the peak P, in units of `scale` bytes.
    scale : int
        Bytes per unit of the memory rows and of P (:func:`byte_scale`).
    runs : list of (int, int, int)
        (column R, node, backward step or -1) of every optional recomputation.
    positions : list of (int, int, int)
        (kind, node, stage) per position; stage is t for forward stages, q for backward ones.
    alive : dict
        (slot, position) -> column.

    Notes
    -----
    With `coarse`, a stage's recomputations happen between its first position and the one
    before it: a run needs each argument alive at the stage's start or made by a run of the
    same stage, and its outputs count from the stage's end on. Memory is counted at the
    forwards and backwards only (not at the runs themselves, nor their workspace), so the model
    is a relaxation with about 2n positions instead of up to n^2.
    """

    def __init__(self, g: Graph, milp: Milp, forward_recompute: Callable[[int], bool] | None,
                 backward_candidates: Sequence[Sequence[int]], coarse: bool = False) -> None:
        self.g, self.milp, self.coarse = g, milp, coarse
        f = self.f = flat_facts(g)
        self.scale = byte_scale(g)
        self.peak = milp.var(f.resident / self.scale, np.inf)
        self.positions: list[tuple[int, int, int]] = []   # (kind, node, stage)
        self.rvar: list[int] = []
        self.runs: list[tuple[int, int, int]] = []        # (column, node, stage)
        # per run: (position before its stage, position ending it)
        self.run_stage: list[tuple[int, int]] = []
        self.target_pos = np.empty(g.n, dtype=np.int64)
        fwd = f.fwd.tolist()
        for t, v in enumerate(fwd):
            first = len(self.runs)
            for u in fwd[:t] if forward_recompute is not None else ():
                if forward_recompute is not None and forward_recompute(u):
                    self._run(u, t, -1)
            self.target_pos[v] = self._position(FORWARD, v, t, first)
        self.gap = self._position(GAP, -1, -1, len(self.runs))
        self.backward_pos = []
        for q, j in enumerate(f.bwd.tolist()):
            first = len(self.runs)
            for u in sorted(backward_candidates[q], key=lambda u: f.fpos[u]):
                self._run(u, q, q)
            self.backward_pos.append(self._position(BACKWARD, j, q, first))
        self.alive: dict[tuple[int, int], int] = {}   # (slot, position) -> column
        self._alive_columns()
        self._memory_rows()

    def _position(self, kind, v, stage, first_run):
        """Append a position; in coarse mode it ends the stage of runs ``first_run:``."""
        p = len(self.positions)
        self.positions.append((kind, v, stage))
        self.rvar.append(-1)
        if self.coarse:
            for i in range(first_run, len(self.runs)):
                self.run_stage[i] = (p - 1, p)
        return p

    def _run(self, u, stage, q):
        kind = FORWARD if q < 0 else RECOMPUTE
        col = self.milp.binary()
        self.runs.append((col, u, q))
        if self.coarse:
            # a placeholder, set when the stage ends (_stage)
            self.run_stage.append(None)  # type: ignore[arg-type]
            return
        p = len(self.positions)
        self.run_stage.append((p, p))
        self.positions.append((kind, u, stage))
        self.rvar.append(col)

    # -- slots -------------------------------------------------------------------------------

    def slots(self) -> list[int]:
        """Slot ids: outputs ``0..n_out-1``, then ``n_out + v`` for nodes with state."""
        f = self.f
        return list(range(f.n_out)) + [f.n_out + v for v in range(self.g.n) if f.state[v] > 0]

    def owner(self, x: int) -> int:
        f = self.f
        return int(f.out_node[x]) if x < f.n_out else x - f.n_out

    def _read_slots(self, v, run):
        """Slots a forward (`run` False) or a recomputation of node v reads."""
        f = self.f
        out = [int(f.arg_out[a]) for a in range(f.arg_ptr[v], f.arg_ptr[v + 1])
               if f.arg_out[a] >= 0]
        if run and f.stoch[v] and f.state[v] > 0:
            out.append(f.n_out + v)
        return out

    def _makes_slot(self, x, v, run):
        """Whether a forward (`run` False) or a recomputation of node v makes slot x."""
        if v != self.owner(x):
            return False
        return not (run and x >= self.f.n_out and self.f.stoch[v])

    def _reads(self):
        """Per slot: certain reads (positions) and reads by runs ((run index, position))."""
        f = self.f
        certain: dict[int, set[int]] = {}
        by_run: dict[int, list[int]] = {}
        for p, (kind, v, _) in enumerate(self.positions):
            if kind == FORWARD and self.rvar[p] < 0:
                for x in self._read_slots(v, False):
                    certain.setdefault(x, set()).add(p)
            elif kind == BACKWARD:
                xs = [int(f.arg_out[f.rarg_idx[r]])
                      for r in range(f.rarg_ptr[v], f.rarg_ptr[v + 1])]
                xs += [int(f.rout_idx[r]) for r in range(f.rout_ptr[v], f.rout_ptr[v + 1])]
                if f.state[v] > 0:
                    xs.append(f.n_out + v)
                for x in xs:
                    if x >= 0:
                        certain.setdefault(x, set()).add(p)
        for x in range(f.n_out):
            h = int(f.held[x])
            if h >= 0:
                certain.setdefault(x, set()).add(int(self.target_pos[f.fwd[h]]))
        for i, (col, v, _) in enumerate(self.runs):
            for x in self._read_slots(v, True):
                by_run.setdefault(x, []).append(i)
        return certain, by_run

    def _makers(self):
        """Per (slot, position): the run indexes that make the slot there (coarse: in the stage
        that position ends)."""
        out: dict[tuple[int, int], list[int]] = {}
        for i, (col, v, _) in enumerate(self.runs):
            p = self.run_stage[i][1]
            for x in self._owned(v):
                if self._makes_slot(x, v, True):
                    out.setdefault((x, p), []).append(i)
        return out

    def _owned(self, v):
        f = self.f
        xs = list(range(f.out_ptr[v], f.out_ptr[v + 1]))
        if f.state[v] > 0:
            xs.append(f.n_out + v)
        return xs

    def _alive_columns(self):
        f, m = self.f, self.milp
        certain, by_run = self._reads()
        makers = self._makers()
        self.window = {}
        for x in self.slots():
            c = int(self.target_pos[self.owner(x)])
            if x < f.n_out and f.returned[x]:
                self.window[x] = (c, len(self.positions) - 1, True)
                continue
            reads = by_run.get(x, ())
            # a run reads x at its own position (fine) or at its stage's start (coarse)
            last = max([c] + list(certain.get(x, ())) + [self.run_stage[i][0] for i in reads])
            self.window[x] = (c, last, False)
            prev = None
            for p in range(c, last + 1):
                a = m.var(1.0 if (p == c or p in certain.get(x, ())) else 0.0, 1.0)
                self.alive[x, p] = a
                made = [self.runs[i][0] for i in makers.get((x, p), ())]
                if prev is not None:
                    m.row([(a, 1), (prev, -1)] + [(r, -1) for r in made], ub=0)
                if not self.coarse:
                    for r in made:
                        m.row([(a, 1), (r, -1)], lb=0)
                prev = a
            for i in reads:
                self._available(x, i, makers)

    def _available(self, x, i, makers):
        """Rows: run i finds slot x alive (fine: at its position; coarse: at its stage's start,
        or made by a run of the same stage)."""
        col = self.runs[i][0]
        before, at = self.run_stage[i]
        if not self.coarse:
            self.milp.row([(self.alive[x, at], 1), (col, -1)], lb=0)
            return
        same = [self.runs[k][0] for k in makers.get((x, at), ()) if k != i]
        terms = [(col, 1)] + [(r, -1) for r in same]
        if (x, before) in self.alive:
            terms.append((self.alive[x, before], -1))
        self.milp.row(terms, ub=0)

    # -- memory ------------------------------------------------------------------------------

    def _roots(self):
        """Per slot, the slot whose buffer it uses (-1: an external array's, no bytes here)."""
        f = self.f
        root = {}

        def find(o):
            w = int(f.out_view[o])
            if w == -1:
                return o
            if w == -2:
                return -1
            return find(w)

        for x in self.slots():
            root[x] = find(x) if x < f.n_out else x
        return root

    def slot_bytes(self, x: int) -> int:
        f = self.f
        return int(f.out_bytes[x]) if x < f.n_out else int(f.state[x - f.n_out])

    def extra(self, v: int, made_state: bool) -> int:
        """Workspace of a run of node v beyond what it allocates (bytes)."""
        f = self.f
        alloc = sum(int(f.out_bytes[o]) for o in range(f.out_ptr[v], f.out_ptr[v + 1])
                    if f.out_view[o] == -1)
        if made_state:
            alloc += int(f.state[v])
        return max(0, int(f.fpeak[v]) - alloc)

    def _made_externals(self):
        """Bytes per position of the external arrays the step makes itself
        (``ExecutionFacts.external_made``): from the start of the forward event that makes one
        to the end of the one ``external_free_after`` names, whatever the plan (bytes, int64,
        shape (#positions,))."""
        F = self.g.facts
        out = np.zeros(len(self.positions), dtype=np.int64)
        for (_, nbytes), t0, t1 in zip(F.externals, F.external_made, F.external_free_after):
            if t0 < 0:
                continue   # resident
            for p, (kind, _, t) in enumerate(self.positions):
                if kind == FORWARD and self.rvar[p] < 0:
                    live = t0 <= t and (t1 < 0 or t <= t1)
                elif kind == FORWARD:   # a run in forward stage t, before its target
                    live = t0 <= t - 1 and (t1 < 0 or t - 1 < t1)
                else:
                    live = t1 < 0
                out[p] += nbytes if live else 0
        return out

    def _memory_rows(self):
        f, m = self.f, self.milp
        seed, high, after = gradient_levels(self.g)
        roots = self._roots()
        members: dict[int, list[int]] = {}
        for x, b in roots.items():
            if b >= 0:
                members.setdefault(b, []).append(x)
        last_forward = int(self.target_pos[f.fwd[-1]])
        grads = np.zeros(len(self.positions), dtype=np.int64)
        level = seed
        for p, (kind, v, q) in enumerate(self.positions):
            if kind == RECOMPUTE:
                grads[p] = level
            elif kind == BACKWARD:
                grads[p] = high[q]
                level = after[q]
        made = self._made_externals()
        for p, (kind, v, _) in enumerate(self.positions):
            if kind == GAP:
                continue
            const, terms = f.resident + int(grads[p]) + int(made[p]), []
            for b, xs in members.items():
                nb = self.slot_bytes(b)
                if nb == 0:
                    continue
                cols, fixed = [], False
                for x in xs:
                    c0, last, forever = self.window[x]
                    if c0 <= p and forever:
                        fixed = True
                    elif c0 <= p <= last:
                        cols.append(self.alive[x, p])
                if fixed:
                    const += nb
                elif len(cols) == 1:
                    terms.append((cols[0], nb))
                elif cols:
                    buf = m.var(0.0, 1.0)
                    for c in cols:
                        m.row([(buf, 1), (c, -1)], lb=0)
                    terms.append((buf, nb))
            if kind in (FORWARD, RECOMPUTE):
                col = self.rvar[p]
                ex = self.extra(v, col < 0 or not f.stoch[v])
                if col < 0:
                    const += ex
                elif ex:
                    terms.append((col, ex))
            k = self.scale
            m.row([(c, b / k) for c, b in terms] + [(self.peak, -1)], ub=-const / k)
            if p == last_forward and seed:
                # the initial gradients, before the last forward's frees
                seed_terms = [(c, b / k) for c, b in terms if c != self.rvar[p]]
                gone = sum(b for (_, b), t0, t1 in zip(self.g.facts.externals,
                                                       self.g.facts.external_made,
                                                       self.g.facts.external_free_after)
                           if t0 >= 0 and t1 == self.g.n - 1)   # freed by the last forward
                m.row(seed_terms + [(self.peak, -1)],
                      ub=-(const - int(grads[p]) + seed - gone - (ex if col < 0 else 0)) / k)
