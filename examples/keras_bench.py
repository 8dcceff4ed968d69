"""Step time of the keras_digits model under ``model.fit``: hvdlite at N ranks against the
same model in one plain process and against ``tf.distribute.MultiWorkerMirroredStrategy``.

    python examples/keras_bench.py                 # runs every configuration, prints a table
    python examples/keras_bench.py --np 2 --steps 200 --hidden 1024,1024

Configurations (each in its own processes, per-replica batch fixed, weak scaling):
  plain         one process, plain Keras, no hvdlite
  hvdlite-1     hvdlite at 1 rank (mpirun -np 1): the cost of the adapter alone
  hvdlite-N     hvdlite at N ranks
  mwms-N        MultiWorkerMirroredStrategy, N workers on localhost (TF_CONFIG, gRPC)
Each worker process uses --threads TensorFlow threads; on a 2-core machine 2 ranks already
fill the CPU. hvdlite ranks also time what limits a step: one tf.numpy_function crossing
with the gradients (no communication), one grouped all-reduce of the gradients from a
tf.function, and the same all-reduce from numpy straight into the core.

Internal modes (used by the driver): --mode plain|hvdlite|mwms.
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", default="all", choices=["all", "plain", "hvdlite", "mwms"])
    p.add_argument("--np", type=int, default=2, help="ranks / workers for the parallel runs")
    p.add_argument("--batch-size", type=int, default=64, help="per replica")
    p.add_argument("--steps", type=int, default=150, help="timed steps (after warm-up)")
    p.add_argument("--warmup", type=int, default=30, help="untimed steps first")
    p.add_argument("--hidden", default="128,64", help="hidden layer widths")
    p.add_argument("--threads", type=int, default=1, help="TF intra-op threads per process")
    p.add_argument("--timeout", type=int, default=300, help="per configuration, seconds")
    p.add_argument("--worker-index", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--ports", default="", help=argparse.SUPPRESS)
    return p.parse_args()


# ------------------------------------------------------------------------- the model

def setup_tf(threads):
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(2)
    return tf


def data(batch):
    import numpy as np
    import tensorflow as tf
    from sklearn.datasets import load_digits
    d = load_digits()
    x = (d.data / 16.0).astype(np.float32)
    y = d.target.astype(np.int64)
    ds = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(batch, drop_remainder=True)
    return ds.prefetch(4)


def make_model(hidden, optimizer):
    import keras
    keras.utils.set_random_seed(0)
    layers = [keras.Input((64,))]
    layers += [keras.layers.Dense(h, activation="relu") for h in hidden]
    layers += [keras.layers.Dense(10, activation="softmax")]
    model = keras.Sequential(layers)
    model.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    return model


def timed_fit(model, ds, args, verbose=0, callbacks=()):
    """Fit warmup + steps batches; return per-step seconds of the timed steps."""
    import keras

    class StepTimer(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.stamps = []

        def on_train_batch_end(self, batch, logs=None):
            self.stamps.append(time.perf_counter())

    timer = StepTimer()
    total = args.warmup + args.steps
    model.fit(ds, steps_per_epoch=total, epochs=1, verbose=verbose,
              callbacks=list(callbacks) + [timer])
    st = timer.stamps[args.warmup - 1:]
    return [b - a for a, b in zip(st, st[1:])]


def summary(step_times, replicas, batch):
    import numpy as np
    t = np.array(step_times)
    return {"median_ms": float(np.median(t) * 1e3), "mean_ms": float(t.mean() * 1e3),
            "p90_ms": float(np.percentile(t, 90) * 1e3),
            "samples_per_s": float(replicas * batch / t.mean())}


def hidden_of(args):
    return [int(h) for h in args.hidden.split(",") if h]


# ------------------------------------------------------------------------ the modes

def run_plain(args):
    setup_tf(args.threads)
    import keras
    model = make_model(hidden_of(args), keras.optimizers.Adam(1e-3))
    res = summary(timed_fit(model, data(args.batch_size), args), 1, args.batch_size)
    print("RESULT " + json.dumps({"config": "plain", **res}), flush=True)


def time_call(fn, n=200, warm=10, barrier=None):
    for _ in range(warm):
        fn()
    if barrier is not None:
        barrier()   # start the timed loop in step on every rank
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - t0) / n


def run_hvdlite(args):
    tf = setup_tf(args.threads)
    import keras
    import numpy as np
    import hvdlite
    import hvdlite.tensorflow as hvd_tf
    import hvdlite.tensorflow.keras as hvd

    hvd.init()
    size = hvd.size()
    model = make_model(hidden_of(args), hvd.DistributedOptimizer(keras.optimizers.Adam(1e-3)))
    steps = timed_fit(model, data(args.batch_size), args,
                      callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    # Every rank reports its mean; the slowest rank sets the pace.
    res = summary(steps, size, args.batch_size)

    # What a step's gradient exchange costs, piece by piece.
    grads = [tf.ones(v.shape, v.dtype) for v in model.trainable_variables]
    arrays = [np.ones(v.shape, np.float32) for v in model.trainable_variables]
    outs = [np.empty_like(a) for a in arrays]

    from hvdlite.tensorflow.mpi_ops import aligned_empty_like

    @tf.function
    def crossing_only(*g):
        return tf.numpy_function(lambda *a: [aligned_empty_like(x) for x in a], list(g),
                                 [x.dtype for x in g], stateful=True)

    @tf.function
    def baseline(*g):
        return [tf.identity(x) for x in g]

    @tf.function
    def graph_allreduce(*g):
        return hvd_tf.grouped_allreduce(list(g), name="bench.graph")

    def numpy_allreduce():
        hvdlite.ops.grouped_allreduce_async(arrays, outs, [f"bench.np.{i}" for i in
                                                           range(len(arrays))]).wait()

    def eager_allreduce():
        hvd_tf.grouped_allreduce(grads, name="bench.eager")

    sync = hvd_tf.barrier
    res["tf_function_us"] = time_call(lambda: baseline(*grads), barrier=sync) * 1e6
    res["crossing_us"] = time_call(lambda: crossing_only(*grads), barrier=sync) * 1e6
    res["graph_allreduce_us"] = time_call(lambda: graph_allreduce(*grads), barrier=sync) * 1e6
    res["eager_allreduce_us"] = time_call(eager_allreduce, barrier=sync) * 1e6
    res["numpy_allreduce_us"] = time_call(numpy_allreduce, barrier=sync) * 1e6
    res["grad_bytes"] = int(sum(a.nbytes for a in arrays))
    all_res = hvd.allgather_object(res)
    if hvd.rank() == 0:
        slowest = max(all_res, key=lambda r: r["mean_ms"])
        merged = dict(slowest)
        merged["samples_per_s"] = size * args.batch_size / (slowest["mean_ms"] / 1e3)
        print("RESULT " + json.dumps({"config": f"hvdlite-{size}", **merged}), flush=True)
    hvd.shutdown()


def _patch_keras_for_mwms(tf):
    """Keras 3.15's TF trainer reduces each step's (scalar) metric values across workers
    with ``strategy.reduce("MEAN", v, axis=0)``, which fails for scalars ("Invalid
    reduction dimension 0 for input with 0 dimensions"): without this patch
    MultiWorkerMirroredStrategy cannot run model.fit at all. Reduce scalars over no axis."""
    from keras.src.backend.tensorflow import trainer as tf_trainer
    original = tf_trainer.reduce_per_replica

    def reduce_per_replica(values, strategy, reduction):
        if (reduction in ("auto", "mean")
                and tf_trainer._collective_all_reduce_multi_worker(strategy)):
            def _reduce(v):
                rank = getattr(getattr(v, "shape", None), "rank", None)
                if rank is None:  # PerReplica: look at a local value
                    local = strategy.experimental_local_results(v)[0]
                    rank = local.shape.rank
                return strategy.reduce("MEAN", v, axis=0 if rank else None)
            return tf.nest.map_structure(_reduce, values)
        return original(values, strategy, reduction)

    tf_trainer.reduce_per_replica = reduce_per_replica


def run_mwms(args):
    ports = args.ports.split(",")
    os.environ["TF_CONFIG"] = json.dumps({
        "cluster": {"worker": [f"localhost:{p}" for p in ports]},
        "task": {"type": "worker", "index": args.worker_index}})
    tf = setup_tf(args.threads)
    import keras
    if os.environ.get("BENCH_DEBUG"):
        keras.config.disable_traceback_filtering()
        tf.debugging.disable_traceback_filtering()
    _patch_keras_for_mwms(tf)
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    n = strategy.num_replicas_in_sync
    import numpy as np
    with strategy.scope():
        model = make_model(hidden_of(args), keras.optimizers.Adam(1e-3))
        # Keras 3.15's fit() under MultiWorkerMirroredStrategy first reduces a PerReplica
        # batch with strategy.reduce to build the metrics and loss, which fails here
        # ("Attempt to convert a value (PerReplica...)"). Build from a plain batch instead
        # and skip that step.
        model._symbolic_build(data_batch=(np.zeros((args.batch_size, 64), np.float32),
                                          np.zeros((args.batch_size,), np.int64)))
        model._maybe_symbolic_build = lambda *a, **k: None
    ds = data(args.batch_size * n)   # global batch; each worker's replica gets batch_size
    opts = tf.data.Options()
    opts.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    ds = ds.with_options(opts)
    res = summary(timed_fit(model, ds, args), n, args.batch_size)
    if args.worker_index == 0:
        print("RESULT " + json.dumps({"config": f"mwms-{n}", **res}), flush=True)


# ---------------------------------------------------------------------------- driver

def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def mpirun():
    try:
        from hvdlite import _core
        path = _core.build_info().get("mpirun")
        if path:
            return path
    except Exception:  # noqa: BLE001
        pass
    return "mpirun"


def launch(cmds, timeout):
    """Start the processes, wait for all; return (rc, output of the first)."""
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    procs = [subprocess.Popen(["timeout", "--kill-after=10", str(timeout)] + c, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for c in cmds]
    outs = [p.communicate()[0] for p in procs]
    rc = max(p.returncode for p in procs)
    return rc, outs[0]


def result_of(output):
    for line in output.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    return None


def run_all(args):
    me = [sys.executable, os.path.abspath(__file__)]
    common = ["--batch-size", str(args.batch_size), "--steps", str(args.steps),
              "--warmup", str(args.warmup), "--hidden", args.hidden,
              "--threads", str(args.threads)]
    mpi = [mpirun(), "--oversubscribe", "--bind-to", "none"]
    configs = [
        ("plain", [me + ["--mode", "plain"] + common]),
        ("hvdlite-1", [mpi + ["-np", "1"] + me + ["--mode", "hvdlite"] + common]),
        (f"hvdlite-{args.np}", [mpi + ["-np", str(args.np)] + me + ["--mode", "hvdlite"]
                                + common]),
    ]
    ports = ",".join(map(str, free_ports(args.np)))
    configs.append((f"mwms-{args.np}", [me + ["--mode", "mwms", "--ports", ports,
                                              "--worker-index", str(i)] + common
                                        for i in range(args.np)]))
    rows = []
    for name, cmds in configs:
        t0 = time.time()
        rc, out = launch(cmds, args.timeout)
        res = result_of(out)
        if res is None:
            tail = "\n".join(out.strip().splitlines()[-15:])
            print(f"{name}: FAILED (rc={rc}, {time.time() - t0:.0f}s)\n{tail}\n", flush=True)
            rows.append({"config": name, "error": f"rc={rc}"})
            continue
        print(f"{name}: done in {time.time() - t0:.0f}s", flush=True)
        rows.append(res)
    hidden = hidden_of(args)
    print(f"\nmodel: 64-{'-'.join(map(str, hidden))}-10 MLP, Adam, batch {args.batch_size} per "
          f"replica, {args.steps} timed steps, {args.threads} TF thread(s) per process, "
          f"{os.cpu_count()} CPU cores")
    print(f"{'config':<12} {'median ms':>10} {'mean ms':>9} {'p90 ms':>8} {'samples/s':>10}")
    for r in rows:
        if "error" in r:
            print(f"{r['config']:<12} {'failed: ' + r['error']:>40}")
            continue
        print(f"{r['config']:<12} {r['median_ms']:>10.2f} {r['mean_ms']:>9.2f} "
              f"{r['p90_ms']:>8.2f} {r['samples_per_s']:>10.0f}")
    for r in rows:
        if "crossing_us" in r:
            print(f"{r['config']}: gradients {r['grad_bytes'] / 1024:.0f} KiB in "
                  f"{len(hidden) * 2 + 2} tensors. Calling a tf.function that passes them "
                  f"through: {r['tf_function_us']:.0f} us; with one numpy_function crossing "
                  f"{r['crossing_us']:.0f} us; grouped all-reduce from a tf.function "
                  f"{r['graph_allreduce_us']:.0f} us, eagerly {r['eager_allreduce_us']:.0f} "
                  f"us, from numpy into the core {r['numpy_allreduce_us']:.0f} us")
    print("RESULTS " + json.dumps(rows))


def main():
    args = parse_args()
    {"all": run_all, "plain": run_plain, "hvdlite": run_hvdlite, "mwms": run_mwms}[args.mode](args)


if __name__ == "__main__":
    main()
