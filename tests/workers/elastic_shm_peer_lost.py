"""A peer lost in the middle of a shared-memory all-reduce (2 or more ranks on one host).

Every rank runs 256 MiB all-reduces, which with all ranks on one host go through shared
memory (csrc/algorithms/shm_allreduce.h) and take tens of milliseconds each; the last rank is
SIGKILLed a third of one call's time after they start. Shared memory never reports a dead peer, so the others
must learn of it from their wait policy (a receive posted from each peer): their all-reduce
fails with HvdliteRanksLostError instead of waiting forever, and after the rebuild they go on
without it.
"""
import os
import signal
import threading
import time

import numpy as np

import hvdlite as hvd
from hvdlite import _core

hvd.init()
N = hvd.size()
assert N >= 2 and hvd.local_size() == N, (N, hvd.local_size())
x = np.ones(64 << 20, dtype=np.float32)
_core.transport_stats(reset=True)
hvd.allreduce_(x, op=hvd.Sum, name="warm")
assert x[0] == N and x[-1] == N, x
# One call (3 ranks), or the pipeline's pieces (2 ranks): lanes beyond the first per call.
s = _core.transport_stats(reset=True)
print(f"rank {hvd.rank()} ran its warm-up in "
      f"{1 + s['shared_memory_extra_lanes'] // s['shared_memory_allreduces']} lane(s)", flush=True)
start = time.monotonic()
hvd.allreduce_(x, op=hvd.Sum, name="warm.timed")
warm = time.monotonic() - start
# The last rank dies a third into a transfer's time (past its negotiation); the others keep
# all-reducing until one call fails, so a kill that comes late on a busy machine still lands
# in one (the transfer takes most of each call).
delay = hvd.broadcast(np.array([max(0.005, warm / 3)]), root_rank=N - 1, name="delay")[0]
if hvd.rank() == N - 1:
    threading.Timer(delay, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
error = None
for call in range(200):
    start = time.monotonic()
    try:
        hvd.allreduce_(x, op=hvd.Sum, name="big")
    except hvd.HvdliteRanksLostError as e:
        assert "a rank of the job was lost" in str(e), e
        error = str(e)
        break
assert error is not None, f"rank {hvd.rank()}: 200 all-reduces with a peer killed succeeded"
waited = time.monotonic() - start
assert _core.rebuild() == [N - 1]
y = hvd.allreduce(np.array([3.0]), op=hvd.Sum, name="after")
assert hvd.size() == N - 1 and y[0] == 3.0 * (N - 1), (hvd.size(), y)
z = np.ones(1 << 20, dtype=np.float32)  # the survivors' own shared segment
hvd.allreduce_(z, op=hvd.Sum, name="after.big")
assert z[0] == N - 1 and z[-1] == N - 1, z
print(f"rank {hvd.rank()} noticed the lost peer after {waited:.3f} s (call {call}) and went on "
      f"with {N - 1} ({error})", flush=True)
