"""Waits through shared memory sleep on the doorbell (csrc/transport/shm_doorbell.h).

The last rank arrives late at each all-reduce (it sleeps first); the others wait for it in
the negotiation round through shared memory. With HVDLITE_SHM_SLEEP_AFTER_US unset (50 us),
their waits go to sleep (counted in ``shared_memory_sleeps``) and burn little CPU; with 0 they
never sleep. Results must be exact either way. argv[1]: "sleeps" or "never".
"""
import sys
import time

import numpy as np

import hvdlite as hvd
from hvdlite import _core

mode = sys.argv[1]
hvd.init()
R, N = hvd.rank(), hvd.size()
LATE_S, ROUNDS = 0.03, 6
late = R == N - 1

for count in (8, 300_000):  # a small all-reduce and one through the shared area
    hvd.allreduce(np.zeros(count, np.float32), name=f"warm.{count}")
    _core.transport_stats(reset=True)
    waited_cpu = waited_wall = 0.0
    for k in range(ROUNDS):
        x = np.full(count, R + k, np.float32)
        if late:
            time.sleep(LATE_S)
        cpu, wall = time.process_time(), time.perf_counter()
        got = hvd.allreduce(x, op=hvd.Sum, name=f"late.{count}")
        waited_cpu += time.process_time() - cpu
        waited_wall += time.perf_counter() - wall
        assert np.array_equal(got, np.full(count, sum(r + k for r in range(N)), np.float32)), (count, k)
    sleeps = _core.transport_stats(reset=True)["shared_memory_sleeps"]
    if late:
        continue
    print(f"rank {R}: count {count} waited {waited_wall * 1e3:.1f} ms, cpu {waited_cpu * 1e3:.1f} ms, "
          f"{sleeps} sleeps", flush=True)
    assert waited_wall > 0.5 * ROUNDS * LATE_S, waited_wall  # it did wait for the late rank
    if mode == "never":
        assert sleeps == 0, sleeps
    else:
        assert sleeps >= ROUNDS, sleeps
        # Asleep, a waiting rank leaves its core: far less CPU than the wait lasted.
        assert waited_cpu < 0.5 * waited_wall, (waited_cpu, waited_wall)
hvd.shutdown()
if R == 0:
    print(f"shm_doorbell OK at {N} ranks ({mode})", flush=True)
