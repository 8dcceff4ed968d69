"""hvdlite worker for tests/test_launcher.py: every rank gives a different shape."""
import numpy as np

import hvdlite as hvd

hvd.init()
hvd.allreduce(np.ones(4 + hvd.rank()), name="grad")
print(f"rank {hvd.rank()} should not get here")
