"""hvdlite worker for tests/test_launcher.py: an allreduce run through hvdlite-run."""
import numpy as np

import hvdlite as hvd

hvd.init()
rank, size = hvd.rank(), hvd.size()
x = np.arange(10, dtype=np.float32) + rank
out = hvd.allreduce(x, op=hvd.Sum, name="launcher.sum")
expected = size * np.arange(10, dtype=np.float32) + sum(range(size))
assert np.allclose(out, expected), (out, expected)
print(f"allreduce ok rank={rank} size={size} local_rank={hvd.local_rank()} first={out[0]:g}")
hvd.shutdown()
