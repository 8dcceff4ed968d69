"""Ranks 0 and 2 submit 'fc.weight' at once; rank 1 is held up elsewhere.

'warn': after one step together (so the tensor is negotiated on the cached path from then on),
rank 1 submits it 3 s late; with HVDLITE_STALL_CHECK_TIME_SECONDS=1 rank 0 warns, naming the
ranks on both sides, and everything completes once rank 1 catches up.
'shutdown': rank 1 never submits it (it sleeps, then submits another tensor); with
HVDLITE_STALL_SHUTDOWN_TIME_SECONDS=2 the job ends: every rank's collective fails with the
stall message.
'set': the same as 'warn' inside process set [1, 2]: rank 2 submits 'ps.weight' 3 s after
rank 1 and rank 0 is not in the set; the warning, from the set's first member (global rank
1), names the set and global ranks, not positions within the set."""
import sys
import time

import numpy as np

import hvdlite as hvd

mode = sys.argv[1]
ps_12 = hvd.ProcessSet([1, 2])
hvd.init(process_sets=[ps_12] if mode == "set" else None)
if mode == "set":
    if ps_12.included():
        if hvd.rank() == 2:
            time.sleep(3)
        got = hvd.allreduce(np.ones(2, np.float32), op=hvd.Sum, name="ps.weight",
                            process_set=ps_12)
        assert (got == 2).all(), got
    hvd.shutdown()
    print("done", flush=True)
elif mode == "warn":
    for step in range(2):
        if hvd.rank() == 1 and step == 1:
            time.sleep(3)
        got = hvd.allreduce(np.ones(2, np.float32), op=hvd.Sum, name="fc.weight")
        assert (got == hvd.size()).all()
    hvd.shutdown()
    print("done", flush=True)
else:
    try:
        if hvd.rank() == 1:
            time.sleep(6)
            hvd.allreduce(np.ones(2, np.float32), op=hvd.Sum, name="other")
        else:
            hvd.allreduce(np.ones(2, np.float32), op=hvd.Sum, name="fc.weight")
    except hvd.HvdliteShutdownError as e:
        print(f"rank {hvd.rank()} stopped: {e}", flush=True)
    else:
        raise AssertionError("the stalled collective completed")
