"""Every survivor of a SIGKILLed rank raises HvdliteRanksLostError (issue 20, at 3 and 4 ranks).

Usage: elastic_ranks_lost.py VICTIM. The ranks all-reduce 64 MiB in a loop (the ring, whose
MPI_Waitall reports a lost peer only in the requests' statuses); after two rounds the victim
SIGKILLs itself a few milliseconds into the third. Each survivor prints the class of what its
all-reduce raised and exits: 0 for HvdliteRanksLostError, 1 for any other class.
"""
import os
import signal
import sys
import threading

import numpy as np

import hvdlite as hvd

victim = int(sys.argv[1])
hvd.init()
R, N = hvd.rank(), hvd.size()
x = np.ones(16 << 20, dtype=np.float32)  # 64 MiB
for step in range(1000):
    if step == 2 and R == victim:
        threading.Timer(0.005, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
    try:
        hvd.allreduce_(x, op=hvd.Max, name="big")
    except hvd.HvdliteError as e:
        print(f"rank {R} at step {step} raised {type(e).__name__}: {e}", flush=True)
        if not isinstance(e, hvd.HvdliteRanksLostError):
            sys.exit(1)
        break
else:
    raise AssertionError(f"rank {R}: 1000 all-reduces went through; rank {victim} never died")
# Recovery itself (rebuild, the next step) is tested by test_elastic.py's training jobs.
