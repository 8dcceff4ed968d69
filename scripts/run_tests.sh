#!/usr/bin/env bash
# Set up (first time) and run the whole test suite: core at 1, 2 and 3 ranks, launcher,
# PyTorch and TensorFlow adapters. Every multi-process launch has a hard timeout.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# --durations: the slowest tests, to keep CI under its time budget
exec "${PYTHON:-python3}" -m pytest tests -v --timeout=900 --durations=20 "$@"
