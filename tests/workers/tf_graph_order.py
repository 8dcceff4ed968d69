"""A TF1-style graph whose independent collectives TensorFlow may start in different orders
on the two ranks, with fewer inter-op threads (1, then 2) than collectives.

Each collective's input is created in rank order on rank 0 and in reverse on rank 1, so
the ranks' executors see the collectives become ready in different orders. Unchained, each
rank blocks its inter-op threads in collectives the other rank has not reached, and neither
ever submits what the other waits for. hvdlite chains the collectives of a TF1 graph in
creation order (src/hvdlite/tensorflow/mpi_ops.py, ``cross``), which must make this run. The
test sets HVDLITE_STALL_SHUTDOWN_TIME_SECONDS, so a deadlock ends the job with the stall
inspector's message instead of hanging.
"""
import numpy as np
import tensorflow as tf

import hvdlite.tensorflow as hvd

K = 8
hvd.init()
R, N = hvd.rank(), hvd.size()
assert N == 2, "this worker needs exactly 2 ranks"

for threads in (1, 2):
    with tf.Graph().as_default():
        order = range(K) if R == 0 else reversed(range(K))
        inputs = {i: tf.fill([4], tf.constant(float(i + R)) + 0.0) for i in order}
        outs = [hvd.allreduce(inputs[i], op=hvd.Sum, name=f"order.{threads}.{i}")
                for i in range(K)]
        config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=threads,
                                          intra_op_parallelism_threads=1,
                                          use_per_session_threads=True)
        with tf.compat.v1.Session(config=config) as sess:
            try:
                values = sess.run(outs)
            except tf.errors.OpError as e:
                raise SystemExit(f"rank {R}: {K} collectives of a TF1 graph with {threads} "
                                 f"inter-op thread(s) did not finish: {e.message}")
    for i, v in enumerate(values):
        assert np.array_equal(v, np.full(4, 2 * i + 1, np.float32)), (threads, i, v)
print(f"rank {R}: graph order ok", flush=True)
