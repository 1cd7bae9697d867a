"""The ``lowerset`` command line: plan, simulate and compare recomputation strategies.

::

    lowerset plan GRAPH --budget 11.4GB [--method auto|exact|approx] [--model executor|paper]
                  -o plan.json
    lowerset simulate PLAN [--plot timeline.png] [--plot-plan plan.png] [--dot plan.dot]
    lowerset pareto GRAPH [--method auto|exact|approx] [--plot pareto.png]
    lowerset min-budget GRAPH [--method auto|exact|approx] [--model executor|paper]
    lowerset dtr GRAPH --budget 2GB [--heuristic dtr|dtr_local|lru|size] [--plot timeline.png]

GRAPH is one of the authors' ``cg_*.txt`` files or a graph JSON written by
:func:`lowerset.save_graph` (for instance of a graph recorded by ``chainer_ext.trace``, whose
execution facts the executor model then uses). PLAN is a strategy JSON written by ``plan``
(:func:`lowerset.save_strategy`). Sizes are bytes or a number with a unit: ``11.4GB``, ``4GiB``,
``512MB`` (:func:`lowerset.units.parse_size`).

Budgets follow :func:`lowerset.solve`: ``--model executor`` (default) reads ``--budget`` as the
device memory of the whole training step as the schedule predicts it (parameters, inputs,
gradients and workspace included); ``--model paper`` reads it as the eq. (2) budget of the paper's
DP. On a terminal, searches longer than half a second show a tqdm progress bar on stderr (elapsed
time and the planner's search step); in a pipe nothing is shown and tqdm is not imported.

Errors print one line, ``lowerset <command>: error: ...``, on stderr and exit with status 1
(an infeasible budget names the least feasible one); usage errors exit with status 2.

The module imports only :mod:`argparse` and the standard library at import time; each command
imports the parts of :mod:`lowerset` it needs when it runs, and matplotlib only with ``--plot``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Iterator, Sequence
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .graph import Graph

__all__ = ["main", "build_parser", "read_graph"]

EXIT_ERROR = 1


class CommandError(Exception):
    """A failure to report as one line (the message) with exit status 1."""


def _size(text):
    """Argparse type for sizes."""
    from .units import parse_size

    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _positive_float(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """Return the :class:`argparse.ArgumentParser` of the ``lowerset`` command."""
    p = argparse.ArgumentParser(
        prog="lowerset",
        description="Plan which activations to drop and recompute in a training step "
                    "(Kusumoto et al., NeurIPS 2019).",
        epilog="GRAPH: an authors' cg_*.txt file or a graph JSON (lowerset.save_graph, e.g. of "
               "chainer_ext.trace). Sizes: bytes, 512MB, 11.4GB, 4GiB.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    def common(q, model=True):
        q.add_argument("--method", choices=("auto", "exact", "ordered", "approx"),
                       default="auto",
                       help="all lower sets (exact), the pruned family with the prefixes of two "
                            "topological orders (ordered), the pruned family (approx), or exact "
                            "where the graph has at most 50,000 lower sets, else approx (auto, "
                            "default)")
        if model:
            q.add_argument("--model", choices=("executor", "paper"), default="executor",
                           help="executor: whole-step device bytes as the schedule predicts "
                                "them (default); paper: the paper's eq. (2)")
        q.add_argument("--time-limit", type=_positive_float, metavar="SECONDS",
                       help="stop the search after this many seconds and keep the best plan "
                            "found (default: lowerset.default_time_limit; none for "
                            "--method exact)")
        q.add_argument("--no-progress", action="store_true",
                       help="no progress bar even on a terminal")

    q = sub.add_parser("plan", help="plan a strategy within a budget and write it as JSON",
                       description="Plan the strategy with the least recomputation whose peak "
                                   "fits the budget; write it as JSON (-o, else stdout).")
    q.add_argument("graph", metavar="GRAPH")
    q.add_argument("--budget", "-b", type=_size, required=True, metavar="SIZE",
                   help="memory budget, e.g. 11.4GB (see --model)")
    common(q)
    q.add_argument("--mode", choices=("time", "memory"), default="time",
                   help="with --model paper: time-centric (least overhead, default) or "
                        "memory-centric (largest overhead, coarse segments)")
    q.add_argument("--beyond-canonical", action="store_true",
                   help="executor model: also search drop sets that no lower-set sequence "
                        "gives, and write one where it recomputes less "
                        "(lowerset.DropSetStrategy)")
    q.add_argument("-o", "--output", metavar="PLAN.json",
                   help="write the plan here (default: stdout, with the summary on stderr)")

    q = sub.add_parser("simulate", help="replay a plan: peak, timeline, recomputations",
                       description="Replay a plan's schedule and print its memory and "
                                   "recomputation; optionally draw it.")
    q.add_argument("plan", metavar="PLAN")
    q.add_argument("--budget", "-b", type=_size, metavar="SIZE",
                   help="draw this budget on the timeline and say whether the plan fits")
    q.add_argument("--plot", metavar="PNG", help="write the memory timeline picture here")
    q.add_argument("--plot-plan", metavar="PNG", help="write the plan drawn on its graph here")
    q.add_argument("--dot", metavar="DOT", help="write the plan as a graphviz dot file")
    q.add_argument("--events", action="store_true", help="list every event of the schedule")

    q = sub.add_parser("pareto", help="the overhead/peak trade-off of the planner's plans",
                       description="Print the planner's overhead/peak front, Chen's sqrt(n) and "
                                   "the paper's DP at its minimal budget; optionally draw them.")
    q.add_argument("graph", metavar="GRAPH")
    common(q, model=False)
    q.add_argument("--plot", metavar="PNG", help="write the trade-off picture here")
    q.add_argument("--json", metavar="FILE", help="write the front as JSON here")

    q = sub.add_parser("dtr", help="simulate DTR, a runtime cache, on the step",
                       description="Simulate Dynamic Tensor Rematerialization (Kirisame et al., "
                                   "ICLR 2021) over the step within the budget: the same "
                                   "summary as simulate.")
    q.add_argument("graph", metavar="GRAPH")
    q.add_argument("--budget", "-b", required=True, metavar="SIZE",
                   help="whole-step device memory, e.g. 2GB")
    q.add_argument("--heuristic", default="dtr", metavar="NAME",
                   help="eviction heuristic: dtr (h_DTR, default), dtr_local, lru or size")
    q.add_argument("--plot", metavar="PNG", help="write the memory timeline picture here")
    q.add_argument("--events", action="store_true", help="list every event")

    q = sub.add_parser("min-budget", help="the least budget any plan fits in",
                       description="Print the least budget in bytes: the least whole-step "
                                   "peak the planner reaches (executor model) or the paper's "
                                   "minimal eq. (2) budget.")
    q.add_argument("graph", metavar="GRAPH")
    common(q)
    return p


# -- input ---------------------------------------------------------------------------------------


def read_graph(path: str) -> Graph:
    """Read GRAPH: a graph JSON (:func:`lowerset.save_graph`) or an authors' cg file.

    Parameters
    ----------
    path : str

    Returns
    -------
    lowerset.Graph

    Raises
    ------
    CommandError
        If the file is a plan instead of a graph, or cannot be read as either format.
    """
    from . import io

    try:
        with open(path, "rb") as f:
            head = f.read(256).lstrip()
    except OSError as e:
        raise CommandError(f"cannot read {path}: {e.strerror or e}") from None
    if head.startswith((b"{", b"[")) or str(path).lower().endswith(".json"):
        if b'"lowerset.strategy"' in head:
            raise CommandError(f"{path} is a plan, not a graph: use `lowerset simulate {path}`")
        return io.load_graph(path)
    return io.read_cg(path)


def _read_plan(path):
    from . import io

    try:
        with open(path, "rb") as f:
            head = f.read(256).lstrip()
    except OSError as e:
        raise CommandError(f"cannot read {path}: {e.strerror or e}") from None
    if b'"lowerset.graph"' in head:
        raise CommandError(f"{path} is a graph, not a plan: plan it with `lowerset plan {path} "
                           "--budget SIZE -o PLAN.json`, then simulate PLAN.json")
    if not head.startswith(b"{"):
        raise CommandError(f"{path} is not a plan (the JSON file `lowerset plan ... -o "
                           "PLAN.json` writes)")
    return io.load_strategy(path)


# -- progress ------------------------------------------------------------------------------------


@contextlib.contextmanager
def progress(desc: str, enabled: bool = True, stream: IO[str] | None = None) -> Iterator[Any]:
    """Show an elapsed-time tqdm bar on `stream` (stderr) while the block runs, only on a
    terminal and only after half a second, where tqdm is installed (the ``cli`` extra);
    elsewhere do nothing (tqdm is not imported). The planner's calls inside the block name
    their search step on it (:mod:`lowerset._progress`).

    Parameters
    ----------
    desc : str
    enabled : bool
    stream : file, optional
        Default ``sys.stderr``.
    """
    from ._progress import progress as bar

    with bar(desc, enabled, stream, delay=0.5) as b:
        yield b


# -- commands ------------------------------------------------------------------------------------


def _fmt(nbytes):
    from .units import format_size

    return f"{format_size(nbytes)} ({int(nbytes)} bytes)"


def _strategy_line(s, model):
    g = s.graph
    total = g.total_cost()
    if model == "paper":
        return (f"{len(s)} segments, eq. (1) overhead {s.overhead} cost units "
                f"({100.0 * s.overhead / total:.1f}% of T(V) = {total}), eq. (2) peak "
                f"{_fmt(s.peak_memory)}; schedule peak {_fmt(s.schedule.peak)}")
    from .dropset import DropSetStrategy

    sc = s.schedule
    shape = (f"drop set of {len(s.dropped)} values" if isinstance(s, DropSetStrategy)
             else f"{len(s)} segments")
    return (f"{shape}, recomputes {len(sc.recomputed)} of {g.n} values (cost "
            f"{sc.recompute_cost}, {100.0 * sc.recompute_cost / total:.1f}% of T(V) = {total}), "
            f"predicted peak {_fmt(sc.peak)}")


def _infeasible(e, model):
    what = ("least whole-step peak any plan reaches" if model == "executor"
            else "minimal eq. (2) budget")
    if e.min_budget is None:
        return f"budget {_fmt(e.budget)} is infeasible"
    return (f"budget {_fmt(e.budget)} is below the {what}, {_fmt(e.min_budget)}: pass --budget "
            f"{e.min_budget} or more")


def _planner_limit(a):
    """The `time_limit` of a planner call: --time-limit, else the planner's default."""
    return "default" if a.time_limit is None else a.time_limit


def _resolve_method(a, g):
    """Replace ``a.method`` "auto" by the method it picks for `g` (printed in the summaries)."""
    from .dp import resolve_method

    a.method = resolve_method(g, a.method, time_limit=a.time_limit)


def cmd_plan(a: argparse.Namespace, out: IO[str]) -> None:
    """``lowerset plan``: solve and write the strategy.

    Parameters
    ----------
    a : argparse.Namespace
        The parsed command line.
    out : file
        Where the report is written (standard output).
    """
    from .exceptions import InfeasibleBudgetError
    from .planner import solve

    g = read_graph(a.graph)
    _resolve_method(a, g)
    if a.model == "executor" and a.mode != "time":
        raise CommandError("--mode memory is the paper's memory-centric DP: add --model paper")
    if a.model == "paper" and a.beyond_canonical:
        raise CommandError("--beyond-canonical plans for the executor's schedule: drop "
                           "--model paper")
    with progress(f"planning {os.path.basename(a.graph)}", not a.no_progress):
        try:
            s = solve(g, a.budget, mode=a.mode, method=a.method, model=a.model,
                      time_limit=_planner_limit(a), beyond_canonical=a.beyond_canonical)
        except InfeasibleBudgetError as e:
            raise CommandError(_infeasible(e, a.model)) from None
    data = s.to_dict()
    # "budget" is what the DP was run at (eq. (2) bytes); the command's own budget and model:
    data["model"] = a.model
    data["requested_budget"] = a.budget
    text = json.dumps(data)
    summary = f"plan ({a.model} model, {a.method}): {_strategy_line(s, a.model)}"
    if a.output:
        try:
            with open(a.output, "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as e:
            raise CommandError(f"cannot write {a.output}: {e.strerror or e}") from None
        out.write(f"{summary}\nwrote {a.output}\n")
    else:
        out.write(text + "\n")
        sys.stderr.write(summary + "\n")


def _schedule_lines(sc, budget):
    """The summary lines of a schedule (``simulate``, ``dtr``): peak, resident bytes,
    recomputation, events by kind, and whether it fits `budget` (None: no such line)."""
    g = sc.graph
    kinds: dict[str, int] = {}
    for e in sc.events:
        kinds[e.kind] = kinds.get(e.kind, 0) + 1
    peak_event = sc.events[sc.fold.peak_index] if sc.fold.peak_index >= 0 else None
    lines = {"peak": f"peak: {_fmt(sc.peak)}" + (
                 f" at event {sc.fold.peak_index} ({peak_event.kind} of node "
                 f"{peak_event.node!r})" if peak_event else ""),
             "resident": f"resident (parameters, inputs): {_fmt(sc.resident)}",
             "recomputed": f"recomputed: {len(sc.recomputed)} values, cost {sc.recompute_cost} "
                           f"of T(V) = {g.total_cost()} "
                           f"({100.0 * sc.recompute_cost / g.total_cost():.1f}%)",
             "events": "events: " + ", ".join(f"{k} {n}" for k, n in kinds.items()),
             "budget": None}
    if budget is not None:
        lines["budget"] = f"budget {_fmt(budget)}: " + (
            "fits" if sc.peak <= budget else f"does NOT fit (over by {_fmt(sc.peak - budget)})")
    return lines


def _facts_kind(g):
    return "traced" if g.has_facts else "default"


def _write_events(sc, out):
    for i, (e, b) in enumerate(zip(sc.events, sc.timeline.tolist())):
        out.write(f"{i}\t{e.kind}\t{e.node}\t{e.bytes}\t{b}\n")


def cmd_simulate(a: argparse.Namespace, out: IO[str]) -> None:
    """``lowerset simulate``: the schedule's figures, optionally its pictures.

    Parameters
    ----------
    a : argparse.Namespace
        The parsed command line.
    out : file
        Where the report is written (standard output).
    """
    from .dropset import DropSetStrategy

    s = _read_plan(a.plan)
    if isinstance(s, DropSetStrategy) and (a.plot_plan or a.dot):
        raise CommandError(f"{a.plan} is a drop set, which has no segments to draw: "
                           "--plot-plan and --dot draw a canonical strategy")
    sc = s.schedule
    g = s.graph
    parts = _schedule_lines(sc, a.budget)
    if isinstance(s, DropSetStrategy):
        shape = f"a drop set of {len(s.dropped)} values"
        paper = "no eq. (1) or eq. (2): not a lower-set sequence"
    else:
        shape = f"{len(s)} segments"
        paper = f"eq. (1) overhead {s.overhead}, eq. (2) peak {_fmt(s.peak_memory)}"
    lines = [f"plan: {shape} on {g.n} nodes ({_facts_kind(g)} execution facts)",
             parts["peak"], parts["resident"], parts["recomputed"], paper, parts["events"]]
    if parts["budget"]:
        lines.append(parts["budget"])
    out.write("\n".join(lines) + "\n")
    if a.events:
        _write_events(sc, out)
    if a.plot or a.plot_plan:
        from . import plot

        if a.plot:
            ax = plot.timeline(sc, budget=a.budget)
            _save(ax, a.plot, out)
        if a.plot_plan:
            ax = plot.plan_graph(s)
            _save(ax, a.plot_plan, out)
    if a.dot:
        from . import plot

        try:
            plot.to_dot(s, a.dot)
        except OSError as e:
            raise CommandError(f"cannot write {a.dot}: {e.strerror or e}") from None
        out.write(f"wrote {a.dot}\n")


def _save(ax, path, out):
    try:
        ax.figure.savefig(path, dpi=120)
    except OSError as e:
        raise CommandError(f"cannot write {path}: {e.strerror or e}") from None
    out.write(f"wrote {path}\n")


def cmd_pareto(a: argparse.Namespace, out: IO[str]) -> None:
    """``lowerset pareto``: the front, Chen's and the paper's points.

    Parameters
    ----------
    a : argparse.Namespace
        The parsed command line.
    out : file
        Where the report is written (standard output).
    """
    from . import baselines
    from .planner import pareto, solve

    g = read_graph(a.graph)
    _resolve_method(a, g)
    with progress(f"pareto {os.path.basename(a.graph)}", not a.no_progress):
        front = pareto(g, a.method, time_limit=_planner_limit(a))
        others = {"Chen's sqrt(n)": baselines.chen_sqrtn(g)}
        for mode, tag in (("time", "TC"), ("memory", "MC")):
            others[f"paper {a.method} DP+{tag} @min eq.(2)"] = solve(
                g, None, mode=mode, method=a.method, model="paper", time_limit=a.time_limit)
    total = g.total_cost()
    out.write(f"{'recompute cost':>14}  {'% T(V)':>7}  {'peak (bytes)':>14}  {'peak':>10}  "
              f"segments  plan\n")
    rows = [(s, "front") for s in front] + [(s, name) for name, s in others.items()]
    for s, name in rows:
        sc = s.schedule
        from .units import format_size

        out.write(f"{sc.recompute_cost:>14}  {100.0 * sc.recompute_cost / total:>6.1f}%  "
                  f"{sc.peak:>14}  {format_size(sc.peak):>10}  {len(s):>8}  {name}\n")
    if a.json:
        data = {"graph": a.graph, "method": a.method, "total_cost": total,
                "front": [{"recompute_cost": s.schedule.recompute_cost, "peak": s.schedule.peak,
                           "segments": len(s)} for s in front],
                "others": {name: {"recompute_cost": s.schedule.recompute_cost,
                                  "peak": s.schedule.peak, "segments": len(s)}
                           for name, s in others.items()}}
        try:
            with open(a.json, "w", encoding="utf-8") as f:
                json.dump(data, f, indent=1)
        except OSError as e:
            raise CommandError(f"cannot write {a.json}: {e.strerror or e}") from None
        out.write(f"wrote {a.json}\n")
    if a.plot:
        from . import plot

        ax = plot.pareto(front, others=others,
                         title=f"{os.path.basename(a.graph)}: overhead/peak trade-off")
        _save(ax, a.plot, out)


def cmd_dtr(a: argparse.Namespace, out: IO[str]) -> None:
    """``lowerset dtr``: DTR simulated on the step of GRAPH, summarised as ``simulate`` does.

    Parameters
    ----------
    a : argparse.Namespace
        The parsed command line.
    out : file
        Where the report is written (standard output).
    """
    from .baselines.dtr import dtr
    from .units import parse_size

    try:
        budget = parse_size(a.budget)
    except ValueError as e:
        raise CommandError(f"--budget: {e}") from None
    g = read_graph(a.graph)
    sc = dtr(g, budget, a.heuristic)
    parts = _schedule_lines(sc, budget)
    nodes = len(sc.rematerializations)
    lines = [f"dtr ({a.heuristic}): {g.n} nodes ({_facts_kind(g)} execution facts), "
             f"{sc.seconds:.2f} s",
             parts["peak"], parts["resident"], parts["recomputed"],
             f"rematerialized nodes: {nodes}, evictions: {sc.evictions}",
             parts["events"], parts["budget"]]
    out.write("\n".join(lines) + "\n")
    if a.events:
        _write_events(sc, out)
    if a.plot:
        from . import plot

        _save(plot.timeline(sc, budget=budget), a.plot, out)


def cmd_min_budget(a: argparse.Namespace, out: IO[str]) -> None:
    """``lowerset min-budget``: the least feasible budget.

    Parameters
    ----------
    a : argparse.Namespace
        The parsed command line.
    out : file
        Where the report is written (standard output).
    """
    g = read_graph(a.graph)
    _resolve_method(a, g)
    with progress(f"min-budget {os.path.basename(a.graph)}", not a.no_progress):
        if a.model == "paper":
            from .dp import min_budget

            b = min_budget(g, a.method, time_limit=a.time_limit)
            what = "minimal eq. (2) budget"
        else:
            from .planner import min_peak

            b = min_peak(g, a.method, time_limit=_planner_limit(a)).schedule.peak
            what = "least whole-step peak"
    out.write(f"{b}\n")
    sys.stderr.write(f"{what} ({a.method}): {_fmt(b)}\n")


COMMANDS = {"plan": cmd_plan, "simulate": cmd_simulate, "pareto": cmd_pareto,
            "min-budget": cmd_min_budget, "dtr": cmd_dtr}


def main(argv: Sequence[str] | None = None, out: IO[str] | None = None) -> int:
    """Run the command line; return the exit status (0, 1 on an error, 2 on bad usage).

    Parameters
    ----------
    argv : list of str, optional
        Default ``sys.argv[1:]``.
    out : file, optional
        Where results go; default ``sys.stdout``.

    Returns
    -------
    int
    """
    out = sys.stdout if out is None else out
    parser = build_parser()
    try:
        a = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    from .exceptions import LowersetError

    try:
        COMMANDS[a.command](a, out)
    except (CommandError, LowersetError) as e:
        msg = " ".join(str(e).split())  # one line
        sys.stderr.write(f"lowerset {a.command}: error: {msg}\n")
        return EXIT_ERROR
    except ModuleNotFoundError as e:
        if e.name != "matplotlib":
            raise
        sys.stderr.write(f"lowerset {a.command}: error: drawing needs matplotlib: "
                         "pip install 'lowerset[plot]'\n")
        return EXIT_ERROR
    except OSError as e:
        sys.stderr.write(f"lowerset {a.command}: error: {e.filename or ''}: "
                         f"{e.strerror or e}\n".replace(": : ", ": "))
        return EXIT_ERROR
    except KeyboardInterrupt:
        sys.stderr.write(f"lowerset {a.command}: interrupted\n")
        return 130
    return 0
