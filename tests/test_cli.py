"""The lowerset command line: plumbing (sizes, formats, files, exit codes) and the agreement of
its commands at the feasibility boundary."""

import importlib.util
import io
import json
import subprocess
import sys

import pytest

import lowerset as ls
from conftest import fan, graphs_dir
from lowerset import cli


def run(*argv):
    """main() in-process; returns (status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    old = sys.stderr
    sys.stderr = err
    try:
        status = cli.main(list(map(str, argv)), out=out)
    finally:
        sys.stderr = old
    return status, out.getvalue(), err.getvalue()


HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None


@pytest.fixture(scope="module")
def vgg():
    path = graphs_dir() / "cg_vgg19.txt"
    if not path.is_file():
        pytest.skip(f"{path} not found")
    return path


@pytest.fixture
def diamond(tmp_path):
    """A graph JSON (lowerset.save_graph) of a small diamond-shaped graph."""
    g = ls.Graph(["a", "b", "c", "d", "e"],
                 [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d"), ("d", "e")],
                 dict(a=1, b=10, c=1, d=1, e=1), dict(a=40, b=20, c=20, d=40, e=8))
    path = tmp_path / "diamond.json"
    ls.save_graph(g, path)
    return g, path


class TestPlan:
    def test_default_method_plans_a_graph_too_wide_for_exact(self, tmp_path):
        g, path = fan(17), tmp_path / "fan.json"     # 131,074 lower sets
        ls.save_graph(g, path)
        status, _, err = run("plan", path, "-b", ls.schedule(g).peak, "--method", "exact")
        assert status == 1 and "max_lower_sets" in err
        status, stdout, _ = run("plan", path, "-b", ls.schedule(g).peak, "-o", tmp_path / "p.json")
        assert status == 0 and "plan (executor model, approx)" in stdout
        status, _, err = run("min-budget", path)
        assert status == 0 and "least whole-step peak (approx)" in err

    def test_writes_a_plan_within_the_budget(self, vgg, tmp_path):
        out = tmp_path / "plan.json"
        status, stdout, _ = run("plan", vgg, "--budget", "2.5GB", "--method", "approx", "-o", out)
        assert status == 0 and f"wrote {out}" in stdout
        data = json.loads(out.read_text())
        assert data["format"] == "lowerset.strategy" and data["model"] == "executor"
        assert data["requested_budget"] == 2_500_000_000
        s = ls.load_strategy(out, graph=ls.read_cg(vgg))
        assert s.schedule.peak <= 2_500_000_000

    def test_boundary_agrees_with_min_budget(self, vgg, tmp_path):
        status, stdout, _ = run("min-budget", vgg, "--method", "approx")
        assert status == 0
        least = int(stdout.strip())
        out = tmp_path / "p.json"
        assert run("plan", vgg, "-b", least, "--method", "approx", "-o", out)[0] == 0
        status, _, err = run("plan", vgg, "-b", least - 1, "--method", "approx")
        assert status == 1
        assert err.count("\n") == 1 and err.startswith("lowerset plan: error: ")
        assert f"pass --budget {least} or more" in err

    def test_paper_model(self, vgg, tmp_path):
        status, stdout, _ = run("min-budget", vgg, "--model", "paper")
        eq2 = int(stdout.strip())
        out = tmp_path / "paper.json"
        status, stdout, _ = run("plan", vgg, "-b", eq2, "--model", "paper", "--mode", "memory",
                                "-o", out)
        assert status == 0 and "eq. (2) peak" in stdout
        s = ls.load_strategy(out)
        assert s.peak_memory <= eq2 and s.mode == "memory"
        status, _, err = run("plan", vgg, "-b", eq2 - 1, "--model", "paper")
        assert status == 1 and "minimal eq. (2) budget" in err and str(eq2) in err

    def test_stdout_when_no_output_file(self, diamond):
        g, path = diamond
        status, stdout, err = run("plan", path, "--budget", "1kB")
        assert status == 0 and "predicted peak" in err
        s = ls.CanonicalStrategy.from_dict(json.loads(stdout), graph=g)
        assert s.schedule.peak <= 1000

    def test_usage_errors(self, diamond):
        _, path = diamond
        assert run("plan", path)[0] == 2  # --budget missing
        status, _, err = run("plan", path, "--budget", "12 parsecs")
        assert status == 2 and "cannot read the size" in err
        status, _, err = run("plan", path, "--budget", "1GB", "--mode", "memory")
        assert status == 1 and "--model paper" in err

    def test_bad_input_is_one_line(self, tmp_path):
        bad = tmp_path / "bad.txt"
        bad.write_text("3 x\n")
        for argv in (("plan", bad, "-b", "1GB"), ("plan", tmp_path / "missing.txt", "-b", "1"),
                     ("simulate", tmp_path / "missing.json")):
            status, stdout, err = run(*argv)
            assert status == 1 and stdout == "" and err.count("\n") == 1, err
        assert "line 1" in run("plan", bad, "-b", "1GB")[2]

    def test_a_plan_is_not_a_graph(self, diamond, tmp_path):
        _, path = diamond
        out = tmp_path / "p.json"
        assert run("plan", path, "-b", "1kB", "-o", out)[0] == 0
        status, _, err = run("plan", out, "-b", "1kB")
        assert status == 1 and "use `lowerset simulate" in err


    def test_a_json_file_is_read_as_a_graph_json(self, tmp_path):
        # an empty or non-object .json file is not taken for one of the authors' cg files
        for name, text in (("empty.json", ""), ("list.json", "[1, 2]")):
            (tmp_path / name).write_text(text)
            status, _, err = run("plan", tmp_path / name, "-b", "1GB")
            assert status == 1 and "n_vars" not in err and name in err, err


class TestSimulate:
    def test_a_graph_or_a_cg_file_is_not_a_plan(self, diamond, vgg):
        _, path = diamond
        status, stdout, err = run("simulate", path)
        assert status == 1 and stdout == "" and err.count("\n") == 1
        assert f"{path} is a graph, not a plan: plan it with `lowerset plan {path}" in err
        status, _, err = run("simulate", vgg)
        assert status == 1 and f"{vgg} is not a plan" in err

    def test_reports_the_schedule(self, diamond, tmp_path):
        g, path = diamond
        out = tmp_path / "p.json"
        run("plan", path, "-b", "1kB", "-o", out)
        s = ls.load_strategy(out)
        png, plan_png, dot = tmp_path / "t.png", tmp_path / "g.png", tmp_path / "p.dot"
        status, stdout, stderr = run("simulate", out, "--budget", s.schedule.peak - 1, "--plot",
                                     png, "--plot-plan", plan_png, "--dot", dot, "--events")
        if not HAS_MATPLOTLIB:  # the planner-only environment
            assert status == 1 and stderr.count("\n") == 1
            assert "drawing needs matplotlib: pip install 'lowerset[plot]'" in stderr
            status, stdout, _ = run("simulate", out, "--budget", s.schedule.peak - 1, "--dot",
                                    dot, "--events")
            plan_png = png = None
        assert status == 0
        assert "peak: " in stdout and f"({s.schedule.peak} bytes)" in stdout
        assert "does NOT fit (over by 1 B (1 bytes))" in stdout
        events = [line.split("\t") for line in stdout.splitlines() if "\t" in line]
        assert [int(e[4]) for e in events] == s.schedule.timeline.tolist()
        assert [e[1] for e in events] == [e.kind for e in s.schedule.events]
        for p in (png, plan_png):
            assert p is None or p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert dot.read_text().startswith("digraph plan {")


class TestDTR:
    def test_summary_as_simulate(self, vgg):
        s = ls.dtr(ls.read_cg(vgg), 2_500_000_000)
        assert s.recompute_cost > 0
        status, stdout, _ = run("dtr", vgg, "--budget", "2.5GB", "--events")
        assert status == 0
        assert f"({s.peak} bytes) at event" in stdout
        assert f"recomputed: {len(s.recomputed)} values, cost {s.recompute_cost}" in stdout
        assert "budget 2.50 GB (2500000000 bytes): fits" in stdout
        events = [line.split("\t") for line in stdout.splitlines() if "\t" in line]
        assert [e[1] for e in events] == [e.kind for e in s.events]

    def test_errors_are_one_line(self, diamond):
        _, path = diamond
        for argv, words in ((("--budget", "12 parsecs"), "cannot read the size"),
                            (("--budget", "1kB", "--heuristic", "random"), "unknown heuristic"),
                            (("--budget", "10B"), "it needs")):
            status, stdout, err = run("dtr", path, *argv)
            assert status == 1 and stdout == "" and err.count("\n") == 1, err
            assert err.startswith("lowerset dtr: error: ") and words in err


class TestPareto:
    def test_front_table_and_files(self, vgg, tmp_path):
        js, png = tmp_path / "front.json", tmp_path / "front.png"
        plot = ["--plot", png] if HAS_MATPLOTLIB else []
        status, stdout, _ = run("pareto", vgg, "--method", "approx", "--json", js, *plot)
        assert status == 0
        data = json.loads(js.read_text())
        front = ls.pareto(ls.read_cg(vgg), "approx")
        assert [r["peak"] for r in data["front"]] == [s.schedule.peak for s in front]
        assert "Chen's sqrt(n)" in data["others"]
        rows = [line for line in stdout.splitlines() if line.rstrip().endswith("front")]
        assert len(rows) == len(front)
        assert not HAS_MATPLOTLIB or png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


class TestProgress:
    class Tty(io.StringIO):
        def isatty(self):
            return True

    def test_shown_on_a_terminal_after_half_a_second(self):
        import time

        pytest.importorskip("tqdm", reason="the cli extra (tqdm) is not installed")

        stream = self.Tty()
        with cli.progress("planning x", stream=stream):
            time.sleep(0.9)
        assert "planning x" in stream.getvalue()

    def test_planner_calls_name_their_search_steps(self, monkeypatch):
        """solve, min_peak and pareto show one bar (the outermost call's) naming each step,
        and none with progress=False."""
        pytest.importorskip("tqdm", reason="the cli extra (tqdm) is not installed")
        from lowerset import _progress

        monkeypatch.setattr(_progress, "DELAY", 0.0)
        g = ls.Graph.chain(30, memory=10)
        stream = self.Tty()
        monkeypatch.setattr(sys, "stderr", stream)
        ls.solve(g, budget=int(0.7 * ls.schedule(g).peak), method="exact")
        out = stream.getvalue()
        assert "solve (pool)" in out and "solve (ladder)" in out and "solve (local search)" in out
        assert "pareto" not in out                     # the inner pareto call reuses solve's bar
        stream.seek(0)
        stream.truncate()
        ls.min_peak(ls.Graph.chain(31, memory=10), progress=False)
        assert stream.getvalue() == ""

    def test_quiet_elsewhere(self):
        stream = io.StringIO()
        with cli.progress("planning x", stream=stream) as bar:
            assert bar is None
        assert stream.getvalue() == ""
        with cli.progress("planning x", enabled=False, stream=self.Tty()) as bar:
            assert bar is None


def test_python_m_lowerset_and_no_tqdm_in_a_pipe(vgg, tmp_path):
    code = ("import sys; from lowerset.cli import main; "
            f"s = main(['plan', {str(vgg)!r}, '-b', '11.4GB', "
            f"'-o', {str(tmp_path / 'p.json')!r}]); "
            "print('tqdm' in sys.modules, 'matplotlib' in sys.modules, s)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip().splitlines()[-1] == "False False 0"
    proc = subprocess.run([sys.executable, "-m", "lowerset", "min-budget", str(vgg), "--method",
                           "approx"], capture_output=True, text=True)
    assert proc.returncode == 0 and int(proc.stdout) == int(run("min-budget", vgg, "--method",
                                                                "approx")[1])


def test_plan_beyond_canonical_writes_a_drop_set_that_simulate_reads(tmp_path):
    from test_dropset import _below_canonical_graph

    g, path = _below_canonical_graph(), tmp_path / "g.json"
    ls.save_graph(g, path)
    status, out, _ = run("plan", path, "--budget", 90, "--beyond-canonical", "-o",
                         tmp_path / "p.json", "--no-progress")
    assert status == 0 and "drop set of 1 values" in out and "(cost 10," in out
    plan = ls.load_strategy(tmp_path / "p.json", graph=g)
    assert isinstance(plan, ls.DropSetStrategy) and plan.dropped == {0}
    status, out, _ = run("simulate", tmp_path / "p.json", "--budget", 90)
    assert status == 0 and "a drop set of 1 values" in out
    assert f"({plan.schedule.peak} bytes)" in out and "fits" in out
    status, _, err = run("simulate", tmp_path / "p.json", "--dot", tmp_path / "p.dot")
    assert status == 1 and "no segments to draw" in err
    status, _, err = run("plan", path, "--budget", 90, "--beyond-canonical", "--model", "paper")
    assert status == 1 and "--beyond-canonical plans for the executor" in err
