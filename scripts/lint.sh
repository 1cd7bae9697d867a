#!/usr/bin/env bash
# The linter (ruff: 99 columns, sorted imports, unused names, pyflakes' errors, numpy-style
# docstrings; its rules are pyproject.toml's [tool.ruff]) over the packages, tests, examples
# and scripts, then the type checker (mypy over the packages pyproject.toml's [tool.mypy] lists,
# its `files`). Sets up .venv if needed (scripts/venv.sh). Extra arguments go to `ruff check`,
# e.g. --fix.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/venv.sh"
cd "$ROOT"
"$ROOT/.venv/bin/ruff" check "$@" lowerset torch_ext chainer_ext tests examples scripts
"$ROOT/.venv/bin/mypy"
