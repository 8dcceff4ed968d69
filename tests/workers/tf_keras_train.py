"""Keras 3 training at N ranks equals single-process training on the global batch.

Each global batch of B rows is cut into N equal shards; rank r trains on shard r with
``shuffle=False``. Keras' losses are means over the local batch, so averaging gradients
over equal shards gives the gradient of the global batch: the weights after K steps must
match those of one process training on the whole global batches (every rank computes
that reference itself, without hvdlite).

Covered: model.fit with SGD(momentum) and Adam, train_on_batch, a custom tf.function loop
with DistributedGradientTape, backward_passes_per_step=2, the broadcast and metric
callbacks, gradient_predivide_factor, fp16 wire compression, and identical weights on all
ranks. Run by tests/tensorflow/test_keras.py.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tf_common import check, done, rel_err  # noqa: E402

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

import hvdlite.tensorflow.keras as hvd  # noqa: E402
import hvdlite.tensorflow as hvd_tf  # noqa: E402

hvd.init()
R, N = hvd.rank(), hvd.size()
TOL = 1e-5
LOCAL_B = 16
GLOBAL_B = LOCAL_B * N
K = 8                      # optimizer steps per scenario

digits = load_digits()
X_ALL = (digits.data / 16.0).astype(np.float32)
Y_ALL = digits.target.astype(np.int64)
X = X_ALL[:K * GLOBAL_B * 2]
Y = Y_ALL[:K * GLOBAL_B * 2]


def shard(a, steps):
    """Rank R's rows of each of the first ``steps`` global batches, in order."""
    parts = [a[s * GLOBAL_B + R * LOCAL_B: s * GLOBAL_B + (R + 1) * LOCAL_B] for s in range(steps)]
    return np.concatenate(parts)


def make_model(seed=1):
    keras.utils.set_random_seed(seed)
    model = keras.Sequential([keras.Input((64,)),
                              keras.layers.Dense(32, activation="relu"),
                              keras.layers.Dense(10, activation="softmax")])
    return model


def weights(model):
    return [np.array(w) for w in model.get_weights()]


def compare(got, want, what):
    err = max(rel_err(g, w) for g, w in zip(got, want))
    check(err < TOL, f"{what}: relative weight error {err:.2e} >= {TOL}")
    return err


def same_on_all_ranks(ws, what):
    root = hvd.broadcast_object(ws, root_rank=0)
    diff = max(float(np.max(np.abs(a - b))) for a, b in zip(ws, root))
    check(diff == 0.0, f"{what}: weights differ between ranks by {diff}")


def reference_fit(opt_fn, init_w, steps):
    model = make_model()
    model.set_weights(init_w)
    model.compile(optimizer=opt_fn(), loss="sparse_categorical_crossentropy")
    model.fit(X[:steps * GLOBAL_B], Y[:steps * GLOBAL_B], batch_size=GLOBAL_B,
              shuffle=False, epochs=1, verbose=0)
    return weights(model)


loss_fn = keras.losses.SparseCategoricalCrossentropy()
results = {}

# ---------------------------------------------------------------- model.fit, SGD and Adam
for opt_name, opt_fn, kwargs in [
        ("SGD", lambda: keras.optimizers.SGD(0.5, momentum=0.9), {}),
        ("Adam", lambda: keras.optimizers.Adam(0.01), {}),
        ("SGD+predivide", lambda: keras.optimizers.SGD(0.5), {"gradient_predivide_factor": 2.0}),
]:
    model = make_model()
    init_w = weights(model)
    if R != 0:  # ranks start apart; the broadcast callback must fix it before step 1
        model.set_weights([w + 0.5 for w in init_w])
    opt = hvd.DistributedOptimizer(opt_fn(), **kwargs)
    check(type(opt).__name__ == type(opt_fn()).__name__, "wrapped class keeps its name")
    check(isinstance(opt, type(opt_fn())), "wrapped optimizer is an instance of its class")
    model.compile(optimizer=opt, loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    hist = model.fit(shard(X, K), shard(Y, K), batch_size=LOCAL_B, shuffle=False, epochs=1,
                     verbose=0,
                     callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0),
                                hvd.callbacks.MetricAverageCallback()])
    got = weights(model)
    ref = reference_fit(opt_fn, init_w, K)
    results[f"fit/{opt_name}"] = compare(got, ref, f"model.fit {opt_name}")
    same_on_all_ranks(got, f"model.fit {opt_name}")
    # MetricAverageCallback: the epoch logs are the same averaged numbers on every rank.
    logs = {k: v[-1] for k, v in hist.history.items()}
    root_logs = hvd.broadcast_object(logs, root_rank=0)
    check(all(abs(logs[k] - root_logs[k]) < 1e-12 for k in logs), f"averaged metrics {logs}")
    check(int(opt.iterations.numpy()) == K, "iterations counts the steps")

# ----------------------------------------------------------------------- train_on_batch
model = make_model()
init_w = weights(model)
model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.Adam(0.01)),
              loss="sparse_categorical_crossentropy")
xs, ys = shard(X, K), shard(Y, K)
for s in range(K):
    model.train_on_batch(xs[s * LOCAL_B:(s + 1) * LOCAL_B], ys[s * LOCAL_B:(s + 1) * LOCAL_B])
results["train_on_batch/Adam"] = compare(weights(model), reference_fit(
    lambda: keras.optimizers.Adam(0.01), init_w, K), "train_on_batch Adam")
same_on_all_ranks(weights(model), "train_on_batch")

# ------------------------------------------- custom loop with DistributedGradientTape
for opt_name, opt_fn in [("SGD", lambda: keras.optimizers.SGD(0.5, momentum=0.9)),
                         ("Adam", lambda: keras.optimizers.Adam(0.01))]:
    model = make_model()
    init_w = weights(model)
    if R != 0:
        model.set_weights([w - 0.25 for w in init_w])
    opt = opt_fn()
    hvd_tf.broadcast_variables(model.variables, root_rank=0)

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        tape = hvd_tf.DistributedGradientTape(tape)
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    xs, ys = shard(X, K), shard(Y, K)
    for s in range(K):
        train_step(tf.constant(xs[s * LOCAL_B:(s + 1) * LOCAL_B]),
                   tf.constant(ys[s * LOCAL_B:(s + 1) * LOCAL_B]))
    results[f"tape/{opt_name}"] = compare(weights(model), reference_fit(opt_fn, init_w, K),
                                          f"DistributedGradientTape {opt_name}")
    same_on_all_ranks(weights(model), f"tape {opt_name}")

# Eager tape (no tf.function), fp16 wire compression: close, not exact.
model = make_model()
init_w = weights(model)
opt = keras.optimizers.SGD(0.5)
xs, ys = shard(X, K), shard(Y, K)
for s in range(K):
    with tf.GradientTape() as tape:
        loss = loss_fn(ys[s * LOCAL_B:(s + 1) * LOCAL_B],
                       model(xs[s * LOCAL_B:(s + 1) * LOCAL_B], training=True))
    tape = hvd_tf.DistributedGradientTape(tape, compression=hvd_tf.Compression.fp16)
    grads = tape.gradient(loss, model.trainable_variables)
    opt.apply_gradients(zip(grads, model.trainable_variables))
ref = reference_fit(lambda: keras.optimizers.SGD(0.5), init_w, K)
err = max(rel_err(g, w) for g, w in zip(weights(model), ref))
check(err < 5e-3, f"eager tape with fp16 compression: relative error {err:.2e}")
results["tape-eager/SGD/fp16"] = err
same_on_all_ranks(weights(model), "tape fp16")

# ------------------------------------------------------- backward_passes_per_step = 2
# Horovod's semantics: gradients of 2 consecutive calls are summed locally, all-reduced
# (averaged over ranks) and applied once; iterations counts both calls.
model = make_model()
init_w = weights(model)
opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.25), backward_passes_per_step=2)
model.compile(optimizer=opt, loss="sparse_categorical_crossentropy")
model.fit(shard(X, 2 * K), shard(Y, 2 * K), batch_size=LOCAL_B, shuffle=False, epochs=1,
          verbose=0)
ref_model = make_model()
ref_model.set_weights(init_w)
ref_opt = keras.optimizers.SGD(0.25)
for s in range(K):
    acc = None
    for p in range(2):
        b = (2 * s + p) * GLOBAL_B
        with tf.GradientTape() as tape:
            loss = loss_fn(Y[b:b + GLOBAL_B], ref_model(X[b:b + GLOBAL_B], training=True))
        g = tape.gradient(loss, ref_model.trainable_variables)
        acc = g if acc is None else [a + x for a, x in zip(acc, g)]
    ref_opt.apply_gradients(zip(acc, ref_model.trainable_variables))
results["fit/SGD/bpps2"] = compare(weights(model), weights(ref_model),
                                   "backward_passes_per_step=2")
check(int(opt.iterations.numpy()) == 2 * K, "bpps: iterations counts every pass")
same_on_all_ranks(weights(model), "bpps2")

if R == 0:
    for k, v in results.items():
        print(f"  {k:24s} max relative weight error {v:.2e}")
done("tf_keras_train", R)
