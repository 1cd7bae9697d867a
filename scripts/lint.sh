#!/usr/bin/env bash
# The linter (ruff: 99 columns, sorted imports, unused names, pyflakes' errors, numpy-style
# docstrings; its rules are pyproject.toml's [tool.ruff]) over the packages, tests, examples
# and scripts, then the type checker (mypy over the packages pyproject.toml's [tool.mypy] lists,
# its `files`; then over torch_ext in .venv-torch, where torch is), then numpydoc's validation
# of the public modules' docstrings (its checks are pyproject.toml's [tool.numpydoc_validation]:
# every parameter in a Parameters section). Sets up .venv and .venv-torch
# if needed (scripts/venv.sh, scripts/venv_torch.sh). Extra arguments go to `ruff check`,
# e.g. --fix.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/venv.sh"
cd "$ROOT"
"$ROOT/.venv/bin/ruff" check "$@" lowerset torch_ext chainer_ext tests examples scripts
"$ROOT/.venv/bin/mypy"
source "$ROOT/scripts/venv_torch.sh"
"$ROOT/.venv-torch/bin/mypy" torch_ext
# the public modules: no file or folder name along the path starts with an underscore
mapfile -t PUBLIC < <(find lowerset torch_ext chainer_ext -name '*.py' -not -path '*/_*' | sort)
"$ROOT/.venv/bin/python" -m numpydoc lint "${PUBLIC[@]}"
