#!/usr/bin/env bash
# Set up (first time) and train a small CNN on scikit-learn's digits at 2 ranks.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "run_example: setting up (installs what is missing; the first run also builds hvdlite's wheel)" >&2
HVDLITE_SETUP=example bash scripts/setup.sh
PY=${PYTHON:-python3}
PATH="$("$PY" -c 'import os, sys; print(os.path.dirname(sys.executable))'):$PATH"
export PATH
# Same as `hvdlite-run -np 2 python examples/pytorch_digits.py` (works before a shell rehash).
exec "$PY" -m hvdlite.runner -np 2 "$PY" examples/pytorch_digits.py "$@"
