"""The smallest job an install must run (scripts/check_wheel_install.sh, check_sdist_build.sh):
an all-reduce at every rank, numpy only."""
import sys

import numpy as np

import hvdlite

hvdlite.init()
out = hvdlite.allreduce(np.full(4, hvdlite.rank() + 1.0), op=hvdlite.Sum)
expected = hvdlite.size() * (hvdlite.size() + 1) / 2
assert (out == expected).all(), out
print(f"rank {hvdlite.rank()} of {hvdlite.size()}: all-reduce OK ({sys.argv[1] if len(sys.argv) > 1 else ''})")
