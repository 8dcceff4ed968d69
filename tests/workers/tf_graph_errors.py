"""A collective that fails inside a graph raises the same tf.errors class as eagerly, with
hvdlite's message: a mismatch is a FailedPreconditionError, bad input an
InvalidArgumentError (not TensorFlow's UnknownError), in a TF1 graph run by a Session and in
a tf.function; the next collective works (Note [error classes in TensorFlow graphs] in
csrc/frameworks/tensorflow/check_status_op.c)."""
import numpy as np
import tensorflow as tf

from tf_common import check, done, expect_error  # noqa: F401 (tf_common sets TF up first)

import hvdlite.tensorflow as hvd

hvd.init()
R, N = hvd.rank(), hvd.size()
assert N == 2, "this worker needs exactly 2 ranks"


def expect_class(cls, run, must_contain, what):
    """``run()`` raises ``cls`` (eagerly hvdlite's subclass of it) naming ``must_contain``."""
    try:
        run()
    except tf.errors.OpError as e:
        check(isinstance(e, cls), f"{what}: raised {type(e).__name__}, expected {cls.__name__}: "
                              f"{e.message[:500]}")
        for s in must_contain:
            check(s in e.message, f"{what}: message {e.message[:500]!r} should name {s!r}")
        return
    raise AssertionError(f"{what}: expected {cls.__name__}, nothing was raised")


def cases(tag):
    """(what, build, error class, what the message names): build() makes the collective's
    graph tensors (or, eagerly, runs it). In a graph the message starts with hvdlite's
    class name too."""
    graph = tag != "eager"
    return [
        ("allreduce shape mismatch",
         lambda: hvd.allreduce(tf.ones([3 + R]), op=hvd.Sum, name=f"{tag}.shape"),
         tf.errors.FailedPreconditionError,
         [f"{tag}.shape", "[3]", "[4]"] + ["HvdliteMismatchError: "] * graph),
        ("broadcast dtype mismatch",
         lambda: hvd.broadcast(tf.ones([2], dtype=tf.float32 if R else tf.int32), 0,
                               name=f"{tag}.dtype"),
         tf.errors.FailedPreconditionError,
         [f"{tag}.dtype", "float32", "int32"] + ["HvdliteMismatchError: "] * graph),
        ("allgather rank mismatch",
         lambda: hvd.allgather(tf.ones([2] * (1 + R)), name=f"{tag}.ndim"),
         tf.errors.FailedPreconditionError, [f"{tag}.ndim"] + ["HvdliteMismatchError: "] * graph),
        ("alltoall bad splits",   # a splits tensor: only checked when the op runs
         lambda: hvd.alltoall(tf.ones([4]), splits=tf.constant([1, 1 + 3 * R]),
                              name=f"{tag}.splits"),
         tf.errors.InvalidArgumentError,
         [f"{tag}.splits"] + ["HvdliteInvalidArgumentError: "] * graph),
    ]


def next_collective_works(run, what):
    out = run(lambda: hvd.allreduce(tf.fill([3], float(R + 1)), op=hvd.Sum))
    check(np.array_equal(out, [3.0, 3.0, 3.0]), f"{what}: the next collective gives {out}")


# Eagerly: the reference the graph modes must match.
for what, build, cls, names in cases("eager"):
    expect_class(cls, build, names, f"eager {what}")
next_collective_works(lambda build: build().numpy(), "eager")

# TF1 graph, tf.compat.v1.Session.run.
with tf.Graph().as_default():
    built = [(what, build(), cls, names) for what, build, cls, names in cases("tf1")]
    x = tf.compat.v1.placeholder(tf.float32, [5, 2])
    summed = hvd.allreduce(x, op=hvd.Sum, name="tf1.ok")
    check(summed.shape.as_list() == [5, 2], f"tf1: static shape kept, {summed.shape}")
    config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=2,
                                      intra_op_parallelism_threads=1)
    with tf.compat.v1.Session(config=config) as sess:
        for what, tensor, cls, names in built:
            expect_class(cls, lambda: sess.run(tensor), names, f"tf1 {what}")
            value = sess.run(summed, {x: np.full([5, 2], R + 1, np.float32)})
            check(np.array_equal(value, np.full([5, 2], 3.0)),
                  f"tf1: the collective after the {what} gives {value}")

# tf.function.
for what, build, cls, names in cases("function"):
    fn = tf.function(build)
    expect_class(cls, fn, names, f"tf.function {what}")
    next_collective_works(lambda b: tf.function(b)().numpy(), f"tf.function after {what}")


@tf.function
def static_shapes(t):
    out = hvd.allreduce(t, op=hvd.Sum, name="function.shape_kept")
    check(out.shape.as_list() == [4, 3], f"tf.function: static shape kept, {out.shape}")
    return out


check(np.array_equal(static_shapes(tf.ones([4, 3])), np.full([4, 3], 2.0)), "tf.function sum")
done("tf graph errors", R)
