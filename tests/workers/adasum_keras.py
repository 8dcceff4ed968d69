"""hvdlite.keras with op=hvd.Adasum on the backend KERAS_BACKEND names: all-reduce of backend
tensors (eagerly and compiled) and DistributedOptimizer(op=Adasum), whose gradients are
combined by Adasum before the wrapped optimizer applies them (as Horovod's Keras optimizer
does), against the float64 reference (adasum_reference.py). Power-of-two rank counts."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from keras_common import BACKEND, check, done  # noqa: E402

import numpy as np  # noqa: E402
import keras  # noqa: E402
from keras import ops  # noqa: E402

import hvdlite.keras as hvd  # noqa: E402
from adasum_reference import adasum_tree, relative_error  # noqa: E402

hvd.init()
R, N = hvd.rank(), hvd.size()
assert N & (N - 1) == 0, "run at a power-of-two number of ranks"

rng = np.random.default_rng(17)
shared = rng.normal(size=(4, 3))
inputs = [(shared * (r + 1) + rng.normal(size=(4, 3))).astype(np.float32) for r in range(N)]
want = adasum_tree(inputs)
got = ops.convert_to_numpy(hvd.allreduce(ops.convert_to_tensor(inputs[R]), op=hvd.Adasum,
                                         name="keras.adasum"))
check(relative_error(got, want) < 1e-6, f"allreduce Adasum: error {relative_error(got, want)}")

# DistributedOptimizer: two variables, each rank its own gradients, one apply.
kernel = keras.Variable(np.ones((4, 3), np.float32), name="kernel")
bias = keras.Variable(np.zeros(3, np.float32), name="bias")
grads = [[rng.normal(size=(4, 3)).astype(np.float32) + shared.astype(np.float32),
          rng.normal(size=3).astype(np.float32)] for _ in range(N)]
opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.5), op=hvd.Adasum)
opt.apply([ops.convert_to_tensor(g) for g in grads[R]], [kernel, bias])
for i, (var, start) in enumerate(((kernel, 1.0), (bias, 0.0))):
    expected = start - 0.5 * adasum_tree([g[i] for g in grads])
    err = relative_error(ops.convert_to_numpy(var), expected)
    check(err < 1e-6, f"DistributedOptimizer(op=Adasum) variable {i}: error {err}")
done("adasum_keras", R)
hvd.shutdown()
