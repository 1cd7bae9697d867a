"""Fine-tune a Hugging Face model under a byte budget: trace one step, plan it to the budget,
check the plan once, then train under it (the README's ten lines, runnable).

The model is GPT-2 built from a small config with random weights, so nothing is downloaded;
``AutoModelForCausalLM.from_pretrained(...)`` takes its place for a real checkpoint. Runs on
the CPU in a few seconds::

    python examples/finetune_hf.py [--budget-fraction 0.7] [--steps 3]
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--budget-fraction", type=float, default=0.9,
                    help="the budget as a fraction of the plain step's peak")
    ap.add_argument("--steps", type=int, default=3)
    args = ap.parse_args(argv)

    import torch

    import hf_models
    import lowerset
    import torch_ext

    model, step = hf_models.build("gpt2", "sdpa", size="test")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    graph = torch_ext.trace(step, model=model)                    # one real step
    budget = int(args.budget_fraction * lowerset.schedule(graph).peak)
    plan = lowerset.solve(graph, budget)                          # whole-step bytes
    assert torch_ext.verify(step, plan, model=model).ok           # bitwise, once
    for _ in range(args.steps):
        with torch_ext.RecomputeContext(plan, model=model):
            step().backward()
        optimizer.step()
        optimizer.zero_grad()
    print(f"plain step {lowerset.schedule(graph).peak:,} bytes; plan {plan.schedule.peak:,} "
          f"bytes within the budget of {budget:,}, recomputing "
          f"{plan.schedule.recompute_cost:,} of {graph.total_cost():,} cost units; "
          f"{args.steps} steps trained")
    return 0


if __name__ == "__main__":
    sys.exit(main())
