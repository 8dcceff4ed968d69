"""A few collectives and point-to-point on whichever MPI library was chosen
(tests/test_mpi_library_loading.py): prints the library's ABI family when all agree."""
import sys

import numpy as np

import hvdlite
from hvdlite import mpi_library

hvdlite.init()
r, n = hvdlite.rank(), hvdlite.size()
assert n >= 2, f"a world of {n}"
total = hvdlite.allreduce(np.full(1000, r + 1.0), op=hvdlite.Sum, name="lib.sum")
assert (total == n * (n + 1) / 2).all(), total[:3]
gathered = hvdlite.allgather(np.arange(r + 1, dtype=np.int64), name="lib.gather")
assert gathered.tolist() == [i for k in range(n) for i in range(k + 1)], gathered
root = hvdlite.broadcast(np.full(7, float(r)), root_rank=n - 1, name="lib.bcast")
assert (root == n - 1).all(), root
# One write: the ranks' stdout is unbuffered and Hydra does not tag lines, so a print of
# several pieces can interleave with the other rank's.
sys.stdout.write(f"collectives OK on the {mpi_library.load()['abi']} ABI\n")
sys.stdout.flush()
