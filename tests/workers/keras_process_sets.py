"""hvdlite.keras DistributedOptimizer(process_set=...) at 3 ranks, on the TensorFlow backend.

Run by tests/keras/test_keras_process_sets.py. Ranks 0 and 2 train with model.fit, each on its
half of every batch, averaging gradients over ProcessSet([0, 2]) only; the result must match
one process training on the whole batches, also with shard_optimizer_state=True and
local_steps=1 (PowerSGD: members stay equal). Rank 1, outside the set, is refused by the
set's all-reduce and trains alone meanwhile (disjoint work proceeds independently).
"""
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(2)

import keras  # noqa: E402

import hvdlite.keras as hvd  # noqa: E402

ps = hvd.ProcessSet([0, 2])
hvd.init(process_sets=[ps])
R = hvd.rank()
assert hvd.size() == 3, "this worker needs exactly 3 ranks"

rng = np.random.default_rng(0)
X = rng.standard_normal((48, 6)).astype(np.float32)
Y = rng.standard_normal((48, 1)).astype(np.float32)
STEPS, LOCAL_B = 6, 4


def make_model():
    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(4, activation="tanh"),
                              keras.layers.Dense(1)])
    return model


def train(model, optimizer, x, y, batch):
    model.compile(optimizer=optimizer, loss="mse")
    model.fit(x, y, batch_size=batch, shuffle=False, epochs=1, verbose=0)
    return [np.asarray(w) for w in model.get_weights()]


if ps.included():
    me, n = ps.rank(), ps.size()
    # global batch k is X[k*8:(k+1)*8]; member ``me`` gets its rows me*4..me*4+4
    rows = np.concatenate([np.arange(k * n * LOCAL_B + me * LOCAL_B,
                                     k * n * LOCAL_B + (me + 1) * LOCAL_B) for k in range(STEPS)])
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1, momentum=0.5), process_set=ps)
    got = train(make_model(), opt, X[rows], Y[rows], LOCAL_B)
    want = train(make_model(), keras.optimizers.SGD(0.1, momentum=0.5),
                 X[:STEPS * n * LOCAL_B], Y[:STEPS * n * LOCAL_B], n * LOCAL_B)
    err = max(float(np.max(np.abs(g - w)) / (np.max(np.abs(w)) + 1e-12))
              for g, w in zip(got, want))
    assert err < 1e-5, f"rank {R}: weights differ from full-batch training by {err:.2e}"
    peers = hvd.allgather(np.concatenate([g.ravel() for g in got])[None], process_set=ps)
    assert np.array_equal(np.asarray(peers)[0], np.asarray(peers)[1]), "members diverged"
    print(f"rank {R}: max relative weight error {err:.2e}", flush=True)
    # The options beyond Horovod over the set: sharded state and local SGD (H=1, momentum
    # averaged) equal the full-batch run; PowerSGD keeps the members equal.
    for label, kwargs in [("sharded", {"shard_optimizer_state": True}),
                          ("local SGD H=1", {"local_steps": 1, "average_optimizer_state": True}),
                          ("powersgd", {"compression": hvd.Compression.powersgd(rank=1)})]:
        opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1, momentum=0.5),
                                       process_set=ps, **kwargs)
        got = train(make_model(), opt, X[rows], Y[rows], LOCAL_B)
        if label != "powersgd":
            e = max(float(np.max(np.abs(g - w)) / (np.max(np.abs(w)) + 1e-12))
                    for g, w in zip(got, want))
            assert e < 1e-5, f"rank {R} {label}: weights differ from full-batch by {e:.2e}"
        peers = hvd.allgather(np.concatenate([g.ravel() for g in got])[None], process_set=ps)
        assert np.array_equal(np.asarray(peers)[0], np.asarray(peers)[1]), f"{label} diverged"
    print(f"rank {R}: sharded, local SGD and PowerSGD over the set ok", flush=True)
else:
    try:
        hvd.allreduce(np.ones(3, np.float32), process_set=ps)
    except (ValueError, tf.errors.OpError) as e:
        assert "not a member of process set" in str(e), e
    else:
        raise AssertionError("rank outside the set was not refused")
    # trains alone (no set of its own): plain Keras, untouched by the members' collectives
    train(make_model(), keras.optimizers.SGD(0.1), X, Y, 8)
hvd.allreduce(np.ones(1, np.float32), name="keras.process_sets.done")
print(f"rank {R}: keras process sets ok", flush=True)
