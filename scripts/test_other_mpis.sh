#!/usr/bin/env bash
# The core suite and the launcher tests against MPIs other than the Open MPI 5 wheel:
# MPICH (PyPI wheel; also the two-host tests) and Open MPI 4.1 (Debian's packages). Each is
# built into its own environment by scripts/setup_other_mpi.sh. HVDLITE_OTHER_MPIS picks
# (default: both). Open MPI 4.1 skips the two-host tests: unpacked into a private prefix, its
# daemons cannot start on the other host (a system-wide install would not have that problem).
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
for mpi in ${HVDLITE_OTHER_MPIS:-mpich openmpi4}; do
  echo "=== hvdlite against $mpi"
  activate=$(bash scripts/setup_other_mpi.sh "$mpi" | tail -1)
  ( . "$activate" && OMP_NUM_THREADS=1 python -m hvdlite --check-build | sed -n '/controllers/,/mpirun/p' &&
    tests="tests/test_core.py tests/test_launcher.py"
    [ "$mpi" = mpich ] && tests="$tests tests/multihost"
    OMP_NUM_THREADS=1 python -m pytest $tests -q --timeout=900 ) || status=1
done
exit $status
