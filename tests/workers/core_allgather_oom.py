"""An all-gather whose output one rank cannot allocate (rank 1 lowers its address-space
limit just below it) fails on every rank with HvdliteOutOfMemoryError naming rank 1, the
tensor and the size; nothing was sent, so the job goes on: later collectives, the same
all-gather with the limit lifted included, give exact results."""
import resource

import numpy as np

import hvdlite as hvd


def address_space_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status")


hvd.init()
R, N = hvd.rank(), hvd.size()
# 48 MiB per rank, so the output is 96 MiB: more than glibc can still find inside the address
# space a thread's malloc arena has reserved (64 MiB) when the limit makes mmap fail.
rows = 6 << 20
x = np.full(rows, R, np.float64)
expected = np.repeat(np.arange(N, dtype=np.float64), rows)
soft, hard = resource.getrlimit(resource.RLIMIT_AS)
if R == 1:
    # Room for small allocations, not for the output.
    resource.setrlimit(resource.RLIMIT_AS, (address_space_bytes() + (16 << 20), hard))
try:
    hvd.allgather(x, name="too.big")
    raise AssertionError("the all-gather should have failed")
except hvd.HvdliteOutOfMemoryError as e:
    message = str(e)
    assert isinstance(e, MemoryError)
finally:
    if R == 1:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
assert "allgather 'too.big': rank 1 could not allocate the 96 MiB output" in message, message
assert "failed on every rank before any data was sent" in message, message

# The job goes on: the engine still runs on every rank.
assert np.array_equal(hvd.allreduce(np.ones(5), op=hvd.Sum, name="after"), np.full(5, N))
assert np.array_equal(hvd.allgather(x, name="too.big"), expected)
print(f"rank {R}: {message}", flush=True)
hvd.shutdown()
print(f"rank {R}: ALL OK", flush=True)
