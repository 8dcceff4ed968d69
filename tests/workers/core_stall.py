"""Ranks 0 and 2 submit 'fc.weight' at once; rank 1 is held up elsewhere.

'warn': after one step together (so the tensor is negotiated on the cached path from then on),
rank 1 submits it 3 s late; with HVDLITE_STALL_CHECK_TIME_SECONDS=1 rank 0 warns, naming the
ranks on both sides, and everything completes once rank 1 catches up.
'shutdown': rank 1 never submits it (it sleeps, then submits another tensor); with
HVDLITE_STALL_SHUTDOWN_TIME_SECONDS=2 the job ends: every rank's collective fails with the
stall message."""
import sys
import time

import numpy as np

import hvdlite as hvd

mode = sys.argv[1]
hvd.init()
if mode == "warn":
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
