"""Data-parallel Keras 3 training of a small classifier on scikit-learn's digits.

    hvdlite-run -np 2 python examples/keras_digits.py
    KERAS_BACKEND=torch hvdlite-run -np 2 python examples/keras_digits.py
    KERAS_BACKEND=jax hvdlite-run -np 2 python examples/keras_digits.py
    # or: mpirun -np 2 python examples/keras_digits.py   (a single process works too)

The script is the same on every Keras backend (TensorFlow by default).

Each rank trains on its own shard of the training set; hvdlite all-reduces the gradients,
so every rank holds the same weights. Only rank 0 prints. Exits with status 1 if the test
accuracy is below --min-accuracy.
"""
import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")


def limit_threads(n):
    """At most ``n`` compute threads per rank, on whichever backend Keras uses."""
    backend = os.environ["KERAS_BACKEND"]
    if backend == "tensorflow":
        import tensorflow as tf
        tf.config.threading.set_intra_op_parallelism_threads(n)
        tf.config.threading.set_inter_op_parallelism_threads(2)
    elif backend == "torch":
        import torch
        torch.set_num_threads(n)
    elif backend == "jax" and n == 1:   # read when JAX starts
        os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false "
                              "intra_op_parallelism_threads=1")


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    parser.add_argument("--lr", type=float, default=0.002, help="per rank; scaled by size")
    parser.add_argument("--min-accuracy", type=float, default=0.95)
    parser.add_argument("--threads", type=int, default=1, help="compute threads per rank")
    return parser.parse_args()


ARGS = parse_args()
limit_threads(ARGS.threads)

import numpy as np  # noqa: E402
import keras  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

import hvdlite.keras as hvd  # noqa: E402


def main(args):
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    verbose = 1 if rank == 0 else 0
    keras.utils.set_random_seed(1234 + rank)   # different init per rank: the broadcast fixes it

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int32)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.2, random_state=0,
                                                        stratify=y)
    x_shard, y_shard = x_train[rank::size], y_train[rank::size]   # this rank's data

    model = keras.Sequential([
        keras.Input((64,)),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dense(10, activation="softmax"),
    ])
    # Scale the learning rate by the number of ranks (the global batch grows with it) and
    # warm it up from lr to lr * size over the first epochs.
    scaled_lr = args.lr * size
    opt = hvd.DistributedOptimizer(keras.optimizers.Adam(scaled_lr))
    model.compile(optimizer=opt, loss="sparse_categorical_crossentropy", metrics=["accuracy"])

    callbacks = [
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),   # same initial weights everywhere
        hvd.callbacks.MetricAverageCallback(),               # logs averaged over ranks
        hvd.callbacks.LearningRateWarmupCallback(scaled_lr, warmup_epochs=2, verbose=verbose),
    ]
    if rank == 0:
        print(f"Keras backend {keras.backend.backend()}: training on {size} rank(s), "
              f"{len(x_shard)} samples per rank, "
              f"global batch {args.batch_size * size}", flush=True)
    model.fit(x_shard, y_shard, batch_size=args.batch_size, epochs=args.epochs,
              callbacks=callbacks, verbose=verbose)

    # Every rank holds the same weights; each scores its share of the test set and the
    # accuracies are combined with a weighted all-reduce.
    xt, yt = x_test[rank::size], y_test[rank::size]
    _, acc = model.evaluate(xt, yt, verbose=0)
    correct = keras.ops.convert_to_numpy(
        hvd.allreduce(np.array([acc * len(yt), len(yt)], np.float32), op=hvd.Sum))
    test_acc = correct[0] / correct[1]
    if rank == 0:
        print(f"test accuracy: {test_acc:.4f} ({int(round(correct[0]))}/{int(correct[1])})",
              flush=True)
    hvd.shutdown()
    return 0 if test_acc >= args.min_accuracy else 1


if __name__ == "__main__":
    sys.exit(main(ARGS))
