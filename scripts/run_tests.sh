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
# Two test files at a time (pytest-xdist; --dist loadfile keeps each file's tests, in order, on
# one worker): the ranks of a test wait much of the time (launches, grace periods, sleeping
# peers), and a second file uses the cores the first leaves idle. On the 2-core development
# machine this takes the suite from 42 to 25 minutes. HVDLITE_TEST_WORKERS=0: one at a time.
# --durations: the slowest tests, to keep CI under its time budget.
exec "$PY" -m pytest tests -v --timeout=900 --durations=20 \
  -n "${HVDLITE_TEST_WORKERS:-2}" --dist loadfile "$@"
