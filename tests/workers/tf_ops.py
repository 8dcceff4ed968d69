"""hvdlite.tensorflow collectives, eagerly and inside tf.function, with their gradients,
dtypes, error messages and the object/variable helpers. Run by tests/tensorflow/test_ops.py
at 2 and 3 ranks. Any failed check raises; hvdlite's excepthook then aborts the job.
"""
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tf_common import check, done, expect_error  # noqa: E402

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import hvdlite.tensorflow as hvd  # noqa: E402

hvd.init()
R, N = hvd.rank(), hvd.size()
RANKS = np.arange(N, dtype=np.float64)
MEAN_W = float(np.mean(RANKS + 1))          # mean over ranks of (rank + 1)


def close(a, b, tol=1e-6):
    return np.allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=tol, atol=tol)


# Both execution modes run the same checks: MODE(fn) runs fn eagerly or as a tf.function.
MODES = {"eager": lambda fn: fn, "graph": lambda fn: tf.function(fn)}

for mode, wrap in MODES.items():
    # ---------------------------------------------------------------- allreduce
    dtypes = [tf.uint8, tf.int8, tf.int32, tf.int64, tf.float16, tf.bfloat16, tf.float32,
              tf.float64]
    for dtype in dtypes:
        x = tf.cast(tf.reshape(tf.range(6), [2, 3]) + R + 1, dtype)
        base = np.arange(6).reshape(2, 3)
        want_sum = sum(base + r + 1 for r in range(N))
        got = wrap(lambda t: hvd.allreduce(t, op=hvd.Sum))(x)
        check(got.dtype == dtype and got.shape == (2, 3), f"{mode} allreduce {dtype.name} dtype/shape")
        check(close(tf.cast(got, tf.float64), want_sum, 1e-2), f"{mode} allreduce Sum {dtype.name}")
        for op, ref in [(hvd.Min, base + 1), (hvd.Max, base + N)]:
            got = wrap(lambda t, op=op: hvd.allreduce(t, op=op))(x)
            check(close(tf.cast(got, tf.float64), ref, 1e-2), f"{mode} allreduce op={op} {dtype.name}")
    x = tf.constant([1.0, 2.0, 3.0]) * (R + 1)
    got = wrap(lambda t: hvd.allreduce(t))(x)  # default op: Average
    check(close(got, np.array([1.0, 2.0, 3.0]) * MEAN_W), f"{mode} allreduce Average")
    got = wrap(lambda t: hvd.allreduce(t, op=hvd.Product))(tf.fill([2], float(R + 1)))
    check(close(got, [np.prod(RANKS + 1)] * 2), f"{mode} allreduce Product")
    got = wrap(lambda t: hvd.allreduce(t, op=hvd.Sum, prescale_factor=2.0,
                                       postscale_factor=0.5))(x)
    check(close(got, np.array([1.0, 2.0, 3.0]) * np.sum(RANKS + 1)), f"{mode} pre/postscale")
    got = wrap(lambda t: hvd.allreduce(t, average=False))(x)
    check(close(got, np.array([1.0, 2.0, 3.0]) * np.sum(RANKS + 1)), f"{mode} average=False")
    b = tf.constant([R == 0, True, False])
    got = wrap(lambda t: hvd.allreduce(t, op=hvd.Max))(b)
    check(got.dtype == tf.bool and list(got.numpy()) == [True, True, False], f"{mode} bool Max")
    s = wrap(lambda t: hvd.allreduce(t, op=hvd.Sum))(tf.constant(float(R)))
    check(s.shape == () and close(s, RANKS.sum()), f"{mode} scalar allreduce")
    for comp in (hvd.Compression.fp16, hvd.Compression.bf16):
        got = wrap(lambda t, c=comp: hvd.allreduce(t, compression=c))(x)
        check(got.dtype == tf.float32 and close(got, np.array([1, 2, 3]) * MEAN_W, 1e-2),
              f"{mode} allreduce compression {comp.__name__}")

    class Int8Compressor(hvd.Compressor):
        @staticmethod
        def compress(tensor):
            return tf.cast(tensor, tf.int32), tensor.dtype

        @staticmethod
        def decompress(tensor, ctx):
            return tf.cast(tensor, ctx)
    got = wrap(lambda t: hvd.allreduce(t, op=hvd.Sum, compression=Int8Compressor))(x)
    check(close(got, np.array([1, 2, 3]) * np.sum(RANKS + 1)), f"{mode} custom compressor")

    # grouped: mixed dtypes in one crossing, one with wire compression
    ts = [tf.fill([3], float(R)), tf.fill([2, 2], R + 1), tf.cast(tf.fill([4], R), tf.bfloat16),
          tf.constant(float(R), tf.float64)]
    got = wrap(lambda *a: hvd.grouped_allreduce(list(a), op=hvd.Sum,
                                                compression=hvd.Compression.fp16))(*ts)
    check([g.dtype for g in got] == [t.dtype for t in ts], f"{mode} grouped dtypes")
    check(close(got[0], [RANKS.sum()] * 3) and close(got[1], np.full([2, 2], np.sum(RANKS + 1)))
          and close(tf.cast(got[2], tf.float64), [RANKS.sum()] * 4) and close(got[3], RANKS.sum()),
          f"{mode} grouped values")

    # ---------------------------------------------------------------- allgather
    x = tf.fill([R + 1, 2], float(R))
    got = wrap(lambda t: hvd.allgather(t))(x)
    want = np.concatenate([np.full([r + 1, 2], float(r)) for r in range(N)])
    check(got.shape == want.shape and close(got, want), f"{mode} allgather uneven")
    got = wrap(lambda t: hvd.allgather(t))(tf.cast(x, tf.bfloat16))
    check(got.dtype == tf.bfloat16 and close(tf.cast(got, tf.float64), want), f"{mode} allgather bf16")
    got = wrap(lambda t: hvd.allgather(t))(tf.constant(R, tf.int64))
    check(list(got.numpy()) == list(range(N)), f"{mode} allgather scalar")

    # ---------------------------------------------------------------- broadcast
    for root in range(N):
        got = wrap(lambda t, root=root: hvd.broadcast(t, root))(tf.fill([3], float(R)))
        check(close(got, [root] * 3), f"{mode} broadcast root {root}")
    got = wrap(lambda t: hvd.broadcast(t, N - 1))(tf.constant([R == N - 1]))
    check(bool(got.numpy()[0]), f"{mode} broadcast bool")

    # ---------------------------------------------------------------- alltoall
    x = tf.reshape(tf.range(2 * N * 2), [2 * N, 2]) + 100 * R
    got = wrap(lambda t: hvd.alltoall(t))(x)
    want = np.concatenate([(np.arange(2 * N * 2).reshape(2 * N, 2) + 100 * r)[2 * R:2 * R + 2]
                           for r in range(N)])
    check(close(got, want), f"{mode} alltoall equal splits")
    splits = [r + 1 for r in range(N)]  # rank r sends r'+1 rows to rank r'
    x = tf.fill([sum(splits), 1], float(R))
    got, rsplits = wrap(lambda t, s: hvd.alltoall(t, splits=s))(x, tf.constant(splits))
    check(list(rsplits.numpy()) == [R + 1] * N, f"{mode} alltoall received splits")
    check(close(got[:, 0], np.repeat(RANKS, R + 1)), f"{mode} alltoall uneven values")

    # ---------------------------------------------------------------- reducescatter
    rows = 2 * N + 1
    x = tf.reshape(tf.range(rows * 2, dtype=tf.float32), [rows, 2]) * (R + 1)
    mine = rows // N + (1 if R < rows % N else 0)
    start = R * (rows // N) + min(R, rows % N)
    full = np.arange(rows * 2).reshape(rows, 2)
    for op, factor in [(hvd.Sum, np.sum(RANKS + 1)), (hvd.Average, MEAN_W)]:
        got = wrap(lambda t, op=op: hvd.reducescatter(t, op=op))(x)
        check(got.shape[0] == mine and close(got, full[start:start + mine] * factor),
              f"{mode} reducescatter op={op}")

    # ---------------------------------------------------------------- gradients
    w = float(R + 1)

    def grad_of(fn, x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = fn(x)
            loss = tf.reduce_sum(y * w)
        return tape.gradient(loss, x)

    x = tf.ones([2, 3])
    g = wrap(lambda t: grad_of(lambda v: hvd.allreduce(v, op=hvd.Sum), t))(x)
    check(close(g, np.full([2, 3], np.sum(RANKS + 1))), f"{mode} grad allreduce Sum")
    g = wrap(lambda t: grad_of(lambda v: hvd.allreduce(v), t))(x)
    check(close(g, np.full([2, 3], MEAN_W)), f"{mode} grad allreduce Average")
    g = wrap(lambda t: grad_of(lambda v: hvd.grouped_allreduce([v, 2 * v], op=hvd.Sum)[1], t))(x)
    check(close(g, np.full([2, 3], 2 * np.sum(RANKS + 1))), f"{mode} grad grouped_allreduce")
    xg = tf.ones([R + 1, 2])
    g = wrap(lambda t: grad_of(lambda v: hvd.allgather(v), t))(xg)
    check(g.shape == (R + 1, 2) and close(g, np.full([R + 1, 2], MEAN_W)), f"{mode} grad allgather")
    g = wrap(lambda t: grad_of(lambda v: hvd.broadcast(v, 0), t))(x)
    check(close(g, np.full([2, 3], MEAN_W if R == 0 else 0.0)), f"{mode} grad broadcast")
    xa = tf.ones([2 * N, 1])
    g = wrap(lambda t: grad_of(lambda v: hvd.alltoall(v), t))(xa)
    check(close(g[:, 0], np.repeat(RANKS + 1, 2)), f"{mode} grad alltoall")
    xr = tf.ones([2 * N, 2])
    g = wrap(lambda t: grad_of(lambda v: hvd.reducescatter(v, op=hvd.Sum) / w, t))(xr)
    check(close(g, np.full([2 * N, 2], N)), f"{mode} grad reducescatter Sum (Horovod: x size)")
    g = wrap(lambda t: grad_of(lambda v: hvd.reducescatter(v, op=hvd.Average) / w, t))(xr)
    check(close(g, np.ones([2 * N, 2])), f"{mode} grad reducescatter Average")
    g = wrap(lambda t: grad_of(lambda v: hvd.reducescatter(v, op=hvd.Sum, prescale_factor=3.0,
                                                           postscale_factor=0.5) / w, t))(xr)
    check(close(g, np.full([2 * N, 2], 1.5 * N)), f"{mode} grad reducescatter Sum, scaled")
    g = wrap(lambda t: grad_of(lambda v: hvd.reducescatter(v, op=hvd.Average,
                                                           postscale_factor=0.25) / w, t))(xr)
    check(close(g, np.full([2 * N, 2], 0.25)), f"{mode} grad reducescatter Average, scaled")

    # ---------------------------------------------------------------- errors name the tensor
    for bad in [tf.complex(tf.ones([2]), tf.ones([2])), tf.ones([2], tf.uint32),
                tf.constant(["a", "b"])]:
        def call(t=bad):
            return wrap(lambda v: hvd.allreduce(v, name="my_tensor"))(t)
        expect_error(hvd.HvdliteInvalidArgumentError, call,
                     ["'my_tensor'", bad.dtype.name], f"{mode} allreduce {bad.dtype.name}")
    if mode == "graph":
        @tf.function
        def named_bad(v):
            return hvd.allgather(tf.identity(v, name="odd_one"))
        expect_error(hvd.HvdliteInvalidArgumentError,
                     lambda: named_bad(tf.ones([2], tf.uint32)), ["odd_one", "uint32"],
                     "graph allgather uint32 names the graph tensor")
    expect_error(hvd.HvdliteInvalidArgumentError,
                 lambda: hvd.allreduce(tf.ones([2], tf.int32), op=hvd.Adasum),
                 ["Adasum"], "Adasum of integers rejected")

    # ---------------------------------------------------------------- tape: sparse gradients
    emb = tf.Variable(tf.ones([6, 2]))
    idx = tf.constant([R % 6, 5])

    def sparse_grads(**kwargs):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.gather(emb, idx)) * w
        tape = hvd.DistributedGradientTape(tape, **kwargs)
        return tape.gradient(loss, [emb])[0]
    want = np.zeros([6, 2])
    for r in range(N):
        for i in (r % 6, 5):
            want[i] += (r + 1) / N
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        g = wrap(sparse_grads)()
    check(isinstance(g, tf.IndexedSlices), f"{mode} sparse grad stays IndexedSlices")
    check(close(tf.convert_to_tensor(g), want), f"{mode} sparse grad (all-gathered) value")
    if mode == "eager":
        check(any("sparse_as_dense" in str(c.message) for c in caught), "sparse warning")
    g = wrap(lambda: sparse_grads(sparse_as_dense=True))()
    check(isinstance(g, tf.Tensor) and close(g, want), f"{mode} sparse_as_dense value")
    expect_error(hvd.HvdliteInvalidArgumentError, lambda: wrap(lambda: sparse_grads(op=hvd.Max))(),
                 ["IndexedSlices", "sparse_as_dense"], f"{mode} sparse grad with op=Max")

    # ---------------------------------------------------------------- broadcast_variables
    v1 = tf.Variable(tf.fill([3], float(R)))
    v2 = tf.Variable(R + 10, dtype=tf.int64)
    def bcast_vars():
        hvd.broadcast_variables([v1, v2], root_rank=N - 1)
    wrap(bcast_vars)()
    check(close(v1, [N - 1] * 3) and int(v2.numpy()) == N - 1 + 10, f"{mode} broadcast_variables")

    # ---------------------------------------------------------------- barrier, join
    def barrier():
        hvd.barrier()
    wrap(barrier)()
    last = wrap(lambda: hvd.join())()
    check(0 <= int(last) < N, f"{mode} join returns a rank")

# ---------------------------------------------------------------------- objects, names
obj = hvd.broadcast_object({"rank": R, "data": [1, 2, 3]} if R == 1 % N else None,
                           root_rank=1 % N)
check(obj == {"rank": 1 % N, "data": [1, 2, 3]}, "broadcast_object")
objs = hvd.allgather_object({"r": R, "pad": "x" * R})
check(objs == [{"r": r, "pad": "x" * r} for r in range(N)], "allgather_object")
# the same explicit name reused with another shape, one after the other
for n in (2, 5, 3):
    got = hvd.allreduce(tf.ones([n]), name="reused", op=hvd.Sum)
    check(close(got, [N] * n), f"name reused with shape {n}")

# Independent collectives in one tf.function run in program order on every rank.
@tf.function
def two_collectives(x):
    a = hvd.allreduce(x, op=hvd.Sum)
    b = hvd.allreduce(x * 2, op=hvd.Sum)
    return a + b


check(close(two_collectives(tf.ones([2])), [3 * N] * 2), "two collectives in one function")

# Mismatched shapes: a clear error on every rank, and the job goes on.
msg = expect_error(hvd.HvdliteError, lambda: hvd.allreduce(tf.ones([R + 2]), name="mismatch"),
                   ["mismatch"], "shape mismatch")
check(close(hvd.allreduce(tf.ones([2]), op=hvd.Sum), [N, N]), "still works after a mismatch")

# DistributedGradientTape keeps nested structures, None gradients and the tape's flags.
a = tf.Variable(1.0)
bvar = tf.Variable(2.0)
unused = tf.Variable(3.0)
with tf.GradientTape(persistent=True) as tape:
    loss = a * w + bvar * 2 * w
dtape = hvd.DistributedGradientTape(tape)
check(isinstance(dtape, tf.GradientTape) and dtape._persistent, "tape keeps persistent")
g = dtape.gradient(loss, {"a": a, "rest": [bvar, unused]})
check(close(g["a"], MEAN_W) and close(g["rest"][0], 2 * MEAN_W) and g["rest"][1] is None,
      "tape nested structure and None")
cvar = tf.Variable(tf.complex(1.0, 1.0), name="cvar")
with tf.GradientTape() as tape:
    closs = tf.math.real(cvar * tf.math.conj(cvar))
expect_error(hvd.HvdliteInvalidArgumentError,
             lambda: hvd.DistributedGradientTape(tape).gradient(closs, [cvar]),
             ["cvar", "complex64"], "tape gradient complex64 names the variable")
expect_error(ValueError, lambda: hvd.DistributedGradientTape(tape, op=hvd.Sum,
                                                             gradient_predivide_factor=2.0),
             ["gradient_predivide_factor"], "predivide needs Average")

done("tf_ops", R)
