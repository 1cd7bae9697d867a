#!/usr/bin/env bash
# Set up .venv if needed, then run the whole test suite (extra arguments go to pytest).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$ROOT/scripts/venv.sh"
cd "$ROOT"
exec "$ROOT/.venv/bin/python" -m pytest "$@"
