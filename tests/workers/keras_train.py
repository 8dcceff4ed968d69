"""Keras 3 training at N ranks equals single-process training on the global batch, on the
backend KERAS_BACKEND names (tensorflow, torch or jax).

Each global batch of B rows is cut into N equal shards; rank r fits on shard r with
``shuffle=False``. Keras' losses are means over the local batch, so averaging gradients
over equal shards gives the gradient of the global batch: after every epoch the weights
must match those of one process fitting the whole global batches (every rank computes
that reference once, without hvdlite), and be identical on every rank.

Covered: model.fit with SGD(momentum) and Adam (ranks start from different weights: the
broadcast callback must align them), backward_passes_per_step=2 (against Keras' own
gradient accumulation), MetricAverageCallback. Run by tests/keras/test_keras_backends.py.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from keras_common import BACKEND, check, digits, done, rel_err  # noqa: E402

import numpy as np  # noqa: E402
import keras  # noqa: E402

import hvdlite  # noqa: E402
import hvdlite.keras as hvd  # noqa: E402

hvd.init()
R, N = hvd.rank(), hvd.size()
check(keras.backend.backend() == BACKEND == hvd.BACKEND, f"backend {hvd.BACKEND}")
TOL = 1e-5
LOCAL_B = 16
GLOBAL_B = LOCAL_B * N
STEPS = 5                  # optimizer steps per epoch
EPOCHS = 2
X, Y = digits()


def shard(a, batches):
    """Rank R's rows of each of the first ``batches`` global batches, in order."""
    return np.concatenate([a[s * GLOBAL_B + R * LOCAL_B: s * GLOBAL_B + (R + 1) * LOCAL_B]
                           for s in range(batches)])


def make_model():
    keras.utils.set_random_seed(1)
    return keras.Sequential([keras.Input((64,)),
                             keras.layers.Dense(16, activation="relu"),
                             keras.layers.Dense(10, activation="softmax")])


def weights(model):
    return [np.array(w) for w in model.get_weights()]


def rank0_copy(arrays):
    """Rank 0's arrays, on every rank (through the framework-free numpy API)."""
    return [hvdlite.broadcast(np.ascontiguousarray(a), 0) for a in arrays]


class PerEpoch(keras.callbacks.Callback):
    """Records the weights after every epoch; with ``across_ranks``, checks that they are
    the same on every rank."""

    def __init__(self, across_ranks=False):
        super().__init__()
        self.history = []
        self.across_ranks = across_ranks

    def on_epoch_end(self, epoch, logs=None):
        ws = weights(self.model)
        if self.across_ranks:
            diff = max(float(np.max(np.abs(a - b))) for a, b in zip(ws, rank0_copy(ws)))
            check(diff == 0.0, f"epoch {epoch}: weights differ between ranks by {diff}")
        self.history.append(ws)


class CountSkippedPass(keras.callbacks.Callback):
    """Advances ``iterations`` once more before every step: what a Horovod optimizer with
    backward_passes_per_step=2 does on the pass that only accumulates."""

    def on_train_batch_begin(self, batch, logs=None):
        it = self.model.optimizer.iterations
        it.assign(it + 1)


def reference(opt_fn, init_w, batches, epochs, merge=1):
    """One process, no hvdlite, on the global batches (``merge`` of them per step)."""
    model = make_model()
    model.set_weights(init_w)
    model.compile(optimizer=opt_fn(), loss="sparse_categorical_crossentropy")
    rec = PerEpoch()
    extra = [CountSkippedPass()] if merge == 2 else []
    model.fit(X[:batches * GLOBAL_B], Y[:batches * GLOBAL_B], batch_size=merge * GLOBAL_B,
              shuffle=False, epochs=epochs, verbose=0, callbacks=extra + [rec])
    return rec.history


results = {}
sgd = lambda lr: lambda: keras.optimizers.SGD(lr, momentum=0.9)  # noqa: E731
scenarios = [
    # label, hvdlite optimizer, equivalent single-process optimizer, hvd kwargs,
    # backward passes per step, global batches the reference merges into one step
    ("SGD+momentum", sgd(0.5), sgd(0.5), {}, 1, 1),
    ("Adam", lambda: keras.optimizers.Adam(0.01), lambda: keras.optimizers.Adam(0.01), {},
     1, 1),
    # Horovod sums the 2 passes' gradients; Keras' own accumulation averages them: lr x 2.
    ("SGD+momentum/bpps2", sgd(0.25),
     lambda: keras.optimizers.SGD(0.5, momentum=0.9, gradient_accumulation_steps=2),
     {"backward_passes_per_step": 2}, 2, 1),
    # The average of 2 passes' mean losses is the mean loss of both global batches at once;
    # Horovod counts both passes in ``iterations`` (Adam's bias correction reads it).
    ("Adam/bpps2/avg", lambda: keras.optimizers.Adam(0.01),
     lambda: keras.optimizers.Adam(0.01),
     {"backward_passes_per_step": 2, "average_aggregated_gradients": True}, 2, 2),
]
for label, opt_fn, ref_fn, kwargs, passes, merge in scenarios:
    model = make_model()
    init_w = weights(model)
    if R != 0:  # ranks start apart; the broadcast callback must fix it before step 1
        model.set_weights([w + 0.5 for w in init_w])
    opt = hvd.DistributedOptimizer(opt_fn(), **kwargs)
    check(type(opt).__name__ == type(opt_fn()).__name__, "wrapped class keeps its name")
    model.compile(optimizer=opt, loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    rec = PerEpoch(across_ranks=True)
    batches = STEPS * passes
    hist = model.fit(shard(X, batches), shard(Y, batches), batch_size=LOCAL_B, shuffle=False,
                     epochs=EPOCHS, verbose=0,
                     callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                                hvd.callbacks.MetricAverageCallback(), rec])
    check(len(rec.history) == EPOCHS, "one weight record per epoch")
    if R == 0:  # the other ranks hold the same weights (checked after every epoch)
        ref = reference(ref_fn, init_w, batches, EPOCHS, merge)
        for epoch, (got, want) in enumerate(zip(rec.history, ref)):
            err = max(rel_err(g, w) for g, w in zip(got, want))
            check(err < TOL, f"{label} epoch {epoch}: relative weight error {err:.2e} >= {TOL}")
            results[f"{label}/epoch{epoch}"] = err
    check(int(keras.ops.convert_to_numpy(opt.iterations)) == EPOCHS * batches,
          f"{label}: iterations counts every call")
    # MetricAverageCallback: the epoch logs are the same averaged numbers on every rank.
    logs = np.array([hist.history[k][-1] for k in sorted(hist.history)])
    check(np.array_equal(logs, rank0_copy([logs])[0]), f"{label}: averaged metrics {logs}")

if R == 0:
    for k, v in results.items():
        print(f"  {BACKEND:10s} {k:26s} max relative weight error {v:.2e}")
done("keras_train", R)
