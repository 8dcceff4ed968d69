"""Every survivor of a SIGKILLed rank raises HvdliteRanksLostError (issue 20, at 3 and 4 ranks).

Usage: elastic_ranks_lost.py VICTIM. The ranks all-reduce 64 MiB in a loop (the ring, whose
MPI_Waitall reports a lost peer only in the requests' statuses); after two rounds the victim
SIGKILLs itself a few milliseconds into the third. Each survivor prints the class of what its
all-reduce raised, and, when it is HvdliteRanksLostError, rebuilds and all-reduces once more
at the new size. A survivor that got another class exits 1.
"""
import os
import signal
import sys
import threading

import numpy as np

import hvdlite as hvd
from hvdlite import _core

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
assert _core.rebuild() == [victim]
y = hvd.allreduce(np.array([1.0]), op=hvd.Sum, name="after")
assert hvd.size() == N - 1 and y[0] == N - 1, (hvd.size(), y)
print(f"rank {R} went on as rank {hvd.rank()} of {hvd.size()}", flush=True)
