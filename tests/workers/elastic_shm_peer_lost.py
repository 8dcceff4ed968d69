"""A peer lost in the middle of a shared-memory all-reduce (2 ranks on one host).

Both ranks start a 256 MiB all-reduce, which at 2 ranks on one host runs through shared
memory (csrc/shm_allreduce.h) and takes tens of milliseconds; rank 1 is SIGKILLed a few
milliseconds into it. Shared memory never reports a dead peer, so rank 0 must learn of it
from its wait policy (a receive posted from the peer): its all-reduce fails with
HvdliteRanksLostError instead of waiting forever, and after the rebuild it goes on alone.
"""
import os
import signal
import threading
import time

import numpy as np

import hvdlite as hvd
from hvdlite import _core

hvd.init()
assert hvd.size() == 2 and hvd.local_size() == 2, (hvd.size(), hvd.local_size())
x = np.ones(64 << 20, dtype=np.float32)
hvd.allreduce_(x, op=hvd.Sum, name="warm")
assert x[0] == 2.0 and x[-1] == 2.0, x
if hvd.rank() == 1:
    threading.Timer(0.005, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
start = time.monotonic()
try:
    hvd.allreduce_(x, op=hvd.Sum, name="big")
    raise AssertionError(f"rank {hvd.rank()}: the all-reduce with a dead peer succeeded")
except hvd.HvdliteRanksLostError as e:
    assert "a rank of the job was lost" in str(e), e
    error = str(e)
waited = time.monotonic() - start
assert _core.rebuild() == [1]
y = hvd.allreduce(np.array([3.0]), op=hvd.Sum, name="after")
assert hvd.size() == 1 and y[0] == 3.0, (hvd.size(), y)
print(f"rank 0 noticed the lost peer after {waited:.3f} s and went on alone ({error})", flush=True)
