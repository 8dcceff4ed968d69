"""shutdown() on one thread while another thread waits on a pending collective: the waiter
gets HvdliteShutdownError (the engine is never destroyed under it), and the other ranks'
error names the rank that shut down. Repeated, re-initialising each time. Then a rank that
simply exits while the others wait: they are told which rank left. Needs 2+ ranks."""
import sys
import threading
import time

import numpy as np

import hvdlite as hvd
from hvdlite import HvdliteShutdownError

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 15


def wait_for_error(handle, errors):
    try:
        hvd.synchronize(handle)
        errors.append(None)
    except HvdliteShutdownError as e:
        errors.append(str(e))
    except Exception as e:  # noqa: BLE001 - reported as a failure below
        errors.append(f"WRONG {type(e).__name__}: {e}")


for i in range(ROUNDS):
    hvd.init()
    R, N = hvd.rank(), hvd.size()
    assert (hvd.allreduce(np.ones(2), op=hvd.Sum, name=f"warm.{i}") == N).all()
    errors = []
    # Every rank waits on a tensor only it submits; rank 0 shuts down under its waiter.
    handle = hvd.allreduce_async(np.ones(1 << 16, np.float32), name=f"only.rank{R}.{i}")
    waiter = threading.Thread(target=wait_for_error, args=(handle, errors))
    waiter.start()
    if R == 0:
        time.sleep(0.05 * (1 + i % 4))  # the waiter is blocked in the core by then
        hvd.shutdown()
    waiter.join(60)
    assert not waiter.is_alive(), f"rank {R}: the waiter is still blocked after shutdown"
    assert errors and errors[0] and errors[0].startswith("hvdlite has been shut down: rank 0 "), \
        f"rank {R} round {i}: {errors}"
    assert f"'only.rank{R}.{i}'" in errors[0], errors[0]
    hvd.shutdown()

# A rank that exits normally (its exit-time shutdown) while the others wait is named.
hvd.init()
R, N = hvd.rank(), hvd.size()
if R == N - 1:
    print(f"rank {R}: ALL OK (exiting)", flush=True)
    sys.exit(0)
try:
    hvd.allreduce(np.ones(2), name="left.behind")
    raise AssertionError("no error although a rank left")
except HvdliteShutdownError as e:
    assert f"shut down: rank {N - 1} called hvdlite.shutdown() or exited" in str(e), str(e)
print(f"rank {R}: ALL OK", flush=True)
