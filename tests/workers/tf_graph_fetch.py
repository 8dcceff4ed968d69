"""A TF1-style graph: fetching one hvdlite collective runs that collective only.

1. A broadcast built after an all-reduce of a placeholder runs without a feed (Horovod's
   usual order: the model and DistributedOptimizer first, broadcast_global_variables last).
2. Running a later collective does not run an earlier in-place broadcast again: a value
   assigned locally after the broadcast survives.
3. Two ``tf.gradients`` of one all-gather, fetched together, run at once without their
   collectives' names clashing.
"""
import numpy as np
import tensorflow as tf

import hvdlite.tensorflow as hvd

tf.compat.v1.disable_eager_execution()
hvd.init()
R, N = hvd.rank(), hvd.size()

x = tf.compat.v1.placeholder(tf.float32, [3])
summed = hvd.allreduce(x * 2.0, op=hvd.Sum, name="fetch.grad")
v = tf.Variable([float(R), float(R)])
bcast = hvd.broadcast_([v], root_rank=0, name="fetch.bcast")
local = v.assign([10.0 + R, 10.0 + R])
later = hvd.allreduce(tf.constant([1.0]), op=hvd.Sum, name="fetch.later")
t = tf.ones([2, 3]) * float(R + 1)
gathered = hvd.allgather(t)
grads = [tf.gradients(gathered, t, tf.ones([2 * N, 3]) * k)[0] for k in (1.0, 2.0)]

with tf.compat.v1.Session() as sess:
    sess.run(tf.compat.v1.global_variables_initializer())
    assert np.array_equal(sess.run(bcast)[0], [0.0, 0.0]), "broadcast without a feed"
    assert np.array_equal(sess.run(summed, {x: np.ones(3, np.float32)}), np.full(3, 2.0 * N))
    sess.run(local)
    assert sess.run(later)[0] == N
    assert np.array_equal(sess.run(v), [10.0 + R, 10.0 + R]), "the broadcast ran again"
    g1, g2 = sess.run(grads)
    alone = sess.run(grads[0])
    assert np.array_equal(g1, alone) and np.array_equal(g2, 2 * alone), (g1, g2, alone)
print(f"rank {R}: graph fetch ok", flush=True)
