#!/usr/bin/env bash
# Create (or reuse) the PyTorch environment at .venv-torch in the repo root: lowerset with its
# torch, test, examples, hf, optimum and lint extras (torch 2.13.0, the CPU build on this
# machine's disk, highspy for lowerset.optimum in examples/bench_floor.py,
# torchvision 0.28.0, transformers 5.24.0, and mypy for torch_ext's type check). Sourced by
# scripts/test.sh, scripts/bench_torch.sh and scripts/lint.sh.
#
# PyTorch has an environment of its own because it cannot share Chainer's: torch 2.13 requires
# setuptools>=77, and `import chainer` 7.8.1 needs setuptools<74 (scripts/constraints.txt).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV_TORCH="$ROOT/.venv-torch"
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
unset PIP_CONSTRAINT PIP_BUILD_CONSTRAINT
export PIP_DISABLE_PIP_VERSION_CHECK=1
if [ ! -x "$VENV_TORCH/bin/python" ]; then
    "$PY" -m venv "$VENV_TORCH"
fi
STAMP="$VENV_TORCH/.lowerset-installed"
WANT="$(cat "$ROOT/setup.cfg" "$ROOT/pyproject.toml" "$ROOT/scripts/venv_torch.sh" \
    | sha256sum | cut -d' ' -f1)"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
    # the CPU build first, so that torchvision's torch==2.13.0 is met by it, not by PyPI's
    # CUDA build (pip takes 2.13.0+cpu from the machine's wheel folder)
    "$VENV_TORCH/bin/python" -m pip install --quiet "torch==2.13.0"
    "$VENV_TORCH/bin/python" -m pip install --quiet -e "$ROOT[torch,test,examples,hf,optimum,lint]"
    echo "$WANT" > "$STAMP"
fi
