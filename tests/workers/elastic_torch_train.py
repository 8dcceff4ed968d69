"""Elastic torch training on digits; the membership changes at EVENT_STEP.

argv: mode, victim rank, event step, output .npz path[, new hosts].
Modes: kill | raise (the victim fails), none, and add | remove: rank 0 rewrites the file
the test's discovery script prints (OUT.hosts) to the new hosts ("localhost:3"), and waits
until hvdlite-run has seen it, so that the next commit applies the change.
Rank 0 saves the final parameters, the (step, size) of every reset and the time from the
failure (or from the start of the commit that saw the host change) to the first step
completed at the new size.
With ELASTIC_SHARDED=1 in the environment the optimizer shards its state
(shard_optimizer_state=True), which a membership change must re-cut for the new size.
"""
import os
import signal
import sys
import time

import numpy as np
import torch

import elastic_digits as problem
import hvdlite.torch as hvd
from elastic_hosts import change_hosts
from hvdlite.contract import elastic_env as settings

torch.set_num_threads(1)
mode, victim, fail_step, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
new_hosts = sys.argv[5] if len(sys.argv) > 5 else ""
failure_clock = out + ".failed_at"
hvd.init()
added = settings.added_worker_id()
first_rank = added if added is not None else hvd.rank()
x, y = problem.data()
model, optimizer = problem.model_and_optimizer()
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                     shard_optimizer_state=os.environ.get("ELASTIC_SHARDED") == "1")
state = hvd.elastic.TorchState(model, optimizer, step=0)
resets = []
recovered = {"pending": False, "seconds": None}


def on_reset():
    resets.append((state.step, hvd.size()))
    recovered["pending"] = True


state.register_reset_callbacks([on_reset])


@hvd.elastic.run
def train(state):
    while state.step < problem.STEPS:
        n, r = hvd.size(), hvd.rank()
        if state.step == fail_step and first_rank == 0 and mode in ("add", "remove"):
            change_hosts(out, new_hosts)
        if state.step == fail_step and first_rank == victim and mode in ("kill", "raise"):
            with open(failure_clock, "w") as f:
                f.write(repr(time.time()))
            if mode == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError(f"injected failure on rank {first_rank} at step {state.step}")
        xb, yb = problem.global_batch(x, y, state.step, n)
        optimizer.zero_grad()
        problem.loss_fn(model, problem.shard(xb, r), problem.shard(yb, r)).backward()
        optimizer.step()
        state.step += 1
        if recovered["pending"]:
            recovered["pending"] = False
            if mode in ("kill", "raise"):
                with open(failure_clock) as f:
                    recovered["seconds"] = time.time() - float(f.read())
            else:
                recovered["seconds"] = time.time() - recovered["commit_started"]
        if state.step % problem.COMMIT_EVERY == 0:
            recovered["commit_started"] = time.time()
            state.commit()


train(state)
if hvd.rank() == 0:
    np.savez(out, *[p.detach().numpy() for p in model.parameters()],
             resets=np.array(resets, dtype=np.int64).reshape(-1, 2),
             recovery_seconds=np.array(recovered["seconds"] if recovered["seconds"] is not None
                                       else -1.0),
             final_size=np.array(hvd.size()))
print(f"rank {first_rank} finished as rank {hvd.rank()} of {hvd.size()}", flush=True)
