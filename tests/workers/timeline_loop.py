"""A known training loop traced by the timeline: per step, three named gradients (two small
ones fused together, one large enough to be reduced in place) and one fp16-compressed one,
plus a reduce-scatter, and a broadcast at the start. Rank 1 submits 'grad.late' late at step 0 (when it goes through the
coordinator) and at step 2 (when it is negotiated on the cached path), so NEGOTIATE names rank 1
both times. Argument: 'env' (HVDLITE_TIMELINE is set) or 'api' (start/stop_timeline
with the path given as the second argument), or 'kill' (SIGKILLs itself mid-run)."""
import os
import signal
import sys
import time

import numpy as np

import hvdlite as hvd

mode = sys.argv[1]
hvd.init()
if mode == "api":
    hvd.start_timeline(sys.argv[2], mark_cycles=True)
params = hvd.broadcast(np.arange(4, dtype=np.float32), root_rank=0, name="params")
small = [np.full(100, hvd.rank(), np.float32), np.full(50, hvd.rank(), np.float32)]
big = np.ones(1 << 16, np.float32)   # 256 KiB: reduced in place
for step in range(3):
    hs = hvd.grouped_allreduce_async(small, name="grad.small", op=hvd.Sum)
    hb = hvd.allreduce_async(big, name="grad.big", op=hvd.Sum)
    hc = hvd.allreduce_async(np.ones(1000, np.float32), name="grad.compressed", op=hvd.Sum,
                             compression="fp16")
    hr = hvd.reducescatter_async(np.ones((4, 3), np.float32), name="grad.shard", op=hvd.Sum)
    # Rank 1 submits grad.other first and grad.late 0.2 s later (at steps 0 and 2); rank 0 the
    # other way round. grad.other keeps rank 1's engine negotiating meanwhile, so the rounds
    # see grad.late from rank 0 alone first.
    if hvd.rank() == 1:
        ho = hvd.allreduce_async(np.ones(8, np.float32), name="grad.other", op=hvd.Sum)
        if step in (0, 2):
            time.sleep(0.2)
        late = hvd.allreduce(np.ones(8, np.float32), name="grad.late", op=hvd.Sum)
    else:
        late = hvd.allreduce(np.ones(8, np.float32), name="grad.late", op=hvd.Sum)
        ho = hvd.allreduce_async(np.ones(8, np.float32), name="grad.other", op=hvd.Sum)
    assert (late == hvd.size()).all()
    for h in (hs, hb, hc, hr, ho):
        hvd.synchronize(h)
if mode == "kill":
    time.sleep(0.5)  # let the writer thread catch up, then die without any cleanup
    os.kill(os.getpid(), signal.SIGKILL)
if mode == "api":
    hvd.stop_timeline()
hvd.barrier()
hvd.shutdown()
print("done", flush=True)
