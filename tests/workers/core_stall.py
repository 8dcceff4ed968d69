"""Rank 0 waits on a tensor that rank 1 submits late: rank 0 warns (naming it) and then
completes normally once rank 1 catches up. Run with HVDLITE_STALL_CHECK_TIME_SECONDS=1."""
import time

import numpy as np

import hvdlite as hvd

hvd.init()
if hvd.rank() == 1:
    time.sleep(3)
got = hvd.allreduce(np.ones(2, np.float32), op=hvd.Sum, name="late.tensor")
assert (got == hvd.size()).all()
hvd.shutdown()
print("done", flush=True)
