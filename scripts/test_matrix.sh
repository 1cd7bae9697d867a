#!/usr/bin/env bash
# Reproduce a row of the README's "Tested versions" matrix: make a virtual environment in
# .venv-matrix/NAME with the given Python and pip requirements, install lowerset with EXTRAS
# (and chainercv when EXTRAS has chainer), then run pytest on PATHS.
#
#   scripts/test_matrix.sh NAME PYTHON EXTRAS "PIP SPECS" [PYTEST ARGS...]
#   scripts/test_matrix.sh py310-min /root/.pyenv/versions/3.10.13/bin/python3 test \
#       "numpy==1.23.5 numba==0.58.1 networkx==3.0" tests lowerset
#   scripts/test_matrix.sh py312-np2-chainer python3.12 chainer,mpi,test "numpy>=2" -q
#
# No constraints file but scripts/chainer-build-constraints.txt (setuptools<74, which Chainer's
# build and run time need). Each row prints its versions first.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ "$#" -lt 4 ]; then
    sed -n '2,12p' "$0"
    exit 2
fi
NAME="$1" PY="$2" EXTRAS="$3" SPECS="$4"
shift 4
VENV="$ROOT/.venv-matrix/$NAME"
export PIP_CONSTRAINT="$ROOT/scripts/chainer-build-constraints.txt"
export PIP_BUILD_CONSTRAINT="$PIP_CONSTRAINT"
export PIP_DISABLE_PIP_VERSION_CHECK=1
if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
    # shellcheck disable=SC2086
    "$VENV/bin/python" -m pip install --quiet -e "$ROOT[$EXTRAS]" $SPECS
    case ",$EXTRAS," in
        *,chainer,*) "$VENV/bin/python" "$ROOT/scripts/chainercv.py" ;;
    esac
fi
"$VENV/bin/python" - <<'PYEOF'
import importlib.metadata as md, sys
names = ["numpy", "numba", "networkx", "chainer", "chainercv", "setuptools", "mpi4py", "mpich",
         "torch", "torchvision"]
have = []
for n in names:
    try:
        have.append(f"{n} {md.version(n)}")
    except md.PackageNotFoundError:
        pass
print(f"matrix row: Python {sys.version.split()[0]}, " + ", ".join(have))
PYEOF
cd "$ROOT"
export NUMBA_CACHE_DIR="$VENV/numba-cache"
if [ "$#" -eq 0 ]; then
    set -- -q
fi
exec "$VENV/bin/python" -m pytest -p no:cacheprovider "$@"
