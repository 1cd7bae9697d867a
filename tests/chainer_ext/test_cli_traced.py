"""Round trip: trace a Chainer model, write the graph as JSON, plan it with the command line,
load the plan against the traced graph and train a step under it."""

import io
import json
import sys

import pytest

pytest.importorskip("chainer_ext")
chainer = pytest.importorskip("chainer")

import lowerset  # noqa: E402
from chainer_ext import RecomputeHook, peak_memory, trace  # noqa: E402
from chainer_ext_nets import make, step  # noqa: E402
from lowerset import cli  # noqa: E402


def test_traced_graph_through_the_command_line(tmp_path):
    model, x, t, lossfn = make("resnet", batch=16)
    with chainer.using_config("train", True):
        g = trace(lambda: lossfn(model, x, t))
    graph_json = tmp_path / "resnet.json"
    lowerset.save_graph(g, graph_json)
    plain = lowerset.schedule(g).peak
    least = lowerset.min_peak(g, "approx").schedule.peak
    budget = (plain + least) // 2
    out, err = io.StringIO(), io.StringIO()
    old, sys.stderr = sys.stderr, err
    try:
        status = cli.main(["plan", str(graph_json), "--budget", str(budget), "--method",
                           "approx", "-o", str(tmp_path / "plan.json")], out=out)
    finally:
        sys.stderr = old
    assert status == 0, err.getvalue()
    data = json.loads((tmp_path / "plan.json").read_text())
    assert data["graph"]["facts"] is not None  # the executor model used the traced facts
    s = lowerset.load_strategy(tmp_path / "plan.json", graph=g)
    assert s.schedule.peak <= budget < plain
    assert s.schedule.timeline.tolist() == lowerset.schedule(s).timeline.tolist()
    hook = RecomputeHook(s)
    rep = peak_memory(lambda: step(model, x, t, lossfn, hook), params=model)
    assert hook.last_iteration["recomputed"] == list(s.schedule.recomputed)
    assert rep.peak + g.facts.resident <= 1.05 * budget
