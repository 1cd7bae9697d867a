"""examples/bench_scale.py at tiny sizes: its rows, slopes, targets, report and picture."""

import json

import numpy as np
import pytest

import lowerset as ls
from examples import bench_scale as bs


@pytest.fixture(scope="module")
def rows():
    return bs.run_all(["transformer", "unet"], [30, 60], None, "approx", log=lambda s: None)


def test_rows(rows):
    assert [(r["family"], r["nodes"]) for r in rows] == [
        ("transformer", 34), ("transformer", 66), ("unet", 36), ("unet", 58)]
    for r in rows:
        assert r["complete"] and set(r["calls"]) == set(bs.CALLS)
        c = r["calls"]
        assert c["min_peak"]["peak"] <= c["solve_10"]["peak"] <= c["solve_10"]["budget"]
        assert c["solve_half"]["peak"] <= c["solve_half"]["budget"] < r["plain"]
        assert c["pareto"]["peak"] == c["min_peak"]["peak"] or c["pareto"]["front"] >= 1
        assert r["slowest"] == max(c[k]["seconds"] for k in bs.TIMED)
    json.dumps(rows)


def test_a_call_cut_at_its_time_limit_is_recorded():
    out = bs.run_all(["resnet"], [30], 1e-9, "approx", log=lambda s: None)
    calls = out[0]["calls"]
    assert calls["pareto"]["cut"] == "approx minimal budget"
    assert calls["pareto"]["peak"] <= out[0]["plain"]   # [V], Chen's, selective: no DP yet
    assert calls["solve_0.9"]["cut"] and calls["solve_0.9"]["peak"] <= calls["solve_0.9"]["budget"]
    assert "(cut)" in bs._cell(calls["pareto"])


def test_slopes_targets_report(rows, tmp_path):
    fake = [{"family": "f", "nodes": n, "complete": True, "slowest": 1e-3 * n, "memory": 1,
             "calls": {c: {"seconds": 1e-3 * n} for c in bs.CALLS}} for n in (100, 2500, 10000)]
    s = bs.fits(fake)
    assert s["f"]["slowest"] == pytest.approx(1.0)
    assert bs.targets(fake, s)["f"] == {"t2500": True, "t10000": True, "slope": True,
                                        "memory2500": True}
    # every size up to a target's node count counts: 1,000 nodes in 12 s misses 10 s
    slow = [dict(fake[0], nodes=1000, slowest=12.0)] + fake[1:]
    assert bs.targets(slow, bs.fits(slow))["f"]["t2500"] is False
    assert bs.targets(slow, bs.fits(slow))["f"]["t10000"] is True
    slopes = bs.fits(rows)
    text = bs.markdown(rows, slopes, bs.targets(rows, slopes), "test machine", 120)
    assert "| transformer | 34 |" in text and "up to 2,500 nodes: <= 10 s" in text
    assert "not measured" not in text   # every target has sizes up to its node count
    pytest.importorskip("matplotlib")
    bs.picture(rows, slopes, tmp_path / "p.png")
    assert (tmp_path / "p.png").read_bytes()[:4] == b"\x89PNG"


def test_the_traced_family_needs_torch(capsys):
    if bs.traced_graphs.available():
        pytest.skip("PyTorch is installed here: tests/torch_ext/test_traced_graphs.py runs it")
    with pytest.raises(SystemExit) as info:
        bs.main(["--families", "gpt", "--no-picture"])
    assert info.value.code == 2 and "PyTorch" in capsys.readouterr().err


def test_boundary_sum_by_hand_and_against_the_boundaries_of_the_prefixes():
    g = ls.Graph(list("abcd"), [("a", "b"), ("b", "c"), ("c", "d"), ("a", "d")],
                 cost=dict.fromkeys("abcd", 1), memory=dict.fromkeys("abcd", 1))
    assert bs.boundary_sum(g) == 1 + 2 + 2   # {a}, {a, b}, {a, b, c}: a stays until d
    assert bs.boundary_sum(ls.Graph.chain(5)) == 4
    rng = np.random.default_rng(0)
    for _ in range(20):
        n = int(rng.integers(2, 12))
        edges = [(i, j) for j in range(n) for i in range(j) if rng.random() < 0.3]
        g = ls.Graph(range(n), edges, cost=dict.fromkeys(range(n), 1),
                     memory=dict.fromkeys(range(n), 1))
        prefixes = [g.labels[:k] for k in range(1, g.n)]
        assert bs.boundary_sum(g) == sum(len(ls.boundary(g, p)) for p in prefixes)


def test_the_unets_long_skips_make_the_boundary_sum_grow_as_n_squared():
    def ratio(family):
        small, large = (bs.boundary_sum(bs.block_graphs.build(family, d)) for d in (20, 40))
        return large / small
    assert ratio("unet") > 3.5 and ratio("transformer") < 2.2
