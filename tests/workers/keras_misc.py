"""hvdlite.keras beyond the equivalence runs, on the backend KERAS_BACKEND names:
collectives on backend tensors (eagerly and inside tf.function / jax.jit),
broadcast_variables, the learning-rate callbacks, fp16 compression and
gradient_predivide_factor inside model.fit, save / load_model, and errors.
Run by tests/keras/test_keras_backends.py at 2 ranks."""
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from keras_common import BACKEND, check, digits, done, expect_error, rel_err  # noqa: E402

import numpy as np  # noqa: E402
import keras  # noqa: E402
from keras import ops  # noqa: E402

import hvdlite  # noqa: E402
import hvdlite.keras as hvd  # noqa: E402
from hvdlite.keras.optimizer import _DistributedOptimizer  # noqa: E402

hvd.init()
R, N = hvd.rank(), hvd.size()
LOCAL_B = 16
GLOBAL_B = LOCAL_B * N
X, Y = digits()


def np_of(t):
    return ops.convert_to_numpy(t)


def compiled(fn):
    """``fn`` as the backend compiles a train step (torch: eager, as Keras runs it)."""
    if BACKEND == "tensorflow":
        import tensorflow as tf
        return tf.function(fn)
    if BACKEND == "jax":
        import jax
        return jax.jit(fn)
    return fn


def shard(a, steps, offset=0):
    return np.concatenate([a[offset + s * GLOBAL_B + R * LOCAL_B:
                             offset + s * GLOBAL_B + (R + 1) * LOCAL_B] for s in range(steps)])


def make_model():
    keras.utils.set_random_seed(1)
    return keras.Sequential([keras.Input((64,)), keras.layers.Dense(16, activation="relu"),
                             keras.layers.Dense(10, activation="softmax")])


def weights(model):
    return [np.array(w) for w in model.get_weights()]


def same_on_all_ranks(ws, what):
    diff = max(float(np.max(np.abs(a - hvdlite.broadcast(np.ascontiguousarray(a), 0))))
               for a in ws)
    check(diff == 0.0, f"{what}: weights differ between ranks by {diff}")


# --------------------------------------------------- collectives on backend tensors
x = ops.convert_to_tensor(np.full((2, 3), R + 1, np.float32))
for label, fn in [("eager", lambda t: [hvd.allreduce(t, name="ar"),
                                       hvd.allreduce(t, op=hvd.Sum, name="ars"),
                                       hvd.allgather(t, name="ag"),
                                       hvd.broadcast(t, 1, name="bc")]),
                  ("compiled", compiled(lambda t: [hvd.allreduce(t), hvd.allreduce(t, op=hvd.Sum),
                                                   hvd.allgather(t), hvd.broadcast(t, 1)]))]:
    avg, total, gathered, bcast = [np_of(v) for v in fn(x)]
    check(np.allclose(avg, (N + 1) / 2), f"{label} allreduce average {avg}")
    check(np.allclose(total, N * (N + 1) / 2), f"{label} allreduce sum {total}")
    want = np.concatenate([np.full((2, 3), r + 1, np.float32) for r in range(N)])
    check(np.array_equal(gathered, want), f"{label} allgather {gathered}")
    check(np.array_equal(bcast, np.full((2, 3), 2, np.float32)), f"{label} broadcast {bcast}")
# Eagerly the ranks' first dimensions may differ.
ragged = np_of(hvd.allgather(np.arange(R + 1, dtype=np.int32)))
check(ragged.tolist() == [i for r in range(N) for i in range(r + 1)], f"ragged {ragged}")
check(np.allclose(np_of(hvd.allreduce(3.0, average=False)), 3.0 * N), "python number, average=")

var = keras.Variable(np.full(4, R, np.float32), name="bcast_me")
hvd.broadcast_variables([var], root_rank=N - 1)
check(np.array_equal(np_of(var), np.full(4, N - 1, np.float32)), "broadcast_variables")

# ---------------------------------------------------------- learning-rate callbacks
class LrRecorder(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.rows, self.epoch = [], 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        lr = float(np_of(self.model.optimizer.learning_rate))
        self.rows.append((self.epoch, batch, lr))


STEPS, WARMUP, LR = 3, 2, 0.4
model = make_model()
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(LR, momentum=0.9)),
              loss="sparse_categorical_crossentropy")
rec = LrRecorder()
hist = model.fit(shard(X, STEPS), shard(Y, STEPS), batch_size=LOCAL_B, epochs=3,
                 shuffle=False, verbose=0,
                 callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                            hvd.callbacks.LearningRateWarmupCallback(LR, warmup_epochs=WARMUP),
                            rec])
for epoch, batch, lr in rec.rows:
    e = epoch + batch / STEPS + 1.0 / STEPS
    want = LR / N * (e * (N - 1) / WARMUP + 1) if epoch < WARMUP else LR
    check(abs(lr - want) < 1e-6, f"warmup lr at epoch {epoch} batch {batch}: {lr} != {want}")
same_on_all_ranks(weights(model), "warmup fit")
model = make_model()
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)),
              loss="sparse_categorical_crossentropy")
hist = model.fit(shard(X, 2), shard(Y, 2), batch_size=LOCAL_B, epochs=4, shuffle=False,
                 verbose=0, callbacks=[hvd.callbacks.LearningRateScheduleCallback(
                     0.1, multiplier=0.5, start_epoch=1, end_epoch=3, staircase=True)])
check(np.allclose(hist.history["lr"], [0.1, 0.05, 0.025, 0.025]),
      f"staircase schedule {hist.history['lr']}")

# ----------------------------------- fp16 compression and gradient_predivide_factor in fit
ref = make_model()
init_w = weights(ref)
ref.compile(optimizer=keras.optimizers.SGD(0.5), loss="sparse_categorical_crossentropy")
ref.fit(X[:4 * GLOBAL_B], Y[:4 * GLOBAL_B], batch_size=GLOBAL_B, shuffle=False, verbose=0)
for label, kwargs, tol in [("fp16 compression", {"compression": hvd.Compression.fp16}, 5e-3),
                           ("predivide 2", {"gradient_predivide_factor": 2.0}, 1e-5)]:
    model = make_model()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.5), **kwargs),
                  loss="sparse_categorical_crossentropy")
    model.fit(shard(X, 4), shard(Y, 4), batch_size=LOCAL_B, shuffle=False, verbose=0)
    err = max(rel_err(a, b) for a, b in zip(weights(model), weights(ref)))
    check(err < tol, f"{label}: relative weight error {err:.2e}")
    same_on_all_ranks(weights(model), label)

# ------------------------------------------------------------------ save and load
model = make_model()
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1, momentum=0.9)),
              loss="sparse_categorical_crossentropy")
model.fit(shard(X, 3), shard(Y, 3), batch_size=LOCAL_B, shuffle=False, verbose=0)
with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, f"model_rank{R}.keras")
    model.save(path)
    plain = keras.models.load_model(path)
    # (On torch, keras.optimizers.SGD(...) makes a backend subclass also named SGD.)
    check(isinstance(plain.optimizer, keras.optimizers.SGD) and
          not isinstance(plain.optimizer, _DistributedOptimizer),
          f"loads without hvdlite as plain SGD ({type(plain.optimizer)})")
    again = hvd.load_model(path)
    check(isinstance(again.optimizer, keras.optimizers.SGD) and
          isinstance(again.optimizer, _DistributedOptimizer), "hvd.load_model wraps the optimizer")
    saved = [np_of(v) for v in model.optimizer.variables]
    loaded = [np_of(v) for v in again.optimizer.variables]
    check(all(np.array_equal(a, b) for a, b in zip(saved, loaded)), "optimizer state kept")
    for m in (again, model):
        m.fit(shard(X, 2, 3 * GLOBAL_B), shard(Y, 2, 3 * GLOBAL_B), batch_size=LOCAL_B,
              shuffle=False, verbose=0)
    err = max(rel_err(a, b) for a, b in zip(weights(again), weights(model)))
    check(err < 1e-6, f"training resumes identically after hvd.load_model ({err:.2e})")

# ------------------------------------- local layers: gradients and values stay per rank
model = make_model()
head = model.layers[-1]
model.compile(optimizer=hvd.PartialDistributedOptimizer(keras.optimizers.SGD(0.1),
                                                        local_layers=head),
              loss="sparse_categorical_crossentropy")
model.fit(shard(X, 3), shard(Y, 3), batch_size=LOCAL_B, shuffle=False, verbose=0,
          callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(
              0, local_variables=head.weights)])
body, own = [np_of(w) for w in model.layers[0].weights], [np_of(w) for w in head.weights]
same_on_all_ranks(body, "shared layer of a PartialDistributedOptimizer")
gathered = np_of(hvd.allgather(own[0][None]))
check(N == 1 or not np.array_equal(gathered[0], gathered[1]), "local layer stays per rank")

# ------------------------------------------------------------------------- errors
expect_error(TypeError, lambda: hvd.DistributedOptimizer(keras.optimizers.SGD),
             ["class SGD"], "optimizer class instead of instance")
expect_error(TypeError, lambda: hvd.DistributedOptimizer("sgd"), ["str"], "string optimizer")
expect_error(ValueError, lambda: hvd.DistributedOptimizer(
    hvd.DistributedOptimizer(keras.optimizers.SGD(0.1))), ["already"], "double wrapping")
expect_error(hvd.HvdliteInvalidArgumentError,
             lambda: hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), op=hvd.Adasum,
                                              shard_optimizer_state=True),
             ["Adasum"], "Adasum with sharded state")
expect_error(ValueError, lambda: hvd.DistributedOptimizer(
    keras.optimizers.SGD(0.1), gradient_predivide_factor=2.0, op=hvd.Sum),
    ["gradient_predivide_factor", "Average"], "predivide with Sum")
expect_error(ValueError, lambda: hvd.DistributedOptimizer(
    keras.optimizers.SGD(0.1), backward_passes_per_step=0), ["backward_passes_per_step"],
    "bpps 0")

done("keras_misc", R)
