"""fork() after init(): the child is not the initialised process. Collectives raise a clear
error there, topology queries still answer, and exit (normal, with atexit) returns at once
instead of waiting on the parent's engine thread. The parent's job is unaffected.
Covers os.fork, a multiprocessing 'fork' child, and torch DataLoader workers (if torch is
installed). Needs at least 2 ranks."""
import multiprocessing as mp
import os
import sys
import time

import numpy as np

import hvdlite as hvd
from hvdlite import HvdliteNotInitializedError

hvd.init()
R, N = hvd.rank(), hvd.size()


def child_error():
    """What a collective does in a forked child: the message, or a failure description."""
    try:
        hvd.allreduce(np.ones(2), name="in.child")
    except HvdliteNotInitializedError as e:
        return str(e)
    except Exception as e:  # noqa: BLE001 - reported to the parent as a failure
        return f"WRONG {type(e).__name__}: {e}"
    return "WRONG: no error"


def wait_child(pid, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, 9)
    raise AssertionError(f"rank {R}: forked child {pid} did not exit within {timeout} s")


def check_os_fork():
    pid = os.fork()
    if pid == 0:
        msg = child_error()
        ok = ("forked child" in msg and str(os.getppid()) in msg and hvd.rank() == R
              and hvd.is_initialized() and hvd._core.in_forked_child())
        if not ok:
            print(f"rank {R} child: {msg}", flush=True)
        hvd.shutdown()          # a no-op in the child
        sys.exit(0 if ok else 3)  # normal exit: atexit runs hvdlite's exit-time shutdown
    assert wait_child(pid) == 0, f"rank {R}: the forked child failed"


def mp_worker(queue):
    queue.put((hvd.rank(), child_error()))


def check_multiprocessing():
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    p = ctx.Process(target=mp_worker, args=(queue,))
    p.start()
    rank, msg = queue.get(timeout=60)
    p.join(60)
    assert p.exitcode == 0 and rank == R and "forked child" in msg, (p.exitcode, rank, msg)


def check_torch_dataloader():
    try:
        import torch
        from torch.utils.data import DataLoader, Dataset
    except ImportError:
        return

    class Shard(Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            msg = child_error()
            assert "forked child" in msg, msg
            return torch.tensor([hvd.rank() * 100 + i])

    loader = DataLoader(Shard(), batch_size=2, num_workers=2,
                        multiprocessing_context="fork")
    got = sorted(int(v) for batch in loader for v in batch)
    assert got == [R * 100 + i for i in range(4)], got


for check in (check_os_fork, check_multiprocessing, check_torch_dataloader):
    check()
    got = hvd.allreduce(np.ones(3, np.float32), op=hvd.Sum, name=f"after.{check.__name__}")
    assert (got == N).all(), got
print(f"rank {R}: ALL OK", flush=True)
# No explicit shutdown: the parent's normal exit path must still work after the forks.
