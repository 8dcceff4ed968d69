"""Keras model.fit with stateful compression (PowerSGD, top-k, fp16 with error feedback).

For each: ranks end with identical weights, the data bytes each rank sent per step (the
core's transport counters) equal what the reducer promises, and the digits MLP still
learns. Prints one line per compression and "tf_keras_compression OK at N ranks".
"""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402

import hvdlite.tensorflow.keras as hvd  # noqa: E402
from hvdlite import _core  # noqa: E402

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)
hvd.init()
R, N = hvd.rank(), hvd.size()
digits = load_digits()
X = (digits.data / 16.0).astype(np.float32)
Y = digits.target.astype(np.int64)
X_train, Y_train, X_test, Y_test = X[:1400], Y[:1400], X[1400:], Y[1400:]
X_shard, Y_shard = X_train[R::N], Y_train[R::N]
BATCH, EPOCHS = 32, 8
STEPS = EPOCHS * (len(X_shard) // BATCH)


def train(compression):
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(64, activation="relu"),
                              keras.layers.Dense(10, activation="softmax")])
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.05 * N, momentum=0.9),
                                   compression=compression)
    model.compile(optimizer=opt, loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    model.fit(X_shard[:BATCH], Y_shard[:BATCH], batch_size=BATCH, epochs=1, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    _core.transport_stats(reset=True)
    model.fit(X_shard[:len(X_shard) // BATCH * BATCH], Y_shard[:len(X_shard) // BATCH * BATCH],
              batch_size=BATCH, epochs=EPOCHS, verbose=0, shuffle=False)
    sent = _core.transport_stats()["bytes_sent"] / STEPS
    accuracy = float(model.evaluate(X_test, Y_test, verbose=0)[1])
    return model, opt, sent, accuracy


_, _, base_sent, base_acc = train(hvd.Compression.none)
for comp in (hvd.Compression.powersgd(rank=2), hvd.Compression.topk(0.05),
             hvd.Compression.fp16(error_feedback=True)):
    model, opt, sent, acc = train(comp)
    shapes = [tuple(w.shape) for w in model.trainable_weights]
    promised = opt.hvdlite_reducer.expected_bytes_sent(shapes, 4, N)
    assert abs(sent - promised) <= 8 * N * 4, (comp, sent, promised)
    for w in model.get_weights():
        top = hvd.allreduce(tf.constant(w), op=hvd.Max).numpy()
        assert np.array_equal(top, w), f"{comp}: ranks disagree"
    assert acc > 0.6, (comp, acc)     # it learns (10 classes); figures are printed
    if R == 0:
        print(f"keras {comp}: accuracy {acc:.2%} (uncompressed {base_acc:.2%}), bytes/step "
              f"{sent:.0f} (promised {promised}, uncompressed {base_sent:.0f}: "
              f"{base_sent / sent:.2f}x fewer)", flush=True)
if R == 0:
    print(f"tf_keras_compression OK at {N} ranks", flush=True)
hvd.shutdown()
