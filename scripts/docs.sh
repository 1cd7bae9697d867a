#!/usr/bin/env bash
# Build the documentation site (docs/) into docs/_build/html, run its examples as doctests and
# check its internal links, all with warnings as errors: a broken cross-reference, a page no
# toctree reaches or a failing example fails this script. Creates (or reuses) .venv-docs, the
# one environment that holds both front ends, so that every page's examples run and autodoc
# imports every public name: torch 2.13.0 (the CPU build on this machine's disk), Chainer 7.8.1
# and setuptools 80.9.0, the one range both accept (torch 2.13 asks for >= 77.0.3; Chainer's
# `import chainer` needs pkg_resources, gone from setuptools 81), and docs/requirements.txt.
# Extra arguments go to every sphinx-build call. Run by .ci/run.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv-docs"
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
unset PIP_CONSTRAINT PIP_BUILD_CONSTRAINT
export PIP_DISABLE_PIP_VERSION_CHECK=1
if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
fi
STAMP="$VENV/.lowerset-installed"
WANT="$(cat "$ROOT/setup.cfg" "$ROOT/pyproject.toml" "$ROOT/docs/requirements.txt" \
    "$ROOT/scripts/docs.sh" | sha256sum | cut -d' ' -f1)"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
    CONSTRAINTS="$(mktemp)"
    echo "setuptools==80.9.0" > "$CONSTRAINTS"
    export PIP_CONSTRAINT="$CONSTRAINTS"
    "$VENV/bin/python" -m pip install --quiet "setuptools==80.9.0" wheel
    "$VENV/bin/python" -m pip install --quiet "torch==2.13.0"
    # Chainer 7.8.1 is a source distribution; it builds with the setuptools installed above
    "$VENV/bin/python" -m pip install --quiet --no-build-isolation "chainer==7.8.1"
    "$VENV/bin/python" -m pip install --quiet -e "$ROOT[plot]" -r "$ROOT/docs/requirements.txt"
    unset PIP_CONSTRAINT
    rm -f "$CONSTRAINTS"
    echo "$WANT" > "$STAMP"
fi
cd "$ROOT"
# Chainer's import of pkg_resources warns; that warning is Chainer's, not the site's
export PYTHONWARNINGS="ignore::UserWarning:chainer._environment_check"
export KINETO_LOG_LEVEL=5
"$VENV/bin/python" docs/_ext/check_api.py
SPHINX=("$VENV/bin/python" -m sphinx -W --keep-going -q)
"${SPHINX[@]}" -b html docs docs/_build/html "$@"
"${SPHINX[@]}" -b doctest docs docs/_build/doctest "$@"
"${SPHINX[@]}" -b linkcheck docs docs/_build/linkcheck "$@"
echo "docs: docs/_build/html/index.html (doctests and internal links passed)"
