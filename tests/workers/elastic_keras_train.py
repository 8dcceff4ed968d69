"""Elastic Keras training (model.fit with the elastic callbacks) on digits; one rank fails.

argv: mode (kill | raise | none | add | remove), victim rank, fail step, output .npz path[, new
hosts] ("add", "remove": rank 0 changes the discovered hosts at that step, see
tests/elastic_hosts.py). With ELASTIC_SHARDED=1 in the environment the optimizer shards its
state (shard_optimizer_state=True), which a membership change must re-cut for the new size. Step s is batch
s % BATCHES of epoch s // BATCHES and uses the global batches of tests/elastic_digits.py.
The lowest surviving rank saves the final weights, the resets and a one-process replay
(plain Keras, no hvdlite) that runs at 3 ranks' shards before the committed step the
survivors resumed from and at the new size after it.
"""
import os
import signal
import sys
import time

import numpy as np
import keras
import tensorflow as tf

import elastic_digits as problem
import hvdlite.tensorflow.keras as hvd
from elastic_hosts import change_hosts
from hvdlite.contract import elastic_env as settings

keras.config.set_floatx("float64")
BATCHES = 5
EPOCHS = problem.STEPS // BATCHES
mode, victim, fail_step, out = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
new_hosts = sys.argv[5] if len(sys.argv) > 5 else ""
failure_clock = out + ".failed_at"

hvd.init()
added = settings.added_worker_id()
first_rank = added if added is not None else hvd.rank()
start_size = hvd.size()
x_all, y_all = (t.numpy() for t in problem.data())


def make_model():
    keras.utils.set_random_seed(0)
    return keras.Sequential([keras.Input((64,)), keras.layers.Dense(32, activation="tanh"),
                             keras.layers.Dense(10)])


LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
model = make_model()
SHARDED = os.environ.get("ELASTIC_SHARDED") == "1"
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(problem.LR, momentum=0.9),
                                                 shard_optimizer_state=SHARDED),
              loss=LOSS)
state = hvd.elastic.KerasState(model, epoch=0, batch=0)
resets = []
recovered = {"pending": False, "seconds": -1.0}


def on_reset():
    resets.append((state.epoch * BATCHES + state.batch, hvd.size()))
    recovered["pending"] = True


state.register_reset_callbacks([on_reset])


class FailAndTime(keras.callbacks.Callback):
    """Fails the victim before step fail_step; times the first step after a reset."""

    def on_train_batch_begin(self, batch, logs=None):
        step = state.epoch * BATCHES + state.batch
        if step == fail_step and first_rank == 0 and mode in ("add", "remove"):
            with open(failure_clock, "w") as f:   # timed from the change
                f.write(repr(time.time()))
            change_hosts(out, new_hosts)
        if step == fail_step and first_rank == victim and mode in ("kill", "raise"):
            with open(failure_clock, "w") as f:
                f.write(repr(time.time()))
            if mode == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            raise RuntimeError(f"injected failure on rank {first_rank} at step {step}")

    def on_train_batch_end(self, batch, logs=None):
        if recovered["pending"]:
            recovered["pending"] = False
            with open(failure_clock) as f:
                recovered["seconds"] = time.time() - float(f.read())


def epoch_data(epoch, first_batch):
    n, r = hvd.size(), hvd.rank()
    xs, ys = [], []
    for b in range(first_batch, BATCHES):
        xb, yb = problem.global_batch(x_all, y_all, epoch * BATCHES + b, n)
        xs.append(problem.shard(xb, r))
        ys.append(problem.shard(yb, r))
    return np.concatenate(xs), np.concatenate(ys)


@hvd.elastic.run
def train(state):
    callbacks = [FailAndTime(), hvd.elastic.UpdateEpochStateCallback(state),
                 hvd.elastic.UpdateBatchStateCallback(state),
                 hvd.elastic.CommitStateCallback(state, batches_per_commit=2)]
    while state.epoch < EPOCHS:
        if state.batch >= BATCHES:   # committed after the epoch's last batch
            state.epoch, state.batch = state.epoch + 1, 0
            continue
        xe, ye = epoch_data(state.epoch, state.batch)
        model.fit(xe, ye, batch_size=problem.PER_RANK, epochs=1, shuffle=False, verbose=0,
                  callbacks=callbacks)


def replay(sizes):
    ref = make_model()
    opt = keras.optimizers.SGD(problem.LR, momentum=0.9)
    for step in range(problem.STEPS):
        n = sizes(step)
        xb, yb = problem.global_batch(x_all, y_all, step, n)
        total = None
        for r in range(n):
            with tf.GradientTape() as tape:
                loss = LOSS(problem.shard(yb, r), ref(problem.shard(xb, r)))
            g = tape.gradient(loss, ref.trainable_variables)
            total = g if total is None else [a + b for a, b in zip(total, g)]
        opt.apply([t / n for t in total], ref.trainable_variables)
    return [np.array(w) for w in ref.weights]


train(state)
if hvd.rank() == 0:
    resumed = resets[0][0] if resets else problem.STEPS
    want = replay(lambda s: start_size if s < resumed else hvd.size())
    unchanged = replay(lambda s: start_size)
    got = [np.array(w) for w in model.weights]
    np.savez(out, diff=max(float(np.max(np.abs(a - b))) for a, b in zip(got, want)),
             diff_unchanged=max(float(np.max(np.abs(a - b))) for a, b in zip(got, unchanged)),
             resets=np.array(resets, dtype=np.int64).reshape(-1, 2),
             recovery_seconds=np.array(recovered["seconds"]), final_size=np.array(hvd.size()))
print(f"rank {first_rank} finished as rank {hvd.rank()} of {hvd.size()}", flush=True)
