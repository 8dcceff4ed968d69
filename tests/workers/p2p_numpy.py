"""hvdlite.p2p on numpy arrays, without torch (run at 3 ranks): a ring, recv from any source
returning the sender, a process set (its ranks, not the job's), a wait that times out and
then finishes, a non-contiguous array refused, and a rank out of range named."""
import numpy as np

import hvdlite
from hvdlite import p2p
from hvdlite.exceptions import HvdliteInvalidArgumentError, HvdliteTimeoutError
from worker_checks import check, done, expect_error

hvdlite.init(process_sets="dynamic")
R, N = hvdlite.rank(), hvdlite.size()

got = np.zeros((2, 3), np.float64)
works = [p2p.recv_async(got, (R - 1) % N), p2p.send_async(np.full((2, 3), R, np.float64), (R + 1) % N)]
check(works[1].wait() == R, "a send's wait() returns this rank")
check(works[0].wait() == (R - 1) % N, f"recv source {works[0].source}")
check(np.array_equal(got, np.full((2, 3), (R - 1) % N)), f"ring: {got}")

if R == 0:
    seen = set()
    for _ in range(N - 1):
        t = np.zeros(4, np.int32)
        src = p2p.recv_async(t).wait()
        check(np.array_equal(t, np.full(4, src * 3, np.int32)), f"from {src}: {t}")
        seen.add(src)
    check(seen == set(range(1, N)), f"senders {seen}")
else:
    p2p.send_async(np.full(4, R * 3, np.int32), 0).wait()

odd = hvdlite.add_process_set([1, 2]) if N >= 3 else None
if odd is not None and R in (1, 2):
    t = np.zeros(1, np.int64)
    if R == 1:
        w = p2p.recv_async(t, 1, process_set=odd)     # set rank 1 = job rank 2
        expect_error(HvdliteTimeoutError, lambda: w.wait(timeout=0.2), ["timeout"], "early wait")
        hvdlite.allreduce(np.ones(1), process_set=odd, name="go")
        check(w.wait() == 1 and t[0] == 42, f"set recv after a timeout: {t}, from {w.source}")
    else:
        hvdlite.allreduce(np.ones(1), process_set=odd, name="go")
        p2p.send_async(np.array([42]), 0, process_set=odd).wait()

expect_error(HvdliteInvalidArgumentError, lambda: p2p.recv_async(np.zeros((4, 4))[:, ::2], 0),
             ["not C-contiguous"], "strided numpy array")
expect_error(HvdliteInvalidArgumentError, lambda: p2p.send_async(np.zeros(1), -2),
             ["rank -2 is out of range", f"group of {N} rank"], "negative rank")
hvdlite.allreduce(np.ones(1), name="end")
done("p2p numpy", R)
hvdlite.shutdown()
