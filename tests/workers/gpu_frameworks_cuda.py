"""TensorFlow and JAX GPU arrays through hvdlite on a real GPU (DLPack, convert/dlpack_arrays.py),
and Keras training on them (run_eagerly: compiled steps cross to the host by construction).
Run by scripts/device_check.sh and tests/gpu/test_dlpack_adapters.py at 2 ranks; a framework
that is not installed or sees no GPU is skipped, and said so. Each rank uses GPU
local_rank % count. Checks against values computed here; at 2 ranks a float32 sum is one
addition per element, so it must match bitwise."""
import importlib.util
import os
import sys

import numpy as np

import hvdlite as hvd
from worker_checks import count, named_check as check  # noqa: E402

# The ranks may share one GPU: JAX must not claim most of its memory up front.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
hvd.init()
rank, size, local = hvd.rank(), hvd.size(), hvd.local_rank()


def noise(n, r):
    return np.random.default_rng(r).standard_normal(n).astype(np.float32)


def want_sum(n, i):
    total = noise(n, i)
    for r in range(1, size):
        total = total + noise(n, 10 * r + i)
    return total


SIZES = (1000, 3_000_001, 17)  # the second one pipelined (HVDLITE_PIPELINE_PIECE_BYTES)
exact = size <= 2


def close(got, want):
    return np.array_equal(got, want) if exact else np.allclose(got, want, rtol=1e-5, atol=1e-5)


def installed(module):
    """Whether ``module`` is a real package: tests/tensorflow on sys.path (the device check
    puts tests/ there) is otherwise found as a namespace package of that name."""
    spec = importlib.util.find_spec(module)
    return spec is not None and spec.origin is not None


def tensorflow_part():
    if not installed("tensorflow"):
        return "TensorFlow is not installed"
    import tensorflow as tf
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return "TensorFlow sees no GPU"
    import hvdlite.tensorflow as htf
    from hvdlite.convert import dlpack_arrays
    device = f"/GPU:{local % len(gpus)}"
    with tf.device(device):
        xs = [tf.constant(noise(n, 10 * rank + i)) * 1.0 for i, n in enumerate(SIZES)]
    check("tf: GPU tensors taken by the core", dlpack_arrays.on_one_gpu(xs))
    outs = htf.grouped_allreduce(xs, op=htf.Sum)
    for i, (n, o) in enumerate(zip(SIZES, outs)):
        check(f"tf: on the GPU [{n}]", "GPU" in o.device, o.device)
        check(f"tf: sum [{n}]", close((o * 1.0).numpy(), want_sum(n, i)))
    avg = htf.allreduce(xs[1])
    check("tf: average", np.allclose(avg.numpy(), want_sum(SIZES[1], 1) / size, rtol=1e-5, atol=1e-6))
    return None


def jax_part():
    if not installed("jax"):
        return "JAX is not installed"
    import jax
    import jax.numpy as jnp
    try:
        gpus = [d for d in jax.devices() if d.platform == "gpu"]
    except RuntimeError:
        gpus = []
    if not gpus:
        return "JAX sees no GPU"
    from hvdlite.convert import dlpack_arrays, jax_arrays
    dev = gpus[local % len(gpus)]
    xs = [jax.device_put(jnp.asarray(noise(n, 10 * rank + i)), dev) * 1.0 for i, n in enumerate(SIZES)]
    check("jax: GPU arrays taken by the core", dlpack_arrays.on_one_gpu(xs))
    outs = jax_arrays.grouped_allreduce(xs, [f"jax.{i}" for i in range(len(xs))], hvd.Sum, 1.0,
                                        1.0, None, None)
    for i, (n, o) in enumerate(zip(SIZES, outs)):
        check(f"jax: on the GPU [{n}]", set(o.devices()) == {dev}, str(o.devices()))
        check(f"jax: sum [{n}]", close(np.asarray(o * 1.0), want_sum(n, i)))
    return None


def keras_part(backend):
    if not installed("keras"):
        return "Keras is not installed"
    os.environ["KERAS_BACKEND"] = backend
    import keras
    import hvdlite.keras as hk
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.Input((64,)), keras.layers.Dense(256, activation="relu"),
                              keras.layers.Dense(10, activation="softmax")])
    model.compile(optimizer=hk.DistributedOptimizer(keras.optimizers.SGD(0.05, momentum=0.9)),
                  loss="sparse_categorical_crossentropy", run_eagerly=True)
    g = np.random.default_rng(rank)
    x, y = g.standard_normal((64, 64)).astype(np.float32), g.integers(0, 10, 64)
    model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    flat = np.concatenate([w.ravel() for w in model.get_weights()])
    everyone = hvd.allgather_object(flat)
    check(f"keras ({backend}): replicas identical", all(np.array_equal(flat, o) for o in everyone))
    return None


skipped = []
for label, part in (("TensorFlow", tensorflow_part), ("JAX", jax_part)):
    why = part()
    if why:
        skipped.append(f"{label}: {why}")
if "TensorFlow" not in " ".join(skipped):
    why = keras_part("tensorflow")
elif "JAX" not in " ".join(skipped):
    why = keras_part("jax")
else:
    why = "no framework with a GPU"
if why:
    skipped.append(f"Keras: {why}")
for s in skipped:
    print(f"rank {rank}: skipped {s}", flush=True)
hvd.shutdown()
print(f"rank {rank}: {count()} checks passed", flush=True)
sys.exit(0)
