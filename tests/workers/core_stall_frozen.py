"""One rank freezes itself (SIGSTOP) while the others wait in an all-reduce with it.

argv[1]: the rank that freezes. Every rank first prints "rank R pid P" and does one
all-reduce with the others; then the frozen rank stops, and each live rank prints
"rank R waits T0" (time.monotonic(), comparable across processes of one host) and, once the
stall inspector ends the job, "rank R raised T1 <message>". Then every rank waits to be killed by the test: MPI's
teardown would wait for the frozen rank, and a rank leaving early would make mpirun end
the others before they have spoken.
"""
import os
import signal
import sys
import time

import numpy as np

import hvdlite as hvd

frozen = int(sys.argv[1]) % 3
hvd.init()
rank = hvd.rank()
print(f"rank {rank} pid {os.getpid()}", flush=True)
hvd.allreduce(np.ones(2, np.float32), name="warmup")
if rank == frozen:
    os.kill(os.getpid(), signal.SIGSTOP)
    time.sleep(600)
print(f"rank {rank} waits {time.monotonic():.3f}", flush=True)
try:
    hvd.allreduce(np.ones(2, np.float32), name="fc.weight")
except hvd.HvdliteShutdownError as e:
    print(f"rank {rank} raised {time.monotonic():.3f} {e}", flush=True)
time.sleep(600)
