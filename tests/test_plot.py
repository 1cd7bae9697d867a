"""lowerset.plot: what the Axes hold equals the schedule; files are valid PNGs; matplotlib is
imported lazily."""

import subprocess
import sys

import numpy as np
import pytest

import lowerset as ls

pytest.importorskip("matplotlib")

from lowerset import plot  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def chain_plan():
    """chain(6), segments {0,1,2} and {3,4,5}: node 2 is the cached boundary ∂(L_1), nodes 0 and
    1 are dropped after the forward pass and recomputed (each backward reads its input)."""
    g = ls.Graph.chain(6, memory=10)
    return ls.CanonicalStrategy(g, [{0, 1, 2}, set(range(6))])


def check_png(path, min_width):
    from matplotlib.image import imread

    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    img = imread(path)
    assert img.ndim == 3 and img.shape[1] >= min_width
    assert img.std() > 0  # not a blank canvas
    return img


def test_importing_plot_does_not_import_matplotlib():
    code = ("import sys, lowerset, lowerset.plot, lowerset.cli; "
            "print(sorted(m for m in ('matplotlib', 'tqdm', 'chainer', 'networkx') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"


def test_plot_is_an_attribute_of_the_package():
    # the README's `lowerset.plot.timeline(...)` after `import lowerset` alone
    code = "import lowerset; print(lowerset.plot.timeline.__name__)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "timeline"


class TestTimeline:
    def test_data_are_the_schedule(self, tmp_path):
        s = chain_plan()
        sched = s.schedule
        ax = plot.timeline(sched, budget=75, unit="B")
        line = ax.lines[0]
        assert list(line.get_xdata()) == list(range(len(sched)))
        assert list(line.get_ydata()) == sched.timeline.tolist()
        assert list(ax.lines[1].get_ydata()) == sched.fold.highs.tolist()
        hlines = {round(l.get_ydata()[0]) for l in ax.lines
                  if len(l.get_ydata()) == 2 and l.get_ydata()[0] == l.get_ydata()[1]}
        assert 75 in hlines  # the budget
        path = tmp_path / "timeline.png"
        ax.figure.savefig(path)
        check_png(path, 500)

    def test_phases_and_shading(self):
        sched = chain_plan().schedule
        phases = plot.event_phases(sched)
        kinds = [e.kind for e in sched.events]
        first_seed = kinds.index("seed_grad")
        assert set(phases[:first_seed]) == {"forward"}
        assert [p == "recompute" for p in phases] == [k == "recompute" for k in kinds]
        assert kinds.count("recompute") == 2  # nodes 0 and 1
        ax = plot.timeline(sched)
        # one shaded span per run of equal phases
        runs = 1 + sum(a != b for a, b in zip(phases, phases[1:]))
        assert len(ax.patches) == runs

    def test_measured_overlay(self):
        sched = chain_plan().schedule
        measured = sched.timeline + 3
        ax = plot.timeline(sched, measured=measured, unit="B")
        dots = [l for l in ax.lines if l.get_label() == "measured"][0]
        assert list(dots.get_ydata()) == measured.tolist()
        ax = plot.timeline(sched, measured=([0, 4], [5, 9]))
        dots = [l for l in ax.lines if l.get_label() == "measured"][0]
        assert list(dots.get_xdata()) == [0, 4]
        with pytest.raises(ls.ArgumentError, match="one per event"):
            plot.timeline(sched, measured=[1, 2, 3])

    def test_plain_step_and_errors(self):
        g = ls.Graph.chain(4, memory=8)
        ax = plot.timeline(ls.schedule(g), unit="B")
        assert list(ax.lines[0].get_ydata()) == ls.schedule(g).timeline.tolist()
        assert "plain step" in ax.get_title()
        with pytest.raises(ls.ArgumentTypeError, match="lowerset.Schedule"):
            plot.timeline(chain_plan())
        with pytest.raises(ls.ArgumentError, match="unknown unit"):
            plot.timeline(ls.schedule(g), unit="parsecs")

    def test_on_the_callers_axes(self):
        from matplotlib.figure import Figure

        fig = Figure()
        ax = fig.add_subplot()
        assert plot.timeline(chain_plan().schedule, ax=ax) is ax
        assert ax.get_legend() is not None and not fig.legends


class TestPareto:
    def test_data_are_the_strategies(self, tmp_path):
        g = ls.read_cg(_cg("resnet50")) if _cg("resnet50") else ls.Graph.chain(12, memory=10)
        front = ls.pareto(g, "approx")
        chen = ls.baselines.chen_sqrtn(g)
        ax = plot.pareto(front, others={"Chen": chen}, budget=front[0].schedule.peak)
        assert list(ax.lines[0].get_xdata()) == [s.schedule.recompute_cost for s in front]
        assert list(ax.lines[0].get_ydata()) == [s.schedule.peak for s in front]
        point = [l for l in ax.lines if l.get_label().startswith("Chen")][0]
        assert (point.get_xdata()[0], point.get_ydata()[0]) == (chen.schedule.recompute_cost,
                                                                chen.schedule.peak)
        path = tmp_path / "pareto.png"
        ax.figure.savefig(path)
        check_png(path, 400)

    def test_errors(self):
        with pytest.raises(ls.ArgumentError, match="at least one"):
            plot.pareto([])
        with pytest.raises(ls.ArgumentTypeError):
            plot.pareto([ls.Graph.chain(2)])


class TestPlanGraph:
    def test_states_by_hand(self, tmp_path):
        s = chain_plan()
        assert plot.node_states(s) == {0: "recomputed", 1: "recomputed", 2: "kept", 3: "kept",
                                       4: "kept", 5: "kept"}
        ax = plot.plan_graph(s)
        by_state = {c.get_label(): c for c in ax.collections
                    if c.get_label() in plot.STATE_COLORS}
        assert len(by_state["kept"].get_offsets()) == 4
        assert len(by_state["recomputed"].get_offsets()) == 2
        assert len(by_state["dropped"].get_offsets()) == 0
        # segments left to right: V_1's nodes before V_2's
        xs = {v: xy[0] for v, xy in ax.plan_positions.items()}
        assert max(xs[v] for v in (0, 1, 2)) < min(xs[v] for v in (3, 4, 5))
        # the recomputed scatter sits at the positions of nodes 0 and 1
        rec = sorted(tuple(p) for p in by_state["recomputed"].get_offsets().tolist())
        assert rec == sorted(tuple(map(float, ax.plan_positions[v])) for v in (0, 1))
        path = tmp_path / "plan.png"
        ax.figure.savefig(path)
        check_png(path, 300)

    def test_diamond_lanes_do_not_overlap(self):
        g = ls.Graph(list("abcd"), [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d")],
                     dict.fromkeys("abcd", 1), dict.fromkeys("abcd", 4))
        ax = plot.plan_graph(ls.CanonicalStrategy(g, [set("abcd")]))
        pos = ax.plan_positions
        assert pos["b"][1] != pos["c"][1]  # b is still live (read by d) when c is made

    def test_too_large(self):
        s = chain_plan()
        with pytest.raises(ls.ArgumentError, match="to_dot"):
            plot.plan_graph(s, max_nodes=3)


def test_to_dot(tmp_path):
    s = chain_plan()
    path = tmp_path / "plan.dot"
    text = plot.to_dot(s, path)
    assert path.read_text() == text
    assert text.count("subgraph cluster_") == 2
    assert text.count(" -> ") == 5
    assert text.count(plot.STATE_COLORS["recomputed"]) == 2
    assert text.count("penwidth") == 1  # node 2, the cached boundary
    assert text.startswith("digraph plan {") and text.rstrip().endswith("}")


def _cg(name):
    from pathlib import Path

    p = Path(__file__).resolve().parents[2] / "shared" / "graphs" / f"cg_{name}.txt"
    return p if p.is_file() else None


def test_figures_are_independent():
    a = plot.timeline(chain_plan().schedule)
    b = plot.timeline(chain_plan().schedule)
    assert a.figure is not b.figure
    np.testing.assert_array_equal(a.lines[0].get_ydata(), b.lines[0].get_ydata())
