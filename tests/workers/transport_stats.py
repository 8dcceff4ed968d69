"""_core.transport_stats(): bytes a ring all-reduce and an all-gather send and receive.

A ring all-reduce of T bytes sends and receives 2 (N-1)/N T bytes per rank; an all-gather
of b bytes per rank sends b to each of the N-1 others. reset=True returns and zeroes.
"""
import numpy as np

import hvdlite as hvd
from hvdlite import _core

hvd.init()
R, N = hvd.rank(), hvd.size()
x = np.ones(3 * 1000, np.float32)            # divisible by N = 3: equal segments
hvd.allreduce(x, name="warm")
_core.transport_stats(reset=True)
hvd.allreduce(x, name="ring")
s = _core.transport_stats(reset=True)
assert s["bytes_sent"] == s["bytes_received"] == 2 * (N - 1) * x.nbytes // N, s
assert s["control_bytes_sent"] > 0, s
assert _core.transport_stats()["bytes_sent"] == 0
hvd.allgather(np.ones(10 * (R + 1), np.float64), name="gather")
s = _core.transport_stats()
assert s["bytes_sent"] == (N - 1) * 80 * (R + 1), s
assert s["bytes_received"] == sum(80 * (r + 1) for r in range(N) if r != R), s
if R == 0:
    print(f"transport_stats OK at {N} ranks", flush=True)
hvd.shutdown()
