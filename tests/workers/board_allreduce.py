"""Small all-reduces riding in the negotiation round at N ranks on one host (csrc/engine/
controller.h, gathered rounds through csrc/transport/shm_board.h).

argv[1]: "on" (HVDLITE_BOARD_ALLREDUCE_MAX_BYTES=4096, set by the test) or "off" (the setting at 0).
Each tensor is all-reduced several times under one name with the same inputs (floats whose
sums depend on the operand order): the first call asks the coordinator and runs the data
path (shm_allreduce_nranks, the ring's order); once cached and the room agreed, a call rides
in its one negotiation round: one board round (shared_memory_swaps), no data path
(shared_memory_allreduces), and the same bits as the first call, on every rank.
"""
import sys

import numpy as np

import hvdlite as hvd
from hvdlite import _core

mode = sys.argv[1]
hvd.init()
R, N = hvd.rank(), hvd.size()
assert hvd.local_size() == N, (hvd.local_size(), N)

CALLS = 6
rides = 0
for dtype in (np.float32, np.float64, np.float16, np.int32):
    for count in (1, N - 1, N + 1, 100, 4096 // np.dtype(dtype).itemsize):
        for opname, op in (("sum", hvd.Sum), ("average", hvd.Average), ("max", hvd.Max)):
            if opname == "average" and dtype == np.int32:
                continue
            rng = np.random.default_rng(count * 31 + R)
            x = (rng.standard_normal(count) * (1000.0 if R % 2 else 0.001)).astype(dtype)
            name = f"{np.dtype(dtype).name}.{count}.{opname}"
            first = None
            for call in range(CALLS):
                _core.transport_stats(reset=True)
                got = hvd.allreduce(x, op=op, name=name)
                s = _core.transport_stats(reset=True)
                if first is None:
                    first = got
                    assert s["board_allreduces"] == 0, (name, s)
                    continue
                assert got.tobytes() == first.tobytes(), (name, call, got, first)
                if mode == "off" or call < 2:
                    assert s["board_allreduces"] == 0, (name, call, s)
                    continue
                # Steady state: the call is one board round, and nothing else.
                assert s["board_allreduces"] == 1, (name, call, s)
                assert s["shared_memory_swaps"] == 1, (name, call, s)
                assert s["shared_memory_allreduces"] == s["shared_memory_copied_bytes"] == 0, (name, call, s)
                rides += 1
            # Every rank holds the same bits.
            bits = hvd.allgather(first.view(np.uint8)[None, :], name=name + ".bits")
            assert all(np.array_equal(bits[0], b) for b in bits), (name, "ranks differ")
if R == 0:
    print(f"board_allreduce {mode} OK at {N} ranks, {rides} calls rode the round", flush=True)
hvd.shutdown()
