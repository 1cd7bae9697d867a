"""Fine-tune a Hugging Face model under a byte budget: trace a step of each branch of the
model's mask code (a batch without padding, a padded one), plan each to the budget, check the
plans once, then train under them (the README's lines, runnable).

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
    masks = [None, hf_models.padding_mask()]   # a batch without padding, one with

    # transformers skips the mask of a batch without padding: a trace and a plan per branch
    graphs = [torch_ext.trace(lambda: step(m), model=model) for m in masks]
    budget = int(args.budget_fraction * max(lowerset.schedule(g).peak for g in graphs))
    plans = [lowerset.solve(g, budget) for g in graphs]             # whole-step bytes
    for m in masks:                                                 # bitwise, once
        assert torch_ext.verify(lambda: step(m), plans, model=model).ok
    context = torch_ext.RecomputeContext(plans, model=model)
    for i in range(args.steps):
        with context:                          # runs the plan of the branch the batch takes
            step(masks[i % 2]).backward()
        optimizer.step()
        optimizer.zero_grad()
    for m, g, plan in zip(("without", "with"), graphs, plans):
        print(f"{m} padding: plain step {lowerset.schedule(g).peak:,} bytes; plan "
              f"{plan.schedule.peak:,} bytes within the budget of {budget:,}, recomputing "
              f"{plan.schedule.recompute_cost:,} of {g.total_cost():,} cost units")
    print(f"{args.steps} steps trained, batches with and without padding alternating")
    return 0


if __name__ == "__main__":
    sys.exit(main())
