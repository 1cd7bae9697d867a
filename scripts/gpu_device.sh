#!/usr/bin/env bash
# Run the Chainer executor on a lent GPU machine (the device tool's nvidia-h100-x1 / nvidia-h200).
#
# That machine has Python 3.12, NumPy 2, CuPy 14 (cupy-cuda13x, no cuDNN bindings), pytest,
# numba, networkx, tqdm and matplotlib, but no Chainer and no network. Chainer 7.8.1 travels as a
# wheel built here, with setuptools<74 for its `import pkg_resources` (only installed there if
# the machine's setuptools has no pkg_resources). Once, here, in the repo root:
#
#   echo /.whl/ >> .git/info/exclude
#   PIP_CONSTRAINT=scripts/constraints.txt PIP_BUILD_CONSTRAINT=scripts/constraints.txt \
#       .venv/bin/pip wheel --no-deps chainer==7.8.1 -w .whl
#   .venv/bin/pip download --no-deps --only-binary=:all: "setuptools<74" -d .whl
#
# Then call the device tool with carry [".whl"] and a command such as
#
#   PYTHONUNBUFFERED=1 bash scripts/gpu_device.sh all 2>&1 | tee $OUT/log
#   bash scripts/gpu_device.sh table1 --preset paper --device gpu --networks resnet50
#
# Subcommands (the install step runs first in each; it takes a few seconds):
#   check          versions, the GPU, and whether Chainer sees CuPy and cuDNN
#   tests [ARGS]   python -m pytest -p chainer_ext tests/chainer_ext -q -x ARGS (the tests marked
#                  gpu run on @cupy:0 there: the schedule against CuPy's pool high-water mark,
#                  CuPy's random draws replayed or pinned, verify, the enforced pool limit;
#                  `tests -m gpu` runs only those)
#   table1 ARGS    examples/reproduce_table1.py ARGS (default --out: $OUT/results or results/)
#   figure4 ARGS   examples/reproduce_figure4.py --preset gpu --device gpu ARGS (same --out);
#                  a network's largest-batch searches take 3-5 minutes there, so one network
#                  a call: figure4 --networks resnet50
#   torch [ARGS]   the CUDA tests of torch_ext (pytest -m gpu tests/torch_ext ARGS) with the
#                  machine's PyTorch, then examples/bench_torch.py --preset gpu (Chainer off
#                  the path)
#   all            everything above within ALL_SECONDS (default 540) in four parallel streams,
#                  each step cut off at the deadline: check; the Chainer GPU tests (no -x) then
#                  table1 for ResNet-50 at the paper's batch; the torch GPU tests then
#                  bench_torch --preset gpu for resnet50 and gpt; bench_torch for mlp (one timing
#                  round) and unet; table1 for the other six networks at the paper's batch, one
#                  call each (Chen's, ApproxDP+MC, ExactDP+TC and both least-peak plans).
#                  Writes check.log, chainer.log, torch.log, torch2.log, table1.log and
#                  results.tgz to $OUT
#                  (or gpu-results/). The times of a stream are measured with the others
#                  beside it on the same GPU. One device call of 600 s:
#                    bash scripts/gpu_device.sh all
#
# Chainer 7.8.1 does not import on NumPy 2 / Python 3.12 by itself: chainer_ext/_compat.py fixes
# that, and is applied when chainer_ext is imported. So this script imports chainer_ext before
# chainer: `pytest -p chainer_ext` for the tests (their `pytest.importorskip("chainer")` would
# otherwise skip them all), and a `runpy` wrapper for examples/reproduce_table1.py.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
SITE="${SITE:-/tmp/site}"
export PYTHONPATH="$SITE:$ROOT${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1

stamp() { echo "=== $(date +%T) $*"; }

install() {
    if [ ! -d "$SITE/chainer" ]; then
        local wheels=(.whl/chainer-7.8.1-*.whl)
        if ! "$PY" -c "import pkg_resources" >/dev/null 2>&1; then
            wheels+=(.whl/setuptools-*.whl)  # Chainer's _environment_check imports pkg_resources
        fi
        stamp "install ${wheels[*]} -> $SITE"
        "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target "$SITE" "${wheels[@]}" || { echo "install failed"; exit 1; }
    fi
}

check() {
    stamp check
    nvidia-smi -L || true
    "$PY" - <<'EOF'
import sys
print("python", sys.version.split()[0], sys.executable)
import numpy, cupy
print("numpy", numpy.__version__, "cupy", cupy.__version__,
      "devices", cupy.cuda.runtime.getDeviceCount())
import chainer_ext
from chainer_ext import _compat
import chainer
from chainer.backends import cuda
print("chainer", chainer.__version__, "from", chainer.__file__)
print("chainer_ext._compat fixes applied:", _compat.applied)
print("cuda.available", cuda.available, "cudnn_enabled", cuda.cudnn_enabled)
err = getattr(cuda, "_resolution_error", None)
if err is not None:
    print("chainer.backends.cuda._resolution_error:", type(err).__name__, err)
for mod in ("setuptools", "numba", "networkx", "pytest"):
    try:
        print(mod, __import__(mod).__version__)
    except Exception as e:
        print(mod, "unavailable:", e)
EOF
}

run_tests() {
    stamp "tests $*"
    "$PY" -m pytest -p chainer_ext tests/chainer_ext -q -x -p no:cacheprovider "$@"
}

run_torch() {
    # the machine's own PyTorch (python3 there holds it): the CUDA tests of torch_ext, then the
    # GPU preset of examples/bench_torch.py. Chainer stays off the path: conftest.py imports
    # chainer_ext wherever Chainer imports, and Chainer's warning that CuPy has no cuDNN is an
    # error under the repo's pytest filters
    stamp "torch $*"
    KINETO_LOG_LEVEL=5 PYTHONPATH="$ROOT" "$PY" -m pytest tests/torch_ext -q \
        -p no:cacheprovider -m gpu "$@"
    local rc=$?
    KINETO_LOG_LEVEL=5 PYTHONPATH="$ROOT" "$PY" examples/bench_torch.py --preset gpu \
        --out "${OUT:-$ROOT}/results" || rc=1
    return $rc
}

run_example() {
    # run_example SCRIPT ARGS: examples/SCRIPT with chainer_ext imported first (its _compat
    # fixes), --out defaulting to $OUT/results or results/
    local script="$1"; shift
    stamp "$script $*"
    local out=() dir="${OUT:+$OUT/results}"
    case " $* " in *" --out "*) ;; *) out=(--out "${dir:-$ROOT/results}") ;; esac
    "$PY" -c 'import runpy, sys, chainer_ext  # chainer_ext first: _compat fixes
sys.argv[0] = "examples/" + sys.argv.pop(1)
runpy.run_path(sys.argv[0], run_name="__main__")' "$script" "$@" "${out[@]}"
}

bounded() {
    # bounded SECONDS CMD...: CMD with at most SECONDS, and not past $DEADLINE
    local lim=$1 left
    shift
    left=$(( DEADLINE - $(date +%s) ))
    (( left < lim )) && lim=$left
    if (( lim < 5 )); then stamp "skipped at the deadline: $*"; return 1; fi
    stamp "[at most $lim s] $*"
    timeout -k 5 "$lim" "$@"
    local rc=$?
    stamp "rc=$rc $*"
    return $rc
}

run_all() {
    local out="${OUT:-$ROOT/gpu-results}" self="$ROOT/scripts/gpu_device.sh" m
    mkdir -p "$out/results"
    DEADLINE=$(( $(date +%s) + ${ALL_SECONDS:-540} ))
    check > "$out/check.log" 2>&1
    export KINETO_LOG_LEVEL=5
    (
        bounded 200 bash "$self" tests -m gpu --maxfail=30 -rA
        bounded 300 bash "$self" table1 --preset paper --device gpu --networks resnet50 \
            --methods chen approx-mc exact-tc exact-mp exact-ma --out "$out/results/table1"
    ) > "$out/chainer.log" 2>&1 &
    (
        bounded 120 env PYTHONPATH="$ROOT" "$PY" -m pytest tests/torch_ext -q \
            -p no:cacheprovider -m gpu -rA
        for m in resnet50 gpt; do
            bounded 220 env PYTHONPATH="$ROOT" "$PY" examples/bench_torch.py --preset gpu \
                --models "$m" --out "$out/results/torch_$m"
        done
    ) > "$out/torch.log" 2>&1 &
    (
        # the MLP's step takes about 4 s at its batch: one timing round fits the deadline
        bounded 300 env PYTHONPATH="$ROOT" "$PY" examples/bench_torch.py --preset gpu \
            --models mlp --rounds 1 --out "$out/results/torch_mlp"
        bounded 200 env PYTHONPATH="$ROOT" "$PY" examples/bench_torch.py --preset gpu \
            --models unet --out "$out/results/torch_unet"
    ) > "$out/torch2.log" 2>&1 &
    (
        for m in vgg19 unet googlenet resnet152 pspnet densenet161; do
            bounded 300 bash "$self" table1 --preset paper --device gpu --networks "$m" \
                --methods chen approx-mc exact-tc exact-mp exact-ma --time-limit 60 --out "$out/results/table1_$m"
        done
    ) > "$out/table1.log" 2>&1 &
    wait
    tar czf "$out/results.tgz" -C "$out" results && rm -rf "$out/results"
    stamp "done; logs and results.tgz in $out"
}

install
cmd="${1:-all}"
shift || true
case "$cmd" in
    check) check ;;
    tests) run_tests "$@" ;;
    table1) run_example reproduce_table1.py "$@" ;;
    figure4) run_example reproduce_figure4.py --preset gpu --device gpu "$@" ;;
    torch) run_torch "$@" ;;
    all) run_all ;;
    *) echo "usage: $0 [check|tests [PYTEST ARGS]|table1 ARGS|figure4 ARGS|torch [PYTEST ARGS]|all]"
       exit 2 ;;
esac
