"""Make the three pictures of the README (``docs/images/``) with :mod:`lowerset.plot`.

- ``timeline.png``: ResNet50 at 64x64, batch 8, traced on the CPU, planned with
  ``lowerset.solve`` at a budget a quarter of the way from its least peak to the plain step's
  peak; a real
  step measured with ``chainer_ext.measure_timeline`` overlaid;
- ``pareto.png``: the authors' GoogLeNet graph, the planner's front with Chen's sqrt(n) and the
  paper's DP (time- and memory-centric at its minimal eq. (2) budget);
- ``plan_graph.png``: the ResNet50 plan of ``timeline.png`` drawn on its graph, with
  ``plan_graph.dot`` beside it.

Examples
--------
::

    .venv/bin/python examples/readme_pictures.py --out docs/images
"""

import argparse
import pathlib
import sys
import warnings

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import chainer

    import chainer_ext

import lowerset  # noqa: E402
from examples.models import NETWORKS  # noqa: E402
from lowerset import plot  # noqa: E402


def main(argv=None):
    """Write the pictures; print what each shows."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(ROOT / "docs" / "images"))
    p.add_argument("--graphs-dir", default=str(ROOT.parent / "shared" / "graphs"))
    a = p.parse_args(argv)
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)

    net = NETWORKS["resnet50"]
    model, x, t, g = net.traced(8, (64, 64))

    def loss():
        with chainer.using_config("train", True):
            return net.loss(model, x, t)

    plain = lowerset.schedule(g).peak
    least = lowerset.min_peak(g, "approx").schedule.peak
    budget = least + (plain - least) // 4  # close to the least peak: the plan recomputes
    s = lowerset.solve(g, budget=budget, method="approx")
    m = chainer_ext.measure_timeline(loss, s, params=model)
    ax = plot.timeline(s.schedule, budget=budget, measured=m, unit="MB",
                       title=f"ResNet50, 64x64, batch 8: plan within {budget / 1e6:.0f} MB "
                             f"(plain step {plain / 1e6:.0f} MB)")
    ax.figure.savefig(out / "timeline.png", dpi=100)
    print(f"timeline.png: predicted peak {s.schedule.peak} B, measured {m.peak} B, budget "
          f"{budget} B, plain {plain} B, {len(s.schedule.recomputed)} values recomputed")

    gg = lowerset.read_cg(pathlib.Path(a.graphs_dir) / "cg_googlenet.txt")
    front = lowerset.pareto(gg, "approx")
    others = {"Chen's sqrt(n)": lowerset.baselines.chen_sqrtn(gg),
              "paper ApproxDP+TC @min eq.(2)": lowerset.solve(gg, model="paper", mode="time",
                                                              method="approx"),
              "paper ApproxDP+MC @min eq.(2)": lowerset.solve(gg, model="paper",
                                                              mode="memory", method="approx")}
    ax = plot.pareto(front, others=others, title="GoogLeNet (authors' graph): overhead/peak")
    ax.figure.savefig(out / "pareto.png", dpi=100)
    print("pareto.png: " + ", ".join(f"({f.schedule.recompute_cost}, {f.schedule.peak})"
                                     for f in front))

    ax = plot.plan_graph(s, title=f"ResNet50 plan: {len(s)} segments, "
                                  f"{len(s.schedule.recomputed)} values recomputed")
    ax.figure.savefig(out / "plan_graph.png", dpi=90)
    plot.to_dot(s, out / "plan_graph.dot")
    print(f"plan_graph.png: {plot.node_states(s)}"[:300])


if __name__ == "__main__":
    main()
