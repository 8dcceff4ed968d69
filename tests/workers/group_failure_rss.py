"""A grouped all-reduce whose one member fails (a shape mismatch) releases every member.

    python group_failure_rss.py {numpy,torch,tensorflow} FAILURES

Each iteration all-reduces a fresh group of 4 x 512 KiB float32 tensors in which the last member
has another shape on the last rank, catches the mismatch error (raised on every rank), and
goes on. Leaking the group would keep ~4 MiB per failure (inputs and outputs); the RSS
after the failures must stay within 64 MiB of the RSS after a warm-up.

Python's cycle collector is off while the failures run: a failed group must be freed by
reference counting alone (see Note [no cycles through a failed Work] in src/hvdlite/work.py), and
the collector must find no hvdlite object left in a cycle afterwards.
"""
import gc
import sys

import numpy as np

FRAMEWORK, FAILURES = sys.argv[1], int(sys.argv[2])
ELEMS = 128 * 1024


def rss_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


if FRAMEWORK == "numpy":
    import hvdlite as hvd

    def make(n):
        return np.full(n, 1.0, dtype=np.float32)

    def run(tensors, name):
        return hvd.grouped_allreduce(tensors, name=name, op=hvd.Sum)

    def run_async(tensors, name):
        return hvd.synchronize(hvd.grouped_allreduce_async(tensors, name=name, op=hvd.Sum))
elif FRAMEWORK == "torch":
    import torch
    import hvdlite.torch as hvd

    def make(n):
        return torch.ones(n)

    def run(tensors, name):
        return hvd.grouped_allreduce(tensors, name=name, op=hvd.Sum)

    def run_async(tensors, name):
        return hvd.synchronize(hvd.grouped_allreduce_async(tensors, name=name, op=hvd.Sum))
else:
    import tensorflow as tf
    import hvdlite.tensorflow as hvd

    def make(n):
        return tf.ones([n])

    def run(tensors, name):
        return hvd.grouped_allreduce(tensors, name=name, op=hvd.Sum)

    run_async = run

hvd.init()
R, N = hvd.rank(), hvd.size()


def fail_once(i, fn):
    sizes = [ELEMS] * 4
    if R == N - 1:
        sizes[-1] += 1
    try:
        fn([make(n) for n in sizes], f"leaky.{i % 2}")
    except hvd.HvdliteMismatchError as e:
        assert "leaky" in str(e), e
    else:
        raise AssertionError("the mismatched group did not fail")


# Warm up both forms: the synchronous one runs on the calling thread, the asynchronous one on
# the engine's, and each thread's malloc arena grows to its working size once.
for i in range(20):
    fail_once(i, run if i % 2 else run_async)
gc.collect()
gc.disable()
before = rss_mib()
for i in range(FAILURES):
    fail_once(i, run if i % 2 else run_async)
after = rss_mib()
gc.set_debug(gc.DEBUG_SAVEALL)
gc.collect()
cycles = sorted({type(o).__name__ for o in gc.garbage
                 if type(o).__module__.startswith("hvdlite") or type(o).__name__ == "frame"})
gc.set_debug(0)
gc.garbage.clear()
gc.enable()
assert not cycles, f"failed groups left cycles holding {cycles}"
# the job is still usable, and the results are right
out = run([make(4), make(3)], "after.failures")
assert all(float(np.asarray(o).sum()) == N * len(np.asarray(o)) for o in out), out
print(f"group_failure_rss {FRAMEWORK}: rank {R} RSS {before:.0f} -> {after:.0f} MiB after "
      f"{FAILURES} failed groups", flush=True)
assert after - before < 64, f"RSS grew by {after - before:.0f} MiB over {FAILURES} failed groups"
print(f"group_failure_rss {FRAMEWORK}: rank {R} OK", flush=True)
