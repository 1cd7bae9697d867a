#!/usr/bin/env bash
# Create (or reuse) the virtual environment at .venv in the repo root and install the project
# with every extra that runs on a CPU (chainer, mpi, test, examples, optimum, lint) and chainercv.
# Sourced by scripts/main.sh and scripts/test.sh.
#
# The pins of scripts/constraints.txt apply to this environment only (the measured setup of the
# README); the planner-only environment of scripts/test_planner.sh has none.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
export PIP_CONSTRAINT="$ROOT/scripts/constraints.txt"
export PIP_BUILD_CONSTRAINT="$ROOT/scripts/constraints.txt"
export PIP_DISABLE_PIP_VERSION_CHECK=1
if [ ! -x "$ROOT/.venv/bin/python" ]; then
    "$PY" -m venv "$ROOT/.venv"
fi
STAMP="$ROOT/.venv/.lowerset-installed"
WANT="$(cat "$ROOT/setup.cfg" "$ROOT/pyproject.toml" "$ROOT/scripts/constraints.txt" \
    "$ROOT/scripts/venv.sh" "$ROOT/scripts/chainercv.py" | sha256sum | cut -d' ' -f1)"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
    "$ROOT/.venv/bin/python" -m pip install --quiet "setuptools<74" wheel
    "$ROOT/.venv/bin/python" -m pip install --quiet -e "$ROOT[chainer,mpi,test,examples,optimum,lint]"
    # chainercv 0.13.1 does not build from PyPI on Python >= 3.9; this builds it (see the script)
    "$ROOT/.venv/bin/python" "$ROOT/scripts/chainercv.py"
    echo "$WANT" > "$STAMP"
fi
