"""Keras 3 pieces beyond plain fit: learning-rate callbacks (with momentum correction),
metric averaging with validation data, sparse (Embedding) gradients inside model.fit,
LossScaleOptimizer, steps_per_execution, save/load, the hvdlite.keras alias and the
errors for bad optimizers. Run by tests/tensorflow/test_keras.py at 2 ranks.
"""
import os
import sys
import tempfile
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tf_common import check, done, expect_error, rel_err  # noqa: E402

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

import hvdlite.keras as hk  # noqa: E402
import hvdlite.tensorflow.keras as hvd  # noqa: E402

hvd.init()
R, N = hvd.rank(), hvd.size()
LOCAL_B = 16
GLOBAL_B = LOCAL_B * N

check(hk.DistributedOptimizer is hvd.DistributedOptimizer, "hvdlite.keras alias")
check(hk.callbacks.MetricAverageCallback is hvd.callbacks.MetricAverageCallback,
      "hvdlite.keras.callbacks alias")

digits = load_digits()
X = (digits.data / 16.0).astype(np.float32)
Y = digits.target.astype(np.int64)


def shard(a, steps, offset=0):
    return np.concatenate([a[offset + s * GLOBAL_B + R * LOCAL_B:
                             offset + s * GLOBAL_B + (R + 1) * LOCAL_B] for s in range(steps)])


def make_model(seed=1):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((64,)), keras.layers.Dense(16, activation="relu"),
                             keras.layers.Dense(10, activation="softmax")])


def weights(model):
    return [np.array(w) for w in model.get_weights()]


def same_on_all_ranks(ws, what):
    root = hvd.broadcast_object(ws, root_rank=0)
    diff = max(float(np.max(np.abs(a - b))) for a, b in zip(ws, root))
    check(diff == 0.0, f"{what}: weights differ between ranks by {diff}")


def lr_of(opt):
    return float(keras.ops.convert_to_numpy(opt.learning_rate))


# ------------------------------------------------------------- LearningRateWarmupCallback
class Recorder(keras.callbacks.Callback):
    """Records (epoch, batch, lr, velocity before/after the LR callback's adjustment)."""

    def __init__(self):
        super().__init__()
        self.rows, self.epoch, self.prev_velocity = [], 0, None

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        opt = self.model.optimizer
        vel = opt.momentums[0].numpy() if getattr(opt, "momentums", None) else None
        self.rows.append((self.epoch, batch, lr_of(opt), self.prev_velocity, vel))

    def on_train_batch_end(self, batch, logs=None):
        opt = self.model.optimizer
        if getattr(opt, "momentums", None):
            self.prev_velocity = opt.momentums[0].numpy()


STEPS = 4
WARMUP = 2
LR = 0.4
model = make_model()
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(LR, momentum=0.9)),
              loss="sparse_categorical_crossentropy")
rec = Recorder()
hist = model.fit(shard(X, STEPS), shard(Y, STEPS), batch_size=LOCAL_B, epochs=3,
                 shuffle=False, verbose=0,
                 callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                            hvd.callbacks.LearningRateWarmupCallback(LR, warmup_epochs=WARMUP),
                            rec])
for epoch, batch, lr, prev_vel, vel in rec.rows:
    if epoch < WARMUP:
        e = epoch + batch / STEPS + 1.0 / STEPS
        want = LR / N * (e * (N - 1) / WARMUP + 1)
    else:
        want = LR
    check(abs(lr - want) < 1e-6, f"warmup lr at epoch {epoch} batch {batch}: {lr} != {want}")
check(abs(hist.history["lr"][WARMUP - 1] - LR) < 1e-6, "warmup reaches initial_lr")
# momentum correction: when the rate moves old -> new, the velocity is scaled by new/old.
prev_lr = None
n_corrected = 0
for epoch, batch, lr, prev_vel, vel in rec.rows:
    if prev_lr is not None and prev_vel is not None and abs(lr - prev_lr) > 1e-9:
        check(np.allclose(vel, prev_vel * lr / prev_lr, rtol=1e-5, atol=1e-7),
              f"momentum correction at epoch {epoch} batch {batch}")
        n_corrected += 1
    prev_lr = lr
check(n_corrected >= STEPS * WARMUP - 2, f"momentum correction applied ({n_corrected} times)")
same_on_all_ranks(weights(model), "warmup fit")

# ----------------------------------------------------------- LearningRateScheduleCallback
model = make_model()
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)),
              loss="sparse_categorical_crossentropy")
hist = model.fit(shard(X, 2), shard(Y, 2), batch_size=LOCAL_B, epochs=5, shuffle=False,
                 verbose=0, callbacks=[hvd.callbacks.LearningRateScheduleCallback(
                     0.1, multiplier=0.5, start_epoch=1, end_epoch=3, staircase=True)])
want = [0.1, 0.05, 0.025, 0.025, 0.025]
check(np.allclose(hist.history["lr"], want), f"staircase schedule {hist.history['lr']} != {want}")
model = make_model()
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)),
              loss="sparse_categorical_crossentropy")
rec = Recorder()
model.fit(shard(X, 4), shard(Y, 4), batch_size=LOCAL_B, epochs=2, shuffle=False, verbose=0,
          callbacks=[hvd.callbacks.LearningRateScheduleCallback(
              0.1, multiplier=lambda e: 1.0 / (1.0 + e), staircase=False), rec])
for epoch, batch, lr, _, _ in rec.rows:
    check(abs(lr - 0.1 / (1 + epoch + batch / 4)) < 1e-6, f"smooth schedule e{epoch} b{batch}")

# ------------------------------------------ MetricAverageCallback with validation data
model = make_model()
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(0.01)),
              loss="sparse_categorical_crossentropy", metrics=["accuracy"])
val = slice(1500 + R * 100, 1500 + (R + 1) * 100)
hist = model.fit(shard(X, 6), shard(Y, 6), batch_size=LOCAL_B, epochs=2, shuffle=False,
                 verbose=0, validation_data=(X[val], Y[val]),
                 callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                            hvd.callbacks.MetricAverageCallback()])
local = model.evaluate(X[val], Y[val], verbose=0, return_dict=True)
mine = hist.history["val_loss"][-1]
root = hvd.broadcast_object(hist.history, root_rank=0)
check(root == hist.history, "metric histories identical on all ranks")
all_local = hvd.allgather_object(local["loss"])
check(abs(mine - np.mean(all_local)) < 1e-5,
      f"val_loss {mine} is the mean of the ranks' {all_local}")

# ------------------------------------------------------ Embedding: sparse gradients in fit
def emb_model():
    keras.utils.set_random_seed(3)
    return keras.Sequential([keras.Input((4,), dtype="int32"),
                             keras.layers.Embedding(30, 3),
                             keras.layers.Flatten(), keras.layers.Dense(1)])


rng = np.random.default_rng(0)
EX = rng.integers(0, 30, size=(8 * GLOBAL_B, 4)).astype(np.int32)
EY = rng.normal(size=(8 * GLOBAL_B, 1)).astype(np.float32)
ref = emb_model()
ref.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
ref.fit(EX, EY, batch_size=GLOBAL_B, shuffle=False, epochs=1, verbose=0)
for sparse_as_dense in (False, True):
    model = emb_model()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1),
                                                     sparse_as_dense=sparse_as_dense),
                  loss="mse")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(shard(EX, 8), shard(EY, 8), batch_size=LOCAL_B, shuffle=False, epochs=1,
                  verbose=0)
    err = max(rel_err(a, b) for a, b in zip(weights(model), weights(ref)))
    check(err < 1e-5, f"embedding fit sparse_as_dense={sparse_as_dense}: error {err:.2e}")
    warned = any("IndexedSlices" in str(c.message) for c in caught)
    check(warned == (not sparse_as_dense), f"sparse warning iff not sparse_as_dense ({warned})")
    same_on_all_ranks(weights(model), f"embedding sparse_as_dense={sparse_as_dense}")
model = emb_model()
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1),
                                                 backward_passes_per_step=2), loss="mse")
expect_error(ValueError, lambda: model.fit(shard(EX, 2), shard(EY, 2), batch_size=LOCAL_B,
                                           verbose=0),
             ["embedding", "sparse_as_dense"], "bpps>1 with IndexedSlices")

# ----------------------------------------- LossScaleOptimizer, steps_per_execution=2
ref = make_model()
init_w = weights(ref)
ref.compile(optimizer=keras.optimizers.SGD(0.3), loss="sparse_categorical_crossentropy")
ref.fit(X[:6 * GLOBAL_B], Y[:6 * GLOBAL_B], batch_size=GLOBAL_B, shuffle=False, verbose=0)
for label, opt, spe in [
        ("LossScaleOptimizer", keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.3)), 1),
        ("steps_per_execution=2", keras.optimizers.SGD(0.3), 2)]:
    model = make_model()
    model.compile(optimizer=hvd.DistributedOptimizer(opt), loss="sparse_categorical_crossentropy",
                  steps_per_execution=spe)
    model.fit(shard(X, 6), shard(Y, 6), batch_size=LOCAL_B, shuffle=False, verbose=0)
    err = max(rel_err(a, b) for a, b in zip(weights(model), weights(ref)))
    check(err < 1e-5, f"{label}: error {err:.2e}")

# ------------------------------------------------------------------ save and load
model = make_model()
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1, momentum=0.9)),
              loss="sparse_categorical_crossentropy")
model.fit(shard(X, 3), shard(Y, 3), batch_size=LOCAL_B, shuffle=False, verbose=0)
with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, f"model_rank{R}.keras")
    model.save(path)
    plain = keras.models.load_model(path)
    check(type(plain.optimizer) is keras.optimizers.SGD,
          f"loads without hvdlite as plain SGD ({type(plain.optimizer)})")
    again = hvd.load_model(path)
    check(isinstance(again.optimizer, keras.optimizers.SGD) and
          type(again.optimizer) is not keras.optimizers.SGD, "hvd.load_model wraps the optimizer")
    saved = [v.numpy() for v in model.optimizer.variables]
    loaded = [v.numpy() for v in again.optimizer.variables]
    check(all(np.array_equal(a, b) for a, b in zip(saved, loaded)), "optimizer state kept")
    again.fit(shard(X, 2, 3 * GLOBAL_B), shard(Y, 2, 3 * GLOBAL_B), batch_size=LOCAL_B,
              shuffle=False, verbose=0)
    model.fit(shard(X, 2, 3 * GLOBAL_B), shard(Y, 2, 3 * GLOBAL_B), batch_size=LOCAL_B,
              shuffle=False, verbose=0)
    err = max(rel_err(a, b) for a, b in zip(weights(again), weights(model)))
    check(err < 1e-6, f"training resumes identically after hvd.load_model ({err:.2e})")

# ------------------------------------------- eager custom loop, backward_passes_per_step=3
var = keras.Variable(np.zeros(2, np.float32), name="acc_w")
opt = hvd.DistributedOptimizer(keras.optimizers.SGD(1.0), backward_passes_per_step=3,
                               average_aggregated_gradients=True)
for step in range(3):
    opt.apply([tf.fill([2], float((R + 1) * (step + 1)))], [var])
    if step < 2:
        check(np.all(var.numpy() == 0), f"eager bpps: no update at call {step + 1}")
    check(int(opt.iterations.numpy()) == step + 1, "eager bpps: iterations counts every call")
want = -np.mean([(r + 1) * 6 / 3 for r in range(N)])
check(np.allclose(var.numpy(), want), f"eager bpps update {var.numpy()} != {want}")

# ------------------------------------------------------------------------- errors
expect_error(TypeError, lambda: hvd.DistributedOptimizer(
    tf.compat.v1.train.GradientDescentOptimizer(0.1)),
    ["GradientDescentOptimizer", "keras.optimizers.Optimizer", "DistributedGradientTape"],
    "non-Keras optimizer")
expect_error(TypeError, lambda: hvd.DistributedOptimizer(keras.optimizers.SGD),
             ["class SGD"], "optimizer class instead of instance")
expect_error(TypeError, lambda: hvd.DistributedOptimizer("sgd"), ["str"], "string optimizer")
expect_error(ValueError, lambda: hvd.DistributedOptimizer(
    hvd.DistributedOptimizer(keras.optimizers.SGD(0.1))), ["already"], "double wrapping")
expect_error(ValueError,  # hvdlite's HvdliteInvalidArgumentError
             lambda: hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), op=hvd.Adasum,
                                              shard_optimizer_state=True),
             ["Adasum"], "Adasum with sharded state")

cvar = keras.Variable(np.ones(2, np.complex64), name="complex_w")
opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1))
expect_error(hvd.HvdliteInvalidArgumentError,
             lambda: opt.apply([tf.ones([2], tf.complex64)], [cvar]),
             ["complex_w", "complex64"], "complex gradient names the variable")

done("tf_keras_misc", R)
