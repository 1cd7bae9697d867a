"""Pictures of plans: the memory timeline of a schedule, the overhead/peak trade-off, the plan on
the graph, and a graphviz export of the plan.

This is the only module of :mod:`lowerset` that uses matplotlib, and it imports matplotlib inside
its functions: ``import lowerset`` (and ``import lowerset.plot``) never does. Figures are built
with :class:`matplotlib.figure.Figure`, without pyplot, so no GUI backend is needed; each
function returns the :class:`~matplotlib.axes.Axes` it drew on (``ax.figure.savefig(path)``
writes a file). Data are plotted in their own units (bytes, cost units, event indexes) and the
axes only format the tick labels, so what an Axes holds can be compared with the schedule.

Colours: forward pass blue, recomputation orange, backward pass green; kept values blue,
dropped-and-recomputed values orange, dropped values that nothing reads again grey.
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from .dropset import DropSetStrategy
from .exceptions import ArgumentError, ArgumentTypeError

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from .scheduling import Schedule
    from .strategy import CanonicalStrategy

__all__ = ["timeline", "pareto", "plan_graph", "to_dot", "new_axes", "event_phases",
           "node_states", "PHASE_COLORS", "STATE_COLORS"]

#: Shading of the timeline's phases.
PHASE_COLORS = {"forward": "#4c72b0", "recompute": "#dd8452", "backward": "#55a868"}

#: Colours of the nodes of :func:`plan_graph` and :func:`to_dot`.
STATE_COLORS = {"kept": "#4c72b0", "recomputed": "#dd8452", "dropped": "#b0b0b0"}

_UNITS = {"B": 1, "kB": 10**3, "MB": 10**6, "GB": 10**9, "KiB": 2**10, "MiB": 2**20,
          "GiB": 2**30}


def new_axes(figsize: tuple[float, float] = (8, 4)) -> Axes:
    """Return the Axes of a new matplotlib Figure (no pyplot, no GUI backend).

    Parameters
    ----------
    figsize : (float, float), default (8, 4)
        Width and height of the figure, inches.
    """
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, layout="constrained")
    return fig.add_subplot()


def _byte_axis(axis, unit):
    """Label `axis` (an x or y Axis) in `unit` while the data stay in bytes: ticks at round
    numbers of the unit."""
    from matplotlib.ticker import FuncFormatter, Locator, MaxNLocator

    scale = _UNITS[unit]
    inner = MaxNLocator(nbins=8, steps=[1, 2, 2.5, 5, 10])

    class ScaledLocator(Locator):
        def __call__(self):
            lo, hi = self.axis.get_view_interval()  # type: ignore[union-attr]  # set by now
            return self.tick_values(lo, hi)

        def tick_values(self, vmin, vmax):
            return np.asarray(inner.tick_values(vmin / scale, vmax / scale)) * scale

    axis.set_major_locator(ScaledLocator())
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v / scale:g}"))


def _legend(ax, own, **kw):
    """A legend below the plot on a figure of our own (the caller's layout is left alone)."""
    if own:
        ax.figure.legend(fontsize=7, loc="outside lower center", ncols=4, frameon=False,
                         **({"handles": kw["handles"]} if "handles" in kw else
                            dict(zip(("handles", "labels"), ax.get_legend_handles_labels()))))
    else:
        ax.legend(fontsize=7, **kw)


def event_phases(sched: Schedule) -> list[str]:
    """Return the phase of each event of a schedule: "forward", "recompute" or "backward".

    Events before the first ``seed_grad`` are the forward pass; after it, ``recompute`` events
    (and a runtime cache's ``rematerialize`` events, ``lowerset.dtr``) are the recomputation and
    everything else (backward steps, frees) the backward pass.

    Parameters
    ----------
    sched : lowerset.Schedule

    Returns
    -------
    list of str, one per event

    Examples
    --------
    >>> g = ls.Graph.chain(3, memory=10)
    >>> s = ls.schedule(ls.CanonicalStrategy(g, [{0, 1}, {0, 1, 2}]))
    >>> from lowerset.plot import event_phases
    >>> event_phases(s)[:5], "recompute" in event_phases(s)
    (['forward', 'forward', 'forward', 'forward', 'backward'], True)
    """
    phases, seeded = [], False
    for e in sched.events:
        if e.kind == "seed_grad":
            seeded = True
        replay = e.kind == "recompute" or (seeded and e.kind == "rematerialize")
        phases.append("recompute" if replay else "backward" if seeded else "forward")
    return phases


def _runs(labels):
    """(label, first, last) of each run of equal consecutive labels."""
    out, start = [], 0
    for i in range(1, len(labels) + 1):
        if i == len(labels) or labels[i] != labels[start]:
            out.append((labels[start], start, i - 1))
            start = i
    return out


def _measured_xy(measured, n_events):
    """(x, y) arrays of a measured timeline given as bytes per event, an (index, bytes) pair or
    an object with ``index`` and ``bytes``."""
    if hasattr(measured, "index") and hasattr(measured, "bytes"):
        x, y = np.asarray(measured.index), np.asarray(measured.bytes)
    elif isinstance(measured, tuple) and len(measured) == 2:
        x, y = np.asarray(measured[0]), np.asarray(measured[1])
    else:
        y = np.asarray(measured)
        x = np.arange(y.shape[0])
        if y.ndim != 1 or y.shape[0] != n_events:
            raise ArgumentError(f"a measured timeline given as bytes per event needs "
                                f"{n_events} values (one per event), got shape {y.shape}; or "
                                "pass (event_indexes, bytes)")
    if x.shape != y.shape or x.ndim != 1:
        raise ArgumentError(f"measured event indexes and bytes differ in shape: {x.shape} and "
                            f"{y.shape}")
    return x, y


def timeline(sched: Schedule, *, budget: int | None = None, measured: Any = None,
             ax: Axes | None = None, unit: str = "GB", title: str | None = None,
             shade: bool = True) -> Axes:
    """Plot the bytes in use over the events of a schedule.

    The line is ``sched.timeline`` (bytes in use after each event, parameters and inputs
    included) drawn as steps; a thin line above it is ``sched.fold.highs`` (each event's highest
    point, workspace included). The forward pass, the recomputations and the backward pass are
    shaded (:func:`event_phases`); the peak is marked; the resident bytes and the `budget` are
    horizontal lines.

    Parameters
    ----------
    sched : lowerset.Schedule
        For instance ``lowerset.schedule(strategy)`` or ``strategy.schedule``.
    budget : int, optional
        Bytes; drawn as a red line.
    measured : array_like or (array_like, array_like), optional
        A measured timeline to overlay (whole-step bytes): one value per event, or a pair
        ``(event_indexes, bytes)``, or an object with ``index`` and ``bytes`` (what
        ``chainer_ext.measure_timeline`` returns).
    ax : matplotlib.axes.Axes, optional
        Draw here; default a new Figure (:func:`new_axes`).
    unit : {"GB", "GiB", "MB", "MiB", "kB", "KiB", "B"}
        Unit of the y tick labels (the data stay in bytes).
    title : str, optional
    shade : bool
        Shade the phases.

    Returns
    -------
    matplotlib.axes.Axes
        Its first line (``ax.lines[0]``) holds the timeline: x = event index, y = bytes.

    Raises
    ------
    ArgumentTypeError
        If `sched` is not a :class:`lowerset.Schedule`.
    ArgumentError
        If `unit` is unknown or `measured` does not match the events.

    Examples
    --------
    >>> from lowerset import plot
    >>> g = ls.Graph.chain(6, memory=10)
    >>> s = ls.schedule(ls.CanonicalStrategy(g, [{0, 1, 2}, set(range(6))]))
    >>> ax = plot.timeline(s, budget=100, unit="B")
    >>> list(ax.lines[0].get_ydata()) == s.timeline.tolist()
    True
    """
    from .scheduling import Schedule

    if not isinstance(sched, Schedule):
        raise ArgumentTypeError(f"timeline() takes a lowerset.Schedule (lowerset.schedule(plan)), "
                                f"got {type(sched).__name__}")
    if unit not in _UNITS:
        raise ArgumentError(f"unknown unit {unit!r}; expected one of {sorted(_UNITS)}")
    own = ax is None
    if ax is None:
        ax = new_axes((10, 4))
    y = np.asarray(sched.timeline)
    x = np.arange(y.shape[0])
    ax.step(x, y, where="post", color="black", lw=1.2, label="in use after each event")
    ax.plot(x, sched.fold.highs, color="black", lw=0.5, alpha=0.45,
            label="highest point of each event")
    if shade and len(x):
        seen = set()
        for phase, a, b in _runs(event_phases(sched)):
            ax.axvspan(a - 0.5, b + 0.5, color=PHASE_COLORS[phase],
                       alpha=0.5 if phase == "recompute" else 0.15, lw=0,
                       label=None if phase in seen else phase)
            seen.add(phase)
    ax.axhline(sched.resident, color="gray", ls=":", lw=1,
               label=f"resident (parameters, inputs): {sched.resident / _UNITS[unit]:.3g} {unit}")
    if budget is not None:
        ax.axhline(budget, color="red", lw=1.2, label=f"budget {budget / _UNITS[unit]:.3g} {unit}")
    if measured is not None:
        mx, my = _measured_xy(measured, len(x))
        ax.plot(mx, my, ".", color="purple", ms=5, label="measured")
    if sched.fold.peak_index >= 0:
        i = sched.fold.peak_index
        ax.plot([i], [sched.peak], "v", color="red", ms=7,
                label=f"peak {sched.peak / _UNITS[unit]:.3g} {unit} ({sched.events[i].kind} "
                      f"{sched.events[i].node!r})")
    _byte_axis(ax.yaxis, unit)
    ax.set_xlabel("event of the training step")
    ax.set_ylabel(f"memory in use ({unit})")
    ax.set_xlim(-0.5, max(len(x) - 0.5, 0.5))
    top = max([sched.peak] + ([budget] if budget is not None else [])
              + ([float(np.max(_measured_xy(measured, len(x))[1]))] if measured is not None
                 and len(x) else []))
    ax.set_ylim(0, top * 1.08 if top > 0 else 1)
    if title is None:
        plan = sched.strategy
        shape = ("" if plan is None else f"{len(plan.dropped)} values dropped"
                 if isinstance(plan, DropSetStrategy) else f"{len(plan)} segments")
        what = "plain step" if plan is None else (
            f"{shape}, recomputed cost {sched.recompute_cost}")
        title = f"Memory timeline: {what}"
    ax.set_title(title, fontsize=10)
    _legend(ax, own)
    return ax


def pareto(front: Sequence[CanonicalStrategy], *,
           others: Mapping[str, CanonicalStrategy] | None = None, budget: int | None = None,
           ax: Axes | None = None, unit: str = "GB", title: str | None = None) -> Axes:
    """Plot the overhead/peak trade-off of a list of strategies, with other strategies as
    points.

    Parameters
    ----------
    front : sequence of lowerset.CanonicalStrategy
        For instance ``lowerset.pareto(graph)``: x = ``schedule.recompute_cost`` (cost units),
        y = ``schedule.peak`` (bytes), drawn as a staircase with markers.
    others : mapping of str to CanonicalStrategy, optional
        Labelled points, e.g. ``{"Chen's sqrt(n)": chen_sqrtn(g), "paper DP (TC)": s}``; each is
        placed by its schedule too.
    budget : int, optional
        Bytes; a horizontal line.
    ax : matplotlib.axes.Axes, optional
    unit : str
        Unit of the y tick labels (the data stay in bytes).
    title : str, optional

    Returns
    -------
    matplotlib.axes.Axes
        ``ax.lines[0]`` is the front: its data are the strategies' (recompute_cost, peak).

    Raises
    ------
    ArgumentError
        If `front` is empty or `unit` is unknown.
    ArgumentTypeError
        If an entry is not a CanonicalStrategy.

    Examples
    --------
    >>> from lowerset import plot
    >>> g = ls.Graph.chain(8, memory=10)
    >>> front = ls.pareto(g, "approx")
    >>> ax = plot.pareto(front, others={"Chen": ls.baselines.chen_sqrtn(g)})
    >>> list(ax.lines[0].get_ydata()) == [s.schedule.peak for s in front]
    True
    """
    from .strategy import CanonicalStrategy

    front = list(front)
    if not front:
        raise ArgumentError("pareto() needs at least one strategy (lowerset.pareto(graph))")
    others = dict(others or {})
    for s in front + list(others.values()):
        if not isinstance(s, CanonicalStrategy):
            raise ArgumentTypeError(f"expected lowerset.CanonicalStrategy objects, got "
                                    f"{type(s).__name__}")
    if unit not in _UNITS:
        raise ArgumentError(f"unknown unit {unit!r}; expected one of {sorted(_UNITS)}")
    if ax is None:
        ax = new_axes((7, 4.5))
    g = front[0].graph
    xs = [s.schedule.recompute_cost for s in front]
    ys = [s.schedule.peak for s in front]
    ax.plot(xs, ys, "o-", drawstyle="steps-post", color="#4c72b0", ms=4,
            label=f"lowerset pareto front ({len(front)} plans)")
    markers = iter(["*", "s", "D", "^", "P", "X", "v", "<", ">"])
    for name, s in others.items():
        ax.plot([s.schedule.recompute_cost], [s.schedule.peak], next(markers, "o"), ms=10,
                ls="none", label=f"{name}: {s.schedule.peak / _UNITS[unit]:.3g} {unit}, "
                                 f"cost {s.schedule.recompute_cost}")
    if budget is not None:
        ax.axhline(budget, color="red", lw=1, label=f"budget {budget / _UNITS[unit]:.3g} {unit}")
    total = g.total_cost()
    def percent(c: Any) -> Any:
        return 100.0 * c / total

    def cost(p: Any) -> Any:
        return p * total / 100.0

    sec = ax.secondary_xaxis("top", functions=(percent, cost))
    sec.set_xlabel("recomputed, % of one forward pass T(V)", fontsize=8)
    _byte_axis(ax.yaxis, unit)
    ax.set_xlabel("recomputed cost (cost units, schedule.recompute_cost)")
    ax.set_ylabel(f"whole-step peak ({unit}, schedule.peak)")
    ax.set_title(title or f"Overhead/peak trade-off ({g.n} nodes)", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return ax


def node_states(strategy: CanonicalStrategy) -> dict[Hashable, str]:
    """Return, per node label, "kept", "recomputed" or "dropped" under a strategy's schedule.

    "dropped": the forward copy is freed early and no backward step reads it again, so it is
    not recomputed; "recomputed": dropped and recomputed in the backward pass; "kept": every
    other value (the boundaries ∂(L_i) cached, the last segment, returned outputs).

    Parameters
    ----------
    strategy : lowerset.CanonicalStrategy

    Returns
    -------
    dict

    Examples
    --------
    >>> from lowerset.plot import node_states
    >>> g = ls.Graph.chain(4, memory=10)
    >>> node_states(ls.CanonicalStrategy(g, [{0, 1}, set(range(4))]))
    {0: 'recomputed', 1: 'kept', 2: 'kept', 3: 'kept'}
    """
    sched = strategy.schedule
    dropped = {e.node for e in sched.events if e.kind == "drop"}
    recomputed = set(sched.recomputed)
    return {v: "recomputed" if v in recomputed else "dropped" if v in dropped else "kept"
            for v in strategy.graph.labels}


def _segment_order(strategy):
    """Node ids sorted by (segment, topological id): a topological order in which every
    segment V_i is contiguous."""
    g = strategy.graph
    seg = np.empty(g.n, dtype=np.int64)
    for i, m in enumerate(strategy._segment_masks):
        seg[m] = i
    return np.lexsort((np.arange(g.n), seg)), seg


def _lanes(g, order):
    """A lane (y) per node: live ranges [x(v), last x of its successors] packed greedily, so
    that no two values whose lines would overlap share a lane."""
    xpos = np.empty(g.n, dtype=np.int64)
    xpos[order] = np.arange(g.n)
    lane = np.zeros(g.n, dtype=np.int64)
    ends: list[int] = []  # per lane: x of its last use
    for v in order.tolist():
        succ = g.succs(v)
        end = int(xpos[succ].max()) if len(succ) else int(xpos[v])
        free = [k for k, e in enumerate(ends) if e < xpos[v]]
        # prefer the lane of a predecessor that ends here (draws a chain as a straight line)
        preds = [int(lane[u]) for u in g.preds(v) if ends[lane[u]] <= xpos[v]]
        k = min(preds) if preds else (free[0] if free else len(ends))
        if k == len(ends):
            ends.append(end)
        else:
            ends[k] = end
        lane[v] = k
    return xpos, lane


def plan_graph(strategy: CanonicalStrategy, *, ax: Axes | None = None, max_nodes: int = 2000,
               title: str | None = None, labels: bool | None = None) -> Axes:
    """Draw a strategy on its graph: kept, recomputed and dropped nodes, and the segments.

    Nodes are placed left to right in a topological order where each segment V_i is
    contiguous (x), and packed into lanes by live range (y: a value occupies its lane until its
    last consumer). Segments are alternating background bands, labelled V_1..V_k; the cached
    boundaries ∂(L_i) have a black outline. For graphs of more than a few hundred nodes,
    :func:`to_dot` gives a picture graphviz can lay out.

    Parameters
    ----------
    strategy : lowerset.CanonicalStrategy
    ax : matplotlib.axes.Axes, optional
    max_nodes : int
        Refuse larger graphs (use :func:`to_dot`).
    title : str, optional
    labels : bool, optional
        Write node labels; default when the graph has at most 60 nodes.

    Returns
    -------
    matplotlib.axes.Axes
        One scatter per state, labelled "kept", "recomputed", "dropped" (``ax.collections``),
        with the x, y of its nodes; ``ax.plan_positions`` maps each label to its (x, y).

    Raises
    ------
    ArgumentTypeError
        If `strategy` is not a CanonicalStrategy.
    ArgumentError
        If the graph has more than `max_nodes` nodes.

    Examples
    --------
    >>> from lowerset import plot
    >>> g = ls.Graph.chain(6, memory=10)
    >>> ax = plot.plan_graph(ls.CanonicalStrategy(g, [{0, 1, 2}, set(range(6))]))
    >>> {c.get_label(): len(c.get_offsets()) for c in ax.collections
    ...  if c.get_label() in plot.STATE_COLORS}
    {'kept': 4, 'recomputed': 2, 'dropped': 0}
    """
    from .strategy import CanonicalStrategy

    if not isinstance(strategy, CanonicalStrategy):
        raise ArgumentTypeError(f"plan_graph() takes a lowerset.CanonicalStrategy, got "
                                f"{type(strategy).__name__}")
    g = strategy.graph
    if g.n > max_nodes:
        raise ArgumentError(f"the graph has {g.n} nodes, more than max_nodes={max_nodes}: raise "
                            "max_nodes or export it with lowerset.plot.to_dot(strategy, path)")
    order, seg = _segment_order(strategy)
    xpos, lane = _lanes(g, order)
    states = node_states(strategy)
    cached = np.zeros(g.n, dtype=bool)
    for m in strategy._cached_masks:
        cached |= m
    own = ax is None
    if ax is None:
        ax = new_axes((max(6.0, min(40.0, g.n * 0.06 + 4)), max(2.5, min(12.0, lane.max() * 0.4
                                                                       + 2))))
    k = len(strategy)
    every = max(1, -(-k // 24))  # at most about 24 segment labels
    for i in range(k):
        ids = np.flatnonzero(seg == i)
        lo, hi = xpos[ids].min() - 0.5, xpos[ids].max() + 0.5
        ax.axvspan(lo, hi, color="0.90" if i % 2 == 0 else "white", lw=0, zorder=0)
        if i % every == 0:
            ax.text((lo + hi) / 2, lane.max() + 0.9, f"V{i + 1}", ha="center", va="bottom",
                    fontsize=7, color="0.35")
    src = np.repeat(np.arange(g.n), np.diff(g.succ_ptr))
    segs = [[(xpos[u], lane[u]), (xpos[w], lane[w])] for u, w in zip(src, g.succ_idx)]
    from matplotlib.collections import LineCollection

    ax.add_collection(LineCollection(segs, colors="0.6", lw=0.6, zorder=1))
    size = 36 if g.n <= 100 else 14
    for state in ("kept", "recomputed", "dropped"):
        ids = np.array([g.index[v] for v, s in states.items() if s == state], dtype=np.int64)
        ax.scatter(xpos[ids], lane[ids], s=size, color=STATE_COLORS[state], zorder=3,
                   # an array of colour names: matplotlib's stubs take a sequence only
                   edgecolors=(np.where(cached[ids], "black", "none")  # type: ignore[arg-type]
                               if len(ids) else "none"),
                   linewidths=0.9, label=state)
    if labels is None:
        labels = g.n <= 60
    if labels:
        for v in g.labels:
            i = g.index[v]
            ax.annotate(str(v), (xpos[i], lane[i]), textcoords="offset points", xytext=(0, 5),
                        ha="center", fontsize=6)
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], marker="o", ls="none", color=STATE_COLORS[s],
                      label=f"{s} ({sum(1 for x in states.values() if x == s)})")
               for s in ("kept", "recomputed", "dropped")]
    handles.append(Line2D([], [], marker="o", ls="none", mfc="white", mec="black",
                          label="cached boundary ∂(L_i)"))
    _legend(ax, own, handles=handles)
    ax.set_xlim(-1, g.n)
    ax.set_ylim(-1, lane.max() + 2)
    ax.set_yticks([])
    ax.set_xlabel("forward order (segments V_1..V_k left to right)")
    ax.set_title(title or f"Plan: {len(strategy)} segments, {len(strategy.schedule.recomputed)} "
                          f"values recomputed (cost {strategy.schedule.recompute_cost}) of "
                          f"{g.n}", fontsize=10)
    # an attribute of our own on the Axes
    ax.plan_positions = {  # type: ignore[attr-defined]
        v: (int(xpos[g.index[v]]), int(lane[g.index[v]])) for v in g.labels}
    return ax


def to_dot(strategy: CanonicalStrategy, path: str | os.PathLike[str] | None = None) -> str:
    """Return (and write to `path`) the plan as a graphviz dot graph.

    One cluster per segment V_i; nodes filled by state (:func:`node_states`, colours of
    :data:`STATE_COLORS`), cached boundaries with a bold outline; each node's label is its
    label, function name (``attrs["function"]`` when present) and bytes. Render with
    ``dot -Tsvg plan.dot -o plan.svg`` (graphviz is not needed to write the file).

    Parameters
    ----------
    strategy : lowerset.CanonicalStrategy
    path : str or os.PathLike, optional

    Returns
    -------
    str

    Raises
    ------
    ArgumentTypeError
        If `strategy` is not a CanonicalStrategy.
    OSError
        If `path` cannot be written.

    Examples
    --------
    >>> from lowerset.plot import to_dot
    >>> g = ls.Graph.chain(3, memory=10)
    >>> text = to_dot(ls.CanonicalStrategy(g, [{0, 1}, {0, 1, 2}]))
    >>> text.count("subgraph cluster_"), text.count(" -> ")
    (2, 2)
    """
    from .strategy import CanonicalStrategy

    if not isinstance(strategy, CanonicalStrategy):
        raise ArgumentTypeError(f"to_dot() takes a lowerset.CanonicalStrategy, got "
                                f"{type(strategy).__name__}")
    g = strategy.graph
    states = node_states(strategy)
    cached: set[Hashable] = set()
    for c in strategy.cached:
        cached |= c

    def q(s):
        return '"' + str(s).replace("\\", "\\\\").replace('"', '\\"') + '"'

    lines = ["digraph plan {", "  rankdir=LR;",
             '  node [shape=box, style="rounded,filled", fontsize=9];']
    for i, segment in enumerate(strategy.segments):
        lines.append(f"  subgraph cluster_{i + 1} {{")
        lines.append(f'    label="V{i + 1}"; style=filled; color="#eeeeee";')
        for v in sorted(segment, key=g.index.__getitem__):
            k = g.index[v]
            fn = g.attrs[v].get("function", "")
            text = f"{v}\\n{fn}\\n{int(g.memory[k])} B" if fn else f"{v}\\n{int(g.memory[k])} B"
            pen = ", penwidth=2.5" if v in cached else ""
            lines.append(f'    {q(v)} [label="{text}", fillcolor="{STATE_COLORS[states[v]]}"'
                         f"{pen}];")
        lines.append("  }")
    for u, w in g.edges:
        lines.append(f"  {q(u)} -> {q(w)};")
    lines.append("}")
    text = "\n".join(lines) + "\n"
    if path is not None:
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    return text
