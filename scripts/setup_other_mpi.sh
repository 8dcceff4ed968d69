#!/usr/bin/env bash
# Installs hvdlite's wheel (dist/, from scripts/build_wheel.sh: the same wheel for every MPI,
# nothing is rebuilt) with another MPI in its own environment under build/, for testing:
#   bash scripts/setup_other_mpi.sh mpich      # MPICH from its PyPI wheel (Hydra's mpiexec)
#   bash scripts/setup_other_mpi.sh openmpi4   # Debian's Open MPI 4.1, unpacked (not installed)
#   bash scripts/setup_other_mpi.sh impi       # Intel MPI from its PyPI wheel (impi-rt)
# Prints the path of a file to `source` that activates that environment. Safe to run again.
# Open MPI 4.1 is unpacked with dpkg -x into a private prefix rather than installed with
# apt-get, so that its libmpi.so.40 never shadows the Open MPI 5 wheel's on this machine.
set -euo pipefail
cd "$(dirname "$0")/.."
which=${1:?usage: setup_other_mpi.sh mpich|openmpi4|impi}
root=$PWD/build/mpi-$which
venv=$root/venv
PY=${PYTHON:-python3}
mkdir -p "$root"
[ -x "$venv/bin/python" ] || "$PY" -m venv "$venv"
"$venv/bin/pip" install --disable-pip-version-check -q numpy pytest pytest-timeout pytest-rerunfailures pytest-xdist
activate=$root/activate.sh
case "$which" in
  mpich)
    "$venv/bin/pip" install --disable-pip-version-check -q mpich
    printf '. %q\n' "$venv/bin/activate" > "$activate"
    ;;
  impi)
    "$venv/bin/pip" install --disable-pip-version-check -q impi-rt
    # What Intel's vars.sh would set: the wheel's launcher scripts keep a placeholder for
    # their install directory, filled in from I_MPI_ROOT, and libmpi loads libfabric (the
    # transport between hosts) by name at MPI_Init.
    printf '. %q\nexport I_MPI_ROOT=%q\nexport LD_LIBRARY_PATH=%q${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}\n' \
      "$venv/bin/activate" "$venv" "$venv/lib" > "$activate"
    ;;
  openmpi4)
    prefix=$root/prefix
    if [ ! -x "$prefix/usr/bin/orterun" ]; then
      mkdir -p "$root/debs"
      # The packages and the libraries they need that a minimal Debian 12 lacks.
      pkgs="libopenmpi3 openmpi-bin openmpi-common libpmix2 libhwloc15
            libhwloc-plugins libevent-pthreads-2.1-7 libfabric1 libibverbs1 libnl-3-200
            libnl-route-3-200 libpsm-infinipath1 libpsm2-2 libucx0 librdmacm1 libxnvctrl0 libmunge2"
      (cd "$root/debs" && apt-get download $pkgs 2>/dev/null) || {
        apt-get update -q >/dev/null && (cd "$root/debs" && apt-get download $pkgs); }
      for deb in "$root"/debs/*.deb; do dpkg -x "$deb" "$prefix"; done
      # What Debian's alternatives would link.
      for tool in mpirun mpiexec; do ln -sf "$tool.openmpi" "$prefix/usr/bin/$tool"; done
    fi
    lib=$prefix/usr/lib/x86_64-linux-gnu
    cat > "$activate" <<ENV
. $venv/bin/activate
export OPAL_PREFIX=$prefix/usr
export PMIX_INSTALL_PREFIX=$lib/pmix2
export PMIX_MCA_mca_base_component_path=$lib/pmix2/lib/pmix
export OMPI_MCA_mca_base_component_show_load_errors=0
export PATH=$prefix/usr/bin:\$PATH
export LD_LIBRARY_PATH=$lib/openmpi/lib:$lib:$prefix/lib/x86_64-linux-gnu\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
ENV
    ;;
  *) echo "setup_other_mpi.sh: unknown MPI '$which' (mpich, openmpi4 or impi)" >&2; exit 2 ;;
esac
# The checkout's wheel for this environment's Python (scripts/setup.sh built it).
wheel=$(ls -t dist/hvdlite-*.whl 2>/dev/null | head -1 || true)
[ -n "$wheel" ] || { echo "setup_other_mpi.sh: no wheel in dist/: run scripts/build_wheel.sh" >&2; exit 1; }
"$venv/bin/pip" install --disable-pip-version-check -q --force-reinstall --no-deps \
  --no-index --find-links dist hvdlite
echo "$activate"
