#!/usr/bin/env bash
# Set up the environments if needed, then run the whole test suite (extra arguments go to pytest):
# everything in .venv (Chainer, the planner; the PyTorch tests skip there), then the PyTorch
# front end's tests and doctests in .venv-torch (PyTorch cannot share Chainer's environment:
# see scripts/venv_torch.sh).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/venv.sh"
source "$ROOT/scripts/venv_torch.sh"
cd "$ROOT"
"$ROOT/.venv/bin/python" -m pytest "$@"
# KINETO_LOG_LEVEL=5 keeps the profiler from printing a line at each start and stop
KINETO_LOG_LEVEL=5 "$ROOT/.venv-torch/bin/python" -m pytest -p no:cacheprovider \
    tests/torch_ext torch_ext "$@"
