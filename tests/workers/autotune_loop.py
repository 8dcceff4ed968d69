"""A training-like loop under HVDLITE_AUTOTUNE: each step all-reduces a model's worth of named
gradients (small and large) and checks every result exactly, so any round where ranks used
different fusion thresholds or ring piece sizes would show as a wrong sum or a hang. Rank 0
watches HVDLITE_AUTOTUNE_LOG for the final choice; the loop then runs 2 s more (the tuner
must hold still) and stops. Argument: the longest the loop may run, in seconds."""
import os
import sys
import time

import numpy as np

import hvdlite as hvd

limit = float(sys.argv[1])
hvd.init()
log = os.environ.get("HVDLITE_AUTOTUNE_LOG") or os.environ["HOROVOD_AUTOTUNE_LOG"]
shapes = [(64,), (1000,), (256, 256), (30000,), (512, 512), (10,)]
grads = [np.full(s, hvd.rank() + 1, np.float32) for s in shapes]
expected = sum(range(1, hvd.size() + 1))
start, converged_at, steps = time.monotonic(), None, 0
while True:
    handles = [hvd.allreduce_async(g, name=f"layer{i}", op=hvd.Sum) for i, g in enumerate(grads)]
    for h in handles:
        assert (hvd.synchronize(h) == expected).all()
    time.sleep(0.005)  # the step's compute
    steps += 1
    final = hvd.rank() == 0 and os.path.exists(log) and ",final," in "," + open(log).read().replace("\n", ",")
    # Rank 0 decides when to stop too (2 s after convergence, or the time is up), so every
    # rank stops after the same step.
    now = time.monotonic()
    stop = hvd.rank() == 0 and ((converged_at and now - converged_at > 2) or now - start > limit)
    done, stop = hvd.broadcast(np.array([final, stop], np.int32), root_rank=0, name="converged")
    if done and converged_at is None:
        converged_at = time.monotonic()
    if stop:
        break
hvd.shutdown()
print(f"steps {steps} converged {converged_at is not None}", flush=True)
