"""Autotune on two hosts x two ranks, where hierarchical all-reduce is possible: a loop of
named gradients, every result checked exactly (ranks that ran different algorithms in one
round would get wrong sums or hang), until rank 0's HVDLITE_AUTOTUNE_LOG shows that both
hierarchical on and off were measured. The timeline (HVDLITE_TIMELINE, rank 0) then shows
which algorithm ran each step. Argument: the longest the loop may run, in seconds."""
import csv
import os
import sys
import time

import numpy as np

import hvdlite as hvd

limit = float(sys.argv[1])
hvd.init()
log = os.environ["HVDLITE_AUTOTUNE_LOG"]
grads = [np.full(s, hvd.rank() + 1, np.float32) for s in [(1000,), (256, 256), (30000,)]]
expected = sum(range(1, hvd.size() + 1))


def both_measured():
    if hvd.rank() != 0 or not os.path.exists(log):
        return False
    with open(log) as f:
        rows = [r for r in csv.DictReader(f) if r["setting"] == "hierarchical_allreduce"]
    return {r["hierarchical_allreduce"] for r in rows} == {"0", "1"}


start, steps = time.monotonic(), 0
while time.monotonic() - start < limit:
    handles = [hvd.allreduce_async(g, name=f"layer{i}", op=hvd.Sum) for i, g in enumerate(grads)]
    for h in handles:
        assert (hvd.synchronize(h) == expected).all()
    time.sleep(0.002)  # the step's compute
    steps += 1
    if hvd.broadcast(np.array([both_measured()], np.int32), root_rank=0, name="measured")[0]:
        break
rank = hvd.rank()
hvd.stop_timeline()
hvd.shutdown()
print(f"rank {rank}: steps {steps} done", flush=True)
