"""Started by one MPI's launcher with HVDLITE_MPI_LIBRARY naming another family's library:
init() must refuse on every rank (tests/test_mpi_library_loading.py)."""
import sys

import hvdlite
from hvdlite.mpi_library import HvdliteMpiLibraryError

try:
    hvdlite.init()
except HvdliteMpiLibraryError as e:
    sys.stdout.write(f"refused: {e}\n")   # one write: unbuffered ranks' lines must not interleave
    sys.stdout.flush()
else:
    raise AssertionError(f"init() accepted a library of another family: size {hvdlite.size()}")
