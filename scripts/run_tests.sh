#!/usr/bin/env bash
# Set up (first time) and run the whole test suite: core at 1, 2 and 3 ranks, launcher,
# PyTorch and TensorFlow adapters. Every multi-process launch has a hard timeout.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PY=${PYTHON:-python3}
# The interpreter's own bin/ first, so that hvdlite-run and mpirun are the ones installed with
# it even when its environment is not activated.
PATH="$("$PY" -c 'import os, sys; print(os.path.dirname(sys.executable))'):$PATH"
export PATH
# --durations: the slowest tests, to keep CI under its time budget
exec "$PY" -m pytest tests -v --timeout=900 --durations=20 "$@"
