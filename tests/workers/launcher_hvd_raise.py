"""hvdlite worker for tests/test_launcher.py: rank 1 raises while rank 0 waits in an allreduce."""
import time

import numpy as np

import hvdlite as hvd

hvd.init()
x = np.ones(1000, dtype=np.float32)
if hvd.rank() == 1:
    time.sleep(0.5)
    raise ValueError("DISTINCTIVE-RAISE-91c2 from rank 1")
hvd.allreduce(x, op=hvd.Sum, name="never.completes")
print(f"rank {hvd.rank()} should not get here")
