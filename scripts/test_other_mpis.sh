#!/usr/bin/env bash
# The core suite, the launcher tests and the MPI library's loading against MPIs other than the
# Open MPI 5 wheel, each with the same hvdlite wheel (nothing is rebuilt per MPI):
# MPICH (PyPI wheel), Intel MPI (PyPI wheels) and Open MPI 4.1 (Debian's packages, unpacked
# into a private prefix: the launcher starts its daemons on the other host with this side's
# paths). Each gets its own environment from scripts/setup_other_mpi.sh.
# HVDLITE_OTHER_MPIS picks (default: all three). Each also runs jobs across two hosts: the
# hierarchical all-reduce (exact, and 2/3 of the flat ring's bytes over the link), and MPICH
# the whole two-host suite, Intel MPI and Open MPI 4.1 (to keep CI short) one launch over ssh.
set -euo pipefail
cd "$(dirname "$0")/.."
status=0
for mpi in ${HVDLITE_OTHER_MPIS:-mpich impi openmpi4}; do
  echo "=== hvdlite against $mpi"
  activate=$(bash scripts/setup_other_mpi.sh "$mpi" | tail -1)
  hier=tests/test_hierarchical_multihost.py::test_two_hosts_two_ranks_each
  case "$mpi" in
    mpich) tests=(tests/multihost "$hier") ;;
    *) tests=(tests/multihost/test_two_hosts.py::test_host_list_over_ssh "$hier") ;;
  esac
  ( . "$activate" && OMP_NUM_THREADS=1 python -m hvdlite --check-build | sed -n '/controllers/,/mpirun/p' &&
    OMP_NUM_THREADS=1 python -m pytest tests/test_core.py tests/test_launcher.py \
      tests/test_mpi_library_loading.py -q --timeout=900 -n 2 --dist loadfile &&
    OMP_NUM_THREADS=1 python -m pytest "${tests[@]}" -q --timeout=900
  ) || status=1
done
exit $status
