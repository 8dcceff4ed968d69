"""Large allocations one rank cannot make (rank 1 lowers its address-space limit just below
them) fail on every rank with HvdliteOutOfMemoryError naming rank 1, the tensor and the size:
an all-gather's output, an all-to-all's received data, a reduce-scatter's work buffer (or,
through shared memory, where it needs none, its output). Nothing
was sent, so the job goes on: later collectives, the same requests with the limit lifted
included, give exact results."""
import contextlib
import resource

import numpy as np

import hvdlite as hvd


def address_space_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmSize in /proc/self/status")


@contextlib.contextmanager
def tight_memory_on_rank_1():
    """Room for small allocations on rank 1, not for 96 MiB: more than glibc can still find
    inside the address space a thread's malloc arena has reserved (64 MiB) when mmap fails."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if R == 1:
        resource.setrlimit(resource.RLIMIT_AS, (address_space_bytes() + (16 << 20), hard))
    try:
        yield
    finally:
        if R == 1:
            resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def fails_everywhere(run, expected_words):
    with tight_memory_on_rank_1():
        try:
            run()
            raise AssertionError(f"should have failed: {expected_words[0]}")
        except hvd.HvdliteOutOfMemoryError as e:
            message = str(e)
            assert isinstance(e, MemoryError)
    for words in expected_words:   # a tuple: any one of them
        assert any(w in message for w in ((words,) if isinstance(words, str) else words)), (words, message)
    assert "failed on every rank before any data was sent" in message, message
    # The job goes on: the engine still runs on every rank.
    assert np.array_equal(hvd.allreduce(np.ones(5), op=hvd.Sum, name="after"), np.full(5, N))
    print(f"rank {R}: {message}", flush=True)


hvd.init()
R, N = hvd.rank(), hvd.size()
rows = 6 << 20   # 48 MiB of float64 per rank

# all-gather: a 96 MiB output on every rank
x = np.full(rows, R, np.float64)
fails_everywhere(lambda: hvd.allgather(x, name="too.big"),
                 ["allgather 'too.big': rank 1 could not allocate the 96 MiB output"])
assert np.array_equal(hvd.allgather(x, name="too.big"),
                      np.repeat(np.arange(N, dtype=np.float64), rows))

# all-to-all: every rank sends all its rows to rank 1, which receives N x 48 MiB
to_rank_1 = [0] * N
to_rank_1[1] = rows
fails_everywhere(lambda: hvd.alltoall(x, splits=to_rank_1, name="a2a.big"),
                 ["alltoall 'a2a.big': rank 1 could not allocate the data it receives (the inputs of all ranks together are 96 MiB"])
received, counts = hvd.alltoall(x, splits=to_rank_1, name="a2a.big")
if R == 1:
    assert np.array_equal(received, np.repeat(np.arange(N, dtype=np.float64), rows))
    assert list(counts) == [rows] * N, counts
else:
    assert received.size == 0 and list(counts) == [0] * N, (received.shape, counts)
del received

# reduce-scatter of 192 MiB: the ring's work buffer holds the whole input; through shared
# memory (Note [reduce-scatter in place of a work buffer]) only the 96 MiB output is allocated
y = np.full(4 * rows, R + 1, np.float64)
fails_everywhere(lambda: hvd.reducescatter(y, op=hvd.Sum, name="rs.big"),
                 [("reducescatter 'rs.big': rank 1 could not allocate its 192 MiB work buffer",
                   "reducescatter 'rs.big': rank 1 could not allocate its 96 MiB output")])
assert np.array_equal(hvd.reducescatter(y, op=hvd.Sum, name="rs.big"),
                      np.full(4 * rows // N, N * (N + 1) / 2))

hvd.shutdown()
print(f"rank {R}: ALL OK", flush=True)
