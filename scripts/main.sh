#!/usr/bin/env bash
# Set up .venv if needed, then run the main job: plan and run real networks with recomputation on
# the CPU and print the measured peak-memory table (Table 1 of the paper). Extra arguments go to
# examples/reproduce_table1.py (e.g. --networks resnet50 unet pspnet ... or --preset paper).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/venv.sh"
cd "$ROOT"
if [ "$#" -eq 0 ]; then
    set -- --preset cpu --networks unet resnet50 resnet152 vgg19 densenet161 googlenet
fi
exec "$ROOT/.venv/bin/python" examples/reproduce_table1.py "$@"
