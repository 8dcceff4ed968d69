"""Worker for tests/multihost: each rank reports where it runs and what hvdlite sees, then
checks an all-reduce and an allgather across the hosts."""
import json
import os
import socket
import sys

import numpy as np

import hvdlite as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
total = hvd.allreduce(np.arange(1000, dtype=np.float64) * (r + 1), op=hvd.Sum, name="sum")
expected = np.arange(1000, dtype=np.float64) * (n * (n + 1) / 2)
hosts = hvd.allgather(np.frombuffer(socket.gethostname().encode().ljust(32), np.uint8)[None],
                      name="hosts")
print("TOPOLOGY " + json.dumps({
    "host": socket.gethostname(), "rank": r, "size": n, "local_rank": hvd.local_rank(),
    "local_size": hvd.local_size(), "cross_rank": hvd.cross_rank(),
    "cross_size": hvd.cross_size(), "allreduce_ok": bool(np.array_equal(total, expected)),
    "hosts": [bytes(h).decode().strip() for h in hosts],
    "env": {k: v for k, v in os.environ.items() if k.startswith("HVDLITE_TEST_")},
}), flush=True)
if os.environ.get("HVDLITE_TEST_FAIL_RANK") == str(r):
    raise ValueError(f"DISTINCTIVE-REMOTE-FAILURE on {socket.gethostname()} rank {r}")
hvd.barrier()
sys.exit(0)
