"""Plan to a device budget: the planner against every alternative, measured on real steps.

For each network at the CPU preset of ``reproduce_table1.py``, the traced graph's plain step
has a predicted peak P (``lowerset.schedule(graph).peak``, bytes of the whole step: parameters,
inputs, activations, gradients, workspace). At B = 0.9 P, 0.75 P, 0.6 P, midway between P and
the planner's least peak, and at that least peak, this script plans with
``lowerset.solve(graph, budget=B, method=...)`` and compares
its overhead (what the schedule recomputes, cost units) with the best alternative whose
predicted peak fits B:

- Chen's sqrt(n) (``lowerset.baselines.chen_sqrtn``);
- the paper's DP (eq. 2), time- and memory-centric, at ``--alt-budgets`` eq. (2) budgets spaced
  geometrically from its minimal budget to the eq. (2) peak of [V], same method;
- optionally the strategies of an earlier ladder search (``--legacy FILE``: JSON of lower-set
  sequences per ``network/method``, labels = forward positions).

Then it runs one real hooked step with our plan and measures its peak (``peak_memory`` plus the
resident parameters and inputs) and checks that the loss and every gradient are bitwise equal to
a plain step. Writes ``budgets.md`` and ``budgets.json`` to ``--out``.

Example::

    .venv/bin/python examples/bench_budgets.py --networks resnet50 vgg19
"""

import argparse
import contextlib
import gc
import json
import pathlib
import sys
import time
import warnings

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    # chainer_ext first: it applies its fixes for NumPy 2 / Python 3.12 before importing Chainer
    from chainer_ext import RecomputeHook, peak_memory

    # isort: split
    import chainer

import numpy as np  # noqa: E402

import lowerset  # noqa: E402
from examples._machine import machine_line  # noqa: E402
from examples.models import NETWORKS  # noqa: E402
from examples.reproduce_table1 import PRESETS  # noqa: E402

FRACTIONS = (0.9, 0.75, 0.6)
TOLERANCE = 0.03


def alternatives(g, method, n_budgets, legacy):
    """Named alternative strategies: Chen's, the paper's DP at a ladder, the legacy search."""
    out = [("Chen's sqrt(n)", lowerset.baselines.chen_sqrtn(g))]
    lo = lowerset.min_budget(g, method)
    hi = lowerset.CanonicalStrategy(g, [set(g.labels)]).peak_memory
    for i in range(n_budgets):
        b = int(lo * (hi / lo) ** (i / max(1, n_budgets - 1)))
        for mode, tag in (("time", "TC"), ("memory", "MC")):
            out.append((f"paper {tag} @{b / 1e9:.3f} GB",
                        lowerset.dp.solve(g, b, mode=mode, method=method)))
    if legacy is not None:
        out.append(("ladder search (solve_liveness)",
                    lowerset.CanonicalStrategy(g, [set(L) for L in legacy["lower_sets"]])))
    return out


def best_alternative(alts, budget):
    fits = [(s.schedule.recompute_cost, s.schedule.peak, name) for name, s in alts
            if s.schedule.peak <= budget]
    return min(fits) if fits else None


def step_fn(net, model, x, t, hook):
    def step():
        model.cleargrads()
        np.random.seed(0)
        with chainer.using_config("train", True), (hook or contextlib.nullcontext()):
            loss = net.loss(model, x, t)
            loss.backward()
        return loss
    return step


def run_step(net, model, x, t, hook):
    """Loss and gradients of one step (copies), then the measured peak of another."""
    loss = step_fn(net, model, x, t, hook)()
    grads = {k: p.grad.copy() for k, p in model.namedparams() if p.grad is not None}
    out = (loss.array.copy(), grads)
    del loss
    gc.collect()
    rep = peak_memory(step_fn(net, model, x, t, hook), params=model)
    return out, rep.peak


def same(a, b):
    return (a[0].tobytes() == b[0].tobytes() and a[1].keys() == b[1].keys()
            and all(a[1][k].tobytes() == b[1][k].tobytes() for k in a[1]))


def run_network(name, methods, n_budgets, legacy):
    batch, size = PRESETS["cpu"][name]
    net = NETWORKS[name]
    model, x, t, g = net.traced(batch, size)
    resident = g.facts.resident
    plain = lowerset.schedule(g).peak
    ref, plain_meas = run_step(net, model, x, t, None)
    rows = []
    for method in methods:
        t0 = time.perf_counter()
        lowerset.pareto(g, method)  # the front that solve and min_peak read from its cache
        planner_s = time.perf_counter() - t0
        alts = alternatives(g, method, n_budgets, (legacy or {}).get(f"{name}/{method}"))
        least = lowerset.min_peak(g, method).schedule.peak
        budgets = [(f"{f:.2f} x plain", int(f * plain)) for f in FRACTIONS]
        budgets += [("midway", (least + plain) // 2), ("min peak", least)]
        for label, B in budgets:
            row = {"network": name, "method": method, "budget_label": label, "budget": B,
                   "plain_predicted": plain, "plain_measured": plain_meas + resident,
                   "planner_s": planner_s}
            try:
                s = lowerset.solve(g, budget=B, method=method)
            except lowerset.InfeasibleBudgetError as e:
                row["infeasible"] = e.min_budget
                rows.append(row)
                continue
            alt = best_alternative(alts, B)
            got, meas = run_step(net, model, x, t, RecomputeHook(s))
            row.update(overhead=s.schedule.recompute_cost, predicted=s.schedule.peak,
                       measured=meas + resident, bitwise=same(ref, got),
                       fits=meas + resident <= B * (1 + TOLERANCE),
                       alt_min_peak=min(a.schedule.peak for _, a in alts))
            if alt is not None:
                row.update(alt_overhead=alt[0], alt_peak=alt[1], alt_name=alt[2],
                           not_worse=row["overhead"] <= alt[0])
            rows.append(row)
    return rows


def table(rows):
    out = ["| network | method | B (GB) | ours: overhead | best alternative: overhead (name) | "
           "predicted (GB) | measured (GB) | fits B (+3%) | bitwise | planner s |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        B = f"{r['budget'] / 1e9:.3f} ({r['budget_label']})"
        if "infeasible" in r:
            out.append(f"| {r['network']} | {r['method']} | {B} | infeasible (min "
                       f"{r['infeasible'] / 1e9:.3f}) | | | | | | |")
            continue
        alt = (f"{r['alt_overhead']} ({r['alt_name']})" if "alt_overhead" in r
               else "none fits")
        out.append(f"| {r['network']} | {r['method']} | {B} | {r['overhead']} | {alt} | "
                   f"{r['predicted'] / 1e9:.3f} | {r['measured'] / 1e9:.3f} | "
                   f"{'yes' if r['fits'] else 'NO'} | {'yes' if r['bitwise'] else 'NO'} | "
                   f"{r['planner_s']:.2f} |")
    return "\n".join(out)


def markdown(data):
    """The Markdown of a run's JSON: the machine, the command and :func:`table`.

    Parameters
    ----------
    data : dict or list
        ``{"machine", "command", "rows"}`` as :func:`main` writes it, or the bare list of rows
        that earlier runs wrote (their machine and command read "not recorded").

    Returns
    -------
    str
        The page's Markdown.
    """
    if isinstance(data, list):
        data = {"rows": data}
    return (f"Machine: {data.get('machine', 'not recorded')}.\n\n"
            f"Command: `{data.get('command', 'not recorded')}`.\n\n{table(data['rows'])}\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--networks", nargs="+", default=list(PRESETS["cpu"]),
                    choices=sorted(NETWORKS))
    ap.add_argument("--methods", nargs="+", default=["exact", "approx"],
                    choices=["exact", "approx"])
    ap.add_argument("--alt-budgets", type=int, default=24)
    ap.add_argument("--legacy", type=pathlib.Path, help="JSON of earlier strategies")
    ap.add_argument("--out", type=pathlib.Path, default=ROOT / "results")
    args = ap.parse_args(argv)
    legacy = json.loads(args.legacy.read_text()) if args.legacy else None
    rows = []
    for name in args.networks:
        rows += run_network(name, args.methods, args.alt_budgets, legacy)
        print(table([r for r in rows if r["network"] == name]), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    command = "examples/bench_budgets.py " + " ".join(sys.argv[1:] if argv is None else argv)
    data = {"machine": machine_line(), "command": command, "rows": rows}
    text = markdown(data)
    (args.out / "budgets.md").write_text(text)
    (args.out / "budgets.json").write_text(json.dumps(data, indent=1))
    print(text)
    bad = [r for r in rows if "overhead" in r and not (r["fits"] and r["bitwise"]
                                                      and r.get("not_worse", True))]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
