#!/usr/bin/env bash
# Set up the planner-only environment .venv-planner if needed, then run the examples of the
# manual's framework-free pages and the test suite in it (extra arguments go to the suite's
# pytest). CI runs it after ./scripts/test.sh.
#
# It installs lowerset with its test and optimum extras only: numpy, numba and networkx as
# setup.cfg asks, highspy (lowerset.optimum),
# the newest NumPy 2 that numba supports, no Chainer and no constraints file. The tests that need
# Chainer skip themselves there (conftest.py), so what runs is the planner's tests and doctests
# and tests/test_packaging.py, which checks that chainer_ext then raises an ImportError naming
# the extra to install. Python: $PYTHON_PLANNER, else the newest Python >= 3.10 found on PATH or
# among pyenv's versions, else python3.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv-planner"
PY="${PYTHON_PLANNER:-}"
if [ -z "$PY" ]; then
    PYENV_PYS="$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[0-9]*/bin/python3 2>/dev/null \
        | sort -V -r || true)"
    # shellcheck disable=SC2086
    for cand in python3.14 python3.13 python3.12 $PYENV_PYS python3.11 python3.10 python3; do
        if command -v "$cand" >/dev/null 2>&1 && "$cand" -c "import venv" >/dev/null 2>&1; then
            PY="$cand"
            break
        fi
    done
fi
if [ -z "$PY" ]; then
    echo "scripts/test_planner.sh: no Python >= 3.10 found; set PYTHON_PLANNER" >&2
    exit 1
fi
unset PIP_CONSTRAINT PIP_BUILD_CONSTRAINT
export PIP_DISABLE_PIP_VERSION_CHECK=1
if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
fi
STAMP="$VENV/.lowerset-installed"
WANT="$(cat "$ROOT/setup.cfg" "$ROOT/pyproject.toml" "$ROOT/scripts/test_planner.sh" \
    | sha256sum | cut -d' ' -f1)"
if [ ! -f "$STAMP" ] || [ "$(cat "$STAMP")" != "$WANT" ]; then
    "$VENV/bin/python" -m pip install --quiet --upgrade -e "$ROOT[test,optimum]" "numpy>=2"
    echo "$WANT" > "$STAMP"
fi
"$VENV/bin/python" - <<'PYEOF'
import importlib.util, sys
import numpy, numba
missing = importlib.util.find_spec("chainer") is None
print(f"planner-only environment: Python {sys.version.split()[0]}, numpy {numpy.__version__}, "
      f"numba {numba.__version__}, chainer {'absent' if missing else 'PRESENT'}")
if not missing or int(numpy.__version__.split(".")[0]) < 2:
    sys.exit("scripts/test_planner.sh: .venv-planner must have NumPy 2 and no Chainer; "
             "delete .venv-planner and run the script again")
PYEOF
cd "$ROOT"
# a numba cache of its own: the one in lowerset/__pycache__ may be compiled against NumPy 1.x
export NUMBA_CACHE_DIR="$VENV/numba-cache"
# the examples of the manual's pages that need neither PyTorch nor Chainer (the concepts, and the
# guides to budgets, planning and files), as doctests (docs/conftest.py gives them lowerset and
# GRAPHS; the whole site's examples run in scripts/docs.sh); a few seconds
"$VENV/bin/python" -m pytest -p no:cacheprovider -q --doctest-glob='*.md' docs/concepts/*.md \
    docs/guides/budgets.md docs/guides/planning.md docs/guides/files.md docs/which-function.md
# tests and lowerset (not setup.cfg's testpaths, which name chainer_ext for its doctests)
exec "$VENV/bin/python" -m pytest -p no:cacheprovider tests lowerset "$@"
