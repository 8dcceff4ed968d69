"""hvdlite.tensorflow with op=hvd.Adasum at a power-of-two number of ranks: allreduce of
float16, bfloat16, float32 and float64 tensors, eagerly and inside tf.function, grouped
allreduce, DistributedGradientTape(op=Adasum) and hvdlite.tensorflow.keras'
DistributedOptimizer(op=Adasum) (gradients combined by Adasum, as in Horovod), against the
float64 reference (adasum_reference.py)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tf_common import check, done, tf  # noqa: E402

import numpy as np  # noqa: E402

import hvdlite.tensorflow as hvd  # noqa: E402
import hvdlite.tensorflow.keras as hvd_keras  # noqa: E402
from adasum_reference import adasum_tree, relative_error, tolerance  # noqa: E402

hvd.init()
R, N = hvd.rank(), hvd.size()
assert N & (N - 1) == 0, "run at a power-of-two number of ranks"
EPS = {tf.float16: 2.0 ** -10, tf.bfloat16: 2.0 ** -7, tf.float32: 2.0 ** -23,
       tf.float64: 2.0 ** -52}

rng = np.random.default_rng(23)
shared = rng.normal(size=(6, 5))
inputs64 = [shared * (r % 3 + 1) + rng.normal(size=(6, 5)) for r in range(N)]


@tf.function
def in_graph(x):
    return hvd.allreduce(x, op=hvd.Adasum, name="graph.adasum")


for dtype in (tf.float16, tf.bfloat16, tf.float32, tf.float64):
    inputs = [tf.cast(tf.constant(x), dtype) for x in inputs64]
    as_np = [tf.cast(x, tf.float64).numpy() for x in inputs]
    want = adasum_tree(as_np)
    tol = tolerance(EPS[dtype], N)
    got = hvd.allreduce(inputs[R], op=hvd.Adasum)
    check(got.dtype == dtype, f"{dtype.name}: dtype kept")
    err = relative_error(tf.cast(got, tf.float64).numpy(), want)
    check(err <= tol, f"allreduce Adasum {dtype.name}: error {err}")
    err = relative_error(tf.cast(in_graph(inputs[R]), tf.float64).numpy(), want)
    check(err <= tol, f"tf.function allreduce Adasum {dtype.name}: error {err}")
    outs = hvd.grouped_allreduce([inputs[R][:2], inputs[R][2:]], op=hvd.Adasum)
    for part, sl in ((outs[0], slice(0, 2)), (outs[1], slice(2, None))):
        err = relative_error(tf.cast(part, tf.float64).numpy(), adasum_tree([x[sl] for x in as_np]))
        check(err <= tol, f"grouped allreduce Adasum {dtype.name}: error {err}")

# DistributedGradientTape: loss = sum(w * x_r) has gradient x_r on rank r.
w = tf.Variable(tf.zeros([6, 5], tf.float64))
xs = [tf.constant(x) for x in inputs64]
with tf.GradientTape() as tape:
    loss = tf.reduce_sum(w * xs[R])
tape = hvd.DistributedGradientTape(tape, op=hvd.Adasum)
(g,) = tape.gradient(loss, [w])
err = relative_error(g.numpy(), adasum_tree(inputs64))
check(err < 1e-12, f"DistributedGradientTape(op=Adasum): error {err}")

# Keras (TensorFlow backend) DistributedOptimizer: one apply of each rank's gradient.
v = tf.Variable(tf.ones([6, 5], tf.float32))
opt = hvd_keras.DistributedOptimizer(tf.keras.optimizers.SGD(0.5), op=hvd.Adasum)
opt.apply_gradients([(tf.constant(inputs64[R], tf.float32), v)])
expected = 1.0 - 0.5 * adasum_tree([x.astype(np.float32) for x in inputs64])
err = relative_error(v.numpy(), expected)
check(err < 1e-6, f"keras DistributedOptimizer(op=Adasum): error {err}")
done("adasum_tf", R)
hvd.shutdown()
