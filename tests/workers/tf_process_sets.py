"""hvdlite.tensorflow with process_set= at 3 ranks, eagerly and inside tf.function.

Run by tests/tensorflow/test_process_sets.py at 3 ranks. Sets: ``ps02`` = ranks [0, 2] (rank 1
is outside it) and ``ps12`` = ranks [1, 2] (overlapping on rank 2). Every collective kind and
DistributedGradientTape(process_set=...) training are checked against numpy references
computed from every rank's known input; the rank outside a set gets a clear error.
"""
import numpy as np
import tensorflow as tf

tf.config.threading.set_inter_op_parallelism_threads(2)
tf.config.threading.set_intra_op_parallelism_threads(1)

import hvdlite.tensorflow as hvd  # noqa: E402

ps02, ps12 = hvd.ProcessSet([0, 2]), hvd.ProcessSet([1, 2])
hvd.init(process_sets=[ps02, ps12])
R, N = hvd.rank(), hvd.size()
assert N == 3, "this worker needs exactly 3 ranks"


def data(r, shape=(2, 3)):
    """The input rank ``r`` contributes (float32, exact)."""
    return np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) + 10 * r


def equal(a, b):
    a = a.numpy() if hasattr(a, "numpy") else np.asarray(a)
    assert a.shape == np.shape(b) and np.array_equal(a, b), (a, b)


def collectives(ps, x, big, rows, splits):
    """Every collective in ``ps``; returns the results, to be checked outside (eager or not)."""
    return {
        "sum": hvd.allreduce(x, op=hvd.Sum, process_set=ps),
        "avg": hvd.allreduce(x, op=hvd.Average, process_set=ps),
        "min": hvd.allreduce(x, op=hvd.Min, process_set=ps),
        "max": hvd.allreduce(x, op=hvd.Max, process_set=ps),
        "scaled": hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.25,
                                process_set=ps),
        "grouped": hvd.grouped_allreduce([x, 2 * x], op=hvd.Average, process_set=ps),
        "gather": hvd.allgather(x, process_set=ps),
        "ggather": hvd.grouped_allgather([x, big], process_set=ps),
        "bcast": hvd.broadcast(x, root_rank=ps.ranks[-1], process_set=ps),
        "a2a": hvd.alltoall(rows, splits=splits, process_set=ps),
        "rs_sum": hvd.reducescatter(big, op=hvd.Sum, process_set=ps),
        "rs_avg": hvd.reducescatter(big, op=hvd.Average, process_set=ps),
        "grs": hvd.grouped_reducescatter([big, 3 * big], op=hvd.Sum, process_set=ps),
    }


def check_set(ps, mode):
    members, n = ps.ranks, len(ps.ranks)
    me = members.index(R)
    assert ps.included() and ps.size() == n and ps.rank() == me
    assert int(hvd.size_op(ps.process_set_id)) == n and int(hvd.size_op()) == N
    assert int(hvd.process_set_included_op(ps.process_set_id)) == 1
    x, big = data(R), data(R, (2 * n, 3))
    rows = np.concatenate([np.full((me + 1, 2), 100 * R + j, np.float32) for j in range(n)])
    total = sum(data(r) for r in members)
    big_total = sum(data(r, (2 * n, 3)) for r in members)
    args = (tf.constant(x), tf.constant(big), tf.constant(rows), tf.constant([me + 1] * n))
    if mode == "eager":
        out = collectives(ps, *args)
    else:
        out = tf.function(lambda *a: collectives(ps, *a))(*args)
    equal(out["sum"], total)
    equal(out["avg"], total / n)  # the set's size, not the world's
    equal(out["min"], data(members[0]))
    equal(out["max"], data(members[-1]))
    equal(out["scaled"], total / 2)
    equal(out["grouped"][0], total / n)
    equal(out["grouped"][1], 2 * total / n)
    equal(out["gather"], np.concatenate([data(r) for r in members]))
    equal(out["ggather"][1], np.concatenate([data(r, (2 * n, 3)) for r in members]))
    equal(out["bcast"], data(members[-1]))
    received, received_splits = out["a2a"]
    equal(received, np.concatenate([np.full((i + 1, 2), 100 * members[i] + me, np.float32)
                                    for i in range(n)]))
    equal(received_splits, np.arange(1, n + 1, dtype=np.int32))
    piece = slice(2 * me, 2 * me + 2)
    equal(out["rs_sum"], big_total[piece])
    equal(out["rs_avg"], big_total[piece] / n)
    equal(out["grs"][1], 3 * big_total[piece])

    v = tf.Variable(x)
    hvd.broadcast_([v], root_rank=members[0], process_set=ps)
    equal(v, data(members[0]))
    v.assign(x)
    hvd.broadcast_(v, root_rank=members[-1], process_set=ps)  # one variable, not a list
    equal(v, data(members[-1]))
    assert hvd.broadcast_object({"from": R}, root_rank=members[-1], process_set=ps) == \
        {"from": members[-1]}
    assert hvd.allgather_object(R * 7, process_set=ps) == [r * 7 for r in members]

    # gradients over the set, with Horovod's rules
    w = tf.Variable(x)
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(hvd.allreduce(w, op=hvd.Average, process_set=ps))
    equal(tape.gradient(y, w), np.ones_like(x))
    with tf.GradientTape() as tape:
        y = tf.reduce_sum(hvd.reducescatter(w, op=hvd.Sum, process_set=ps))
    # Horovod's rule: a Sum's gradient is the gathered gradient times the set's size
    equal(tape.gradient(y, w), np.full_like(x, n))
    hvd.barrier(process_set=ps)


def check_tape(ps):
    """DistributedGradientTape(process_set=ps) on the members equals full-batch descent."""
    rng = np.random.default_rng(0)
    features = rng.standard_normal((4 * len(ps.ranks), 5))
    targets = rng.standard_normal((4 * len(ps.ranks), 1))
    w0 = rng.standard_normal((5, 1))
    shard = slice(4 * ps.rank(), 4 * ps.rank() + 4)
    w_ref = w0.copy()
    w = tf.Variable(w0)
    for _ in range(3):
        grad_ref = 2 * features.T @ (features @ w_ref - targets) / len(features)
        w_ref = w_ref - 0.1 * grad_ref
        with tf.GradientTape() as tape:
            err = tf.matmul(tf.constant(features[shard]), w) - targets[shard]
            loss = tf.reduce_mean(err * err)
        tape = hvd.DistributedGradientTape(tape, process_set=ps)
        (grad,) = tape.gradient(loss, [w])
        w.assign_sub(0.1 * grad)
    assert np.allclose(w.numpy(), w_ref, rtol=1e-12, atol=1e-12), (w.numpy(), w_ref)


def check_outsider(ps):
    """A rank outside ``ps`` gets a clear error naming the set, and can go on afterwards."""
    x = tf.constant(data(R))
    for call in (lambda: hvd.allreduce(x, process_set=ps),
                 lambda: hvd.allgather(x, process_set=ps),
                 lambda: hvd.broadcast(x, root_rank=ps.ranks[0], process_set=ps),
                 lambda: hvd.reducescatter(x, process_set=ps),
                 lambda: hvd.barrier(process_set=ps)):
        try:
            call()
        except (ValueError, tf.errors.InvalidArgumentError) as e:
            assert "not a member of process set" in str(e), e
            assert isinstance(e, tf.errors.OpError), f"{type(e)} is no tf.errors.OpError"
        else:
            raise AssertionError(f"rank {R} outside {ps} was not refused")
    assert ps.included() is False
    assert int(hvd.process_set_included_op(ps.process_set_id)) == 0
    assert int(hvd.size_op(ps.process_set_id)) == len(ps.ranks)


for ps in (ps02, ps12):
    if ps.included():
        check_set(ps, "eager")
        check_set(ps, "tf.function")
        check_tape(ps)
    else:
        check_outsider(ps)
    hvd.barrier()


@tf.function
def in_my_sets(x):
    """Unnamed collectives of only the sets this rank is in (rank 2 builds both sets', ranks 0
    and 1 one each): a graph's generated names must be counted per set to agree."""
    return [hvd.allreduce(x, op=hvd.Sum, process_set=ps) for ps in (ps02, ps12) if ps.included()]


mine = [ps for ps in (ps02, ps12) if ps.included()]
for ps, got in zip(mine, in_my_sets(tf.constant(data(R)))):
    equal(got, sum(data(r) for r in ps.ranks))
equal(hvd.allreduce(tf.constant(data(R)), op=hvd.Average), sum(data(r) for r in range(N)) / N)
print(f"rank {R}: tensorflow process sets ok", flush=True)
