"""The parts of Horovod's TensorFlow API beyond the basic collectives: TF-native error
classes, the *_op queries, broadcast_, grouped allgather / reducescatter and their
gradients, IndexedSlices scaling, local gradients (register_local_source,
PartialDistributedGradientTape, PartialDistributedOptimizer), SyncBatchNormalization,
BroadcastGlobalVariablesCallback(local_variables=...). (TF1-style graphs that must not
deadlock: tests/workers/tf_graph_order.py.) Run by tests/tensorflow/test_parity.py at 2 and 3 ranks."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tf_common import check, done, expect_error  # noqa: E402

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import hvdlite  # noqa: E402
import hvdlite.tensorflow as hvd  # noqa: E402
import hvdlite.tensorflow.keras as hvd_keras  # noqa: E402

hvd.init()
R, N = hvd.rank(), hvd.size()
MODES = {"eager": lambda fn: fn, "graph": lambda fn: tf.function(fn)}


def close(a, b, tol=1e-6):
    return np.allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=tol, atol=tol)


# ------------------------------------------------------------------ errors are both kinds
msg = expect_error(tf.errors.FailedPreconditionError,
                   lambda: hvd.allreduce(tf.ones([R + 1]), name="parity.mismatch"),
                   ["parity.mismatch"], "mismatch")
try:
    hvd.allreduce(tf.ones([R + 1]), name="parity.mismatch2")
except hvdlite.HvdliteMismatchError as e:
    check(isinstance(e, tf.errors.OpError), "mismatch error is a tf.errors.OpError")
expect_error(tf.errors.InvalidArgumentError, lambda: hvd.broadcast(tf.ones([2]), N + 3),
             ["root"], "root out of range")
if N & (N - 1):  # Horovod's NotImplementedError for Adasum at other rank counts
    expect_error(NotImplementedError, lambda: hvd.allreduce(tf.ones([2]), op=hvd.Adasum),
                 ["Adasum", f"has {N}"], "Adasum")
else:  # parallel vectors: Adasum averages them
    check(close(hvd.allreduce(tf.ones([2]), op=hvd.Adasum), [1, 1]), "Adasum")
check(close(hvd.allreduce(tf.ones([2]), op=hvd.Sum), [N, N]), "usable after errors")

# ------------------------------------------------------------------------------ queries
for mode, wrap in MODES.items():
    got = wrap(lambda: [hvd.rank_op(), hvd.size_op(), hvd.local_rank_op(), hvd.local_size_op(),
                        hvd.process_set_included_op()])()
    check([int(g) for g in got] == [R, N, hvd.local_rank(), hvd.local_size(), 1],
          f"{mode} *_op queries")

# ---------------------------------------------- broadcast_, grouped allgather/reducescatter
for mode, wrap in MODES.items():
    v = tf.Variable(tf.fill([3], float(R)))
    w = tf.Variable(tf.fill([2, 2], R + 10))
    wrap(lambda: hvd.broadcast_([v, w], N - 1))()
    check(close(v, [N - 1] * 3) and close(w, np.full([2, 2], N - 1 + 10)), f"{mode} broadcast_")

    xs = [tf.fill([R + 1, 2], float(R)), tf.fill([1], R)]
    a, b = wrap(lambda: hvd.grouped_allgather(xs))()
    check(a.shape == (N * (N + 1) // 2, 2) and list(b.numpy()) == list(range(N)),
          f"{mode} grouped_allgather")
    rows = 2 * N + 1
    xs = [tf.ones([rows, 2]) * (R + 1), tf.ones([N]) * (R + 1)]
    out = wrap(lambda: hvd.grouped_reducescatter(xs, op=hvd.Sum, prescale_factor=2.0))()
    mine = rows // N + (1 if R < rows % N else 0)
    total = 2.0 * N * (N + 1) / 2
    check(out[0].shape == (mine, 2) and close(out[0], total) and close(out[1], [total]),
          f"{mode} grouped_reducescatter")

    def grads_of_group(t):
        with tf.GradientTape() as tape:
            tape.watch(t)
            ys = hvd.grouped_reducescatter([t, 2 * t], op=hvd.Sum, postscale_factor=0.5)
            loss = tf.reduce_sum(ys[0]) + tf.reduce_sum(ys[1])
        return tape.gradient(loss, t)
    g = wrap(grads_of_group)(tf.ones([2 * N, 3]))
    check(close(g, np.full([2 * N, 3], 0.5 * N * 3)), f"{mode} grouped_reducescatter grad")

    def grads_of_gather(t):
        with tf.GradientTape() as tape:
            tape.watch(t)
            ys = hvd.grouped_allgather([t, 3 * t])
            loss = tf.reduce_sum(ys[0]) + tf.reduce_sum(ys[1])
        return tape.gradient(loss, t)
    g = wrap(grads_of_gather)(tf.ones([R + 1, 2]))
    check(g.shape == (R + 1, 2) and close(g, np.full([R + 1, 2], 4.0)),
          f"{mode} grouped_allgather grad")

# -------------------------------------------------------------------- IndexedSlices
sl = tf.IndexedSlices(tf.ones([1, 2]) * (R + 1), tf.constant([R]), tf.constant([N, 2]))
expect_error(NotImplementedError, lambda: hvd.allreduce(sl, prescale_factor=2.0),
             ["prescale_factor"], "IndexedSlices prescale")
expect_error(NotImplementedError, lambda: hvd.allreduce(sl, op=hvd.Max), ["Max"],
             "IndexedSlices op=Max")
summed = hvd.allreduce(sl, op=hvd.Sum)
check(close(tf.convert_to_tensor(summed), [[r + 1] * 2 for r in range(N)]), "IndexedSlices Sum")

# ------------------------------------------------------------------- local gradients
model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2), keras.layers.Dense(1)])
for v in model.trainable_variables:
    v.assign(tf.fill(v.shape, float(R + 1)))
x = tf.ones([1, 3])
with tf.GradientTape(persistent=True) as tape:
    loss = tf.reduce_sum(model(x))
local_grads = tape.gradient(loss, model.trainable_variables)
dtape = hvd.PartialDistributedGradientTape(tape, local_layers=[model.layers[0]])
reduced = dtape.gradient(loss, model.trainable_variables)
all_local = hvd.allgather(tf.expand_dims(local_grads[2], 0))
check(close(reduced[0], local_grads[0] / N), "partial tape: local layer's gradient / size")
check(close(reduced[2], tf.reduce_mean(all_local, 0)), "partial tape: shared gradient averaged")
loc, glob = dtape.get_local_and_global_gradients(loss, model.trainable_variables)
check(len(loc) == 2 and len(glob) == 2, "get_local_and_global_gradients")
with tf.GradientTape() as tape2:
    loss2 = tf.reduce_sum(model(x))
t2 = hvd.DistributedGradientTape(tape2)
t2.register_local_source(model.trainable_variables[3])
g2 = t2.gradient(loss2, model.trainable_variables)
check(close(g2[3], local_grads[3] / N), "register_local_source")

opt = hvd_keras.PartialDistributedOptimizer(keras.optimizers.SGD(1.0),
                                            local_layers=model.layers[1])
before = [v.numpy() for v in model.trainable_variables]
opt.apply(local_grads, model.trainable_variables)
after = [v.numpy() for v in model.trainable_variables]
gathered = hvd.allgather(tf.expand_dims(local_grads[0], 0))
check(close(before[0] - after[0], tf.reduce_mean(gathered, 0)), "partial optimizer: shared")
check(close(before[3] - after[3], local_grads[3] / N), "partial optimizer: local / size")

# ------------------------------------------------------------- SyncBatchNormalization
full = np.arange(N * 4 * 2, dtype=np.float32).reshape(N * 4, 2) ** 1.5
mine = full[R * 4:(R + 1) * 4]
sync_bn = hvd.SyncBatchNormalization(axis=1, momentum=0.5)
ref_bn = keras.layers.BatchNormalization(axis=1, momentum=0.5)
ys = sync_bn(mine, training=True)
ref = ref_bn(full, training=True)
check(close(ys, ref.numpy()[R * 4:(R + 1) * 4], 1e-4), "SyncBatchNormalization output")
check(close(sync_bn.moving_variance, ref_bn.moving_variance, 1e-4), "SyncBN moving variance")

# ------------------------------------ BroadcastGlobalVariablesCallback(local_variables=...)
m = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
m.compile(optimizer=keras.optimizers.SGD(0.0), loss="mse")
for v in m.variables:
    v.assign(tf.fill(v.shape, float(R)))
kernel, bias = m.layers[0].kernel, m.layers[0].bias
cb = hvd_keras.callbacks.BroadcastGlobalVariablesCallback(0, local_variables=[bias])
m.fit(np.ones([2, 2]), np.ones([2, 1]), epochs=1, verbose=0, callbacks=[cb])
check(close(kernel, np.zeros([2, 1])) and close(bias, [R]), "broadcast callback local_variables")

# ------------------------------------- broadcast_global_variables; elastic states after sync
try:
    hvd.broadcast_global_variables(0)
except RuntimeError as e:
    check("eager" in str(e), "broadcast_global_variables eagerly says why it cannot")
else:
    check(False, "broadcast_global_variables eagerly raised nothing")
with tf.Graph().as_default():
    gv = tf.compat.v1.Variable(tf.fill([3], float(R)))
    bcast = hvd.broadcast_global_variables(N - 1)
    with tf.compat.v1.Session() as sess:
        sess.run(tf.compat.v1.global_variables_initializer())
        sess.run(bcast)
        check(close(sess.run(gv), [N - 1] * 3), "broadcast_global_variables in a TF1 graph")

# sync() takes rank 0's values AND commits them: restore() after it goes back to them
variables = [tf.Variable(np.full([2, 2], R + 1.0)), tf.Variable(np.full([2], R + 1.0))]
state = hvd.elastic.TensorFlowState(variables, batch=20 + R)
state.sync()
check(close(variables[0], np.ones([2, 2])) and state.batch == 20, "TensorFlowState.sync")
variables[0].assign(np.full([2, 2], 7.0))
state.batch = 21
state.restore()
check(close(variables[0], np.ones([2, 2])) and state.batch == 20,
      "TensorFlowState.restore after sync returns to the synced values")
model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2)])
model.set_weights([np.full([2, 2], R + 1.0), np.full([2], R + 1.0)])
kstate = hvd_keras.elastic.KerasState(model, keras.optimizers.Adam(0.1))
kstate.sync()
model.set_weights([np.zeros([2, 2]), np.zeros([2])])
kstate.restore()
check(all(close(w, np.ones_like(w)) for w in model.get_weights()),
      "KerasState.restore after sync returns to the synced weights")

done("tf_parity", R)
