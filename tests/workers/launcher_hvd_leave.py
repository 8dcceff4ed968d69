"""hvdlite worker for tests/test_launcher.py: the last rank exits cleanly while the others
wait for it in an all-reduce."""
import sys
import time

import numpy as np

import hvdlite as hvd

hvd.init()
if hvd.rank() == hvd.size() - 1:
    time.sleep(0.5)
    print(f"rank {hvd.rank()} leaves early")
    sys.exit(0)
hvd.allreduce(np.ones(4), name="left.behind")
print(f"rank {hvd.rank()} should not get here")
