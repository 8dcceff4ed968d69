"""Step time of the keras_digits model under ``model.fit``, per Keras backend: hvdlite at N
ranks against the same model in one plain process on that backend, and against the
backend's own multi-process data parallelism where it has one that runs here.

    python examples/keras_bench.py                       # every backend, prints a table
    python examples/keras_bench.py --backends jax --np 2 --steps 200 --hidden 1024,1024

Configurations (each in its own processes, so baselines never see hvdlite initialised;
per-replica batch fixed, weak scaling), for each backend B in --backends:
  B/plain           one process, plain Keras, no hvdlite
  B/nocomm-N        N plain processes at once: the no-communication step with every rank
                    computing (the limit a data-parallel step is measured against)
  B/hvdlite-N       hvdlite.keras at N ranks (mpirun)
  tensorflow/mwms-N tf.distribute.MultiWorkerMirroredStrategy, N workers (TF_CONFIG, gRPC)
  jax/dataparallel-N keras.distribution.DataParallel over N processes (jax.distributed,
                    CPU collectives through gloo), each process feeding its own shard
Each process uses --threads compute threads; on a 2-core machine 2 ranks already fill the
CPU. hvdlite ranks also time one grouped all-reduce of the gradients as the train step
makes it (inside tf.function / jax.jit, eagerly on torch) and the same from numpy.

Internal modes (used by the driver): --mode plain|hvdlite|mwms|dataparallel, with
KERAS_BACKEND set by the driver.
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
BACKENDS = ("tensorflow", "torch", "jax")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", default="all",
                   choices=["all", "plain", "hvdlite", "mwms", "dataparallel"])
    p.add_argument("--backends", default=",".join(BACKENDS),
                   help="Keras backends to measure (mode all)")
    p.add_argument("--np", type=int, default=2, help="ranks / workers for the parallel runs")
    p.add_argument("--batch-size", type=int, default=64, help="per replica")
    p.add_argument("--steps", type=int, default=150, help="timed steps (after warm-up)")
    p.add_argument("--warmup", type=int, default=30, help="untimed steps first")
    p.add_argument("--hidden", default="128,64", help="hidden layer widths")
    p.add_argument("--threads", type=int, default=1, help="compute threads per process")
    p.add_argument("--timeout", type=int, default=300, help="per configuration, seconds")
    p.add_argument("--worker-index", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--ports", default="", help=argparse.SUPPRESS)
    return p.parse_args()


# ------------------------------------------------------------------------- the model

def backend():
    return os.environ["KERAS_BACKEND"]


def limit_threads(threads):
    """At most ``threads`` compute threads in this process, on the current backend."""
    if backend() == "tensorflow":
        import tensorflow as tf
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(2)
    elif backend() == "torch":
        import torch
        torch.set_num_threads(threads)
    elif backend() == "jax" and threads == 1:  # read when JAX starts
        os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false "
                              "intra_op_parallelism_threads=1")


def data(batch, batches, shard=0, shards=1):
    """``batches`` batches of ``batch`` digits rows (repeated as needed), rows of this
    process's shard only when ``shards`` > 1."""
    import numpy as np
    from sklearn.datasets import load_digits
    d = load_digits()
    rows = batch * shards * batches
    idx = np.arange(rows) % len(d.data)
    x = (d.data[idx] / 16.0).astype(np.float32)
    y = d.target[idx].astype(np.int32)
    pick = np.concatenate([np.arange(b * batch * shards + shard * batch,
                                     b * batch * shards + (shard + 1) * batch)
                           for b in range(batches)])
    return x[pick], y[pick]


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


def timed_fit(model, xy, args, verbose=0, callbacks=()):
    """Fit warmup + steps batches; return per-step seconds of the timed steps."""
    import keras

    class StepTimer(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.stamps = []

        def on_train_batch_end(self, batch, logs=None):
            # Wait for the step's result: JAX dispatches steps asynchronously, and a
            # timestamp taken at dispatch would time the queue, not the step.
            if logs and "loss" in logs:
                keras.ops.convert_to_numpy(logs["loss"])
            self.stamps.append(time.perf_counter())

    timer = StepTimer()
    x, y = xy
    batch = None if y is None else args.batch_size   # y None: x is a batched tf.data set
    model.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=verbose,
              callbacks=list(callbacks) + [timer])
    st = timer.stamps[args.warmup - 1:]
    return [b - a for a, b in zip(st, st[1:])]


def summary(step_times, replicas, batch):
    import numpy as np
    t = np.array(step_times)
    return {"backend": backend(), "median_ms": float(np.median(t) * 1e3),
            "mean_ms": float(t.mean() * 1e3), "p90_ms": float(np.percentile(t, 90) * 1e3),
            "samples_per_s": float(replicas * batch / t.mean())}


def hidden_of(args):
    return [int(h) for h in args.hidden.split(",") if h]


def total_batches(args):
    return args.warmup + args.steps


# ------------------------------------------------------------------------ the modes

def run_plain(args):
    limit_threads(args.threads)
    import keras
    model = make_model(hidden_of(args), keras.optimizers.Adam(1e-3))
    res = summary(timed_fit(model, data(args.batch_size, total_batches(args)), args), 1,
                  args.batch_size)
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


def gradient_allreduce_fn(model, empty=False):
    """A callable that all-reduces gradient-shaped tensors as model.fit's step does: from a
    tf.function, from a jax.jit function, or eagerly on torch. ``empty``: the same compiled
    call returning its inputs, so the difference is what the all-reduce adds to a step."""
    import keras
    grads = [keras.ops.ones(v.shape, v.dtype) for v in model.trainable_variables]
    if empty:
        def reduce(g, _variables):
            return [keras.ops.add(x, 0.0) for x in g]
    else:
        from hvdlite.keras.backend import bridge
        from hvdlite.ops import Average
        reduce = bridge().gradient_reducer("bench.grads", Average, 1.0, None, False, None,
                                           "bench")
    variables = list(model.trainable_variables)
    if backend() == "tensorflow":
        import tensorflow as tf
        step = tf.function(lambda *g: reduce(list(g), variables))
    elif backend() == "jax":
        import jax
        step = jax.jit(lambda *g: reduce(list(g), variables))
    else:
        def step(*g):
            return reduce(list(g), variables)

    def run():
        out = step(*grads)
        if backend() == "jax":
            out[-1].block_until_ready()
    return run


def run_hvdlite(args):
    limit_threads(args.threads)
    import keras
    import numpy as np
    import hvdlite
    import hvdlite.keras as hvd

    hvd.init()
    size, rank = hvd.size(), hvd.rank()
    model = make_model(hidden_of(args), hvd.DistributedOptimizer(keras.optimizers.Adam(1e-3)))
    steps = timed_fit(model, data(args.batch_size, total_batches(args), rank, size), args,
                      callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(0)])
    res = summary(steps, size, args.batch_size)

    # What a step's gradient exchange costs: as the train step makes it, and from numpy.
    arrays = [np.ones(v.shape, np.float32) for v in model.trainable_variables]
    outs = [np.empty_like(a) for a in arrays]

    def numpy_allreduce():
        hvdlite.ops.wait_all(hvdlite.ops.grouped_allreduce_async(
            arrays, outs, [f"bench.np.{i}" for i in range(len(arrays))]))

    sync = hvdlite.barrier
    res["step_allreduce_us"] = time_call(gradient_allreduce_fn(model), barrier=sync) * 1e6
    if backend() == "tensorflow":   # the comparison: from a tf.function against eagerly
        import tensorflow as tf
        import hvdlite.tensorflow as hvd_tf
        tensors = [tf.ones(v.shape, tf.float32) for v in model.trainable_variables]
        res["eager_allreduce_us"] = time_call(
            lambda: hvd_tf.grouped_allreduce(tensors, name="bench.eager"), barrier=sync) * 1e6
    res["numpy_allreduce_us"] = time_call(numpy_allreduce, barrier=sync) * 1e6
    res["grad_bytes"] = int(sum(a.nbytes for a in arrays))
    # Every rank reports its mean; the slowest rank sets the pace.
    means = hvdlite.allgather(np.array([res["mean_ms"]]))
    hvd.shutdown()
    # The same compiled call without the all-reduce, timed with hvdlite's engine gone (its
    # thread would slow this baseline): the difference is what the all-reduce adds.
    res["empty_step_us"] = time_call(gradient_allreduce_fn(model, empty=True)) * 1e6
    if rank == 0:
        slowest = float(np.max(means))
        res["mean_ms"] = slowest
        res["samples_per_s"] = size * args.batch_size / (slowest / 1e3)
        print("RESULT " + json.dumps({"config": f"hvdlite-{size}", **res}), flush=True)


def run_dataparallel(args):
    """keras.distribution.DataParallel over --np processes (JAX only): jax.distributed
    joins them, XLA's CPU collectives go through gloo."""
    limit_threads(args.threads)
    import jax
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    import keras
    n = len(args.ports.split(","))
    keras.distribution.initialize(f"localhost:{args.ports.split(',')[0]}", num_processes=n,
                                  process_id=args.worker_index)
    keras.distribution.set_distribution(keras.distribution.DataParallel(
        devices=jax.devices(), auto_shard_dataset=False))
    model = make_model(hidden_of(args), keras.optimizers.Adam(1e-3))
    xy = data(args.batch_size, total_batches(args), args.worker_index, n)
    res = summary(timed_fit(model, xy, args), n, args.batch_size)
    if args.worker_index == 0:
        print("RESULT " + json.dumps({"config": f"dataparallel-{n}", **res}), flush=True)


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
    limit_threads(args.threads)
    import tensorflow as tf
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
                                          np.zeros((args.batch_size,), np.int32)))
        model._maybe_symbolic_build = lambda *a, **k: None
    x, y = data(args.batch_size * n, total_batches(args))
    # The global batch; each worker's replica gets batch_size rows of it.
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(args.batch_size * n,
                                                          drop_remainder=True).prefetch(4)
    opts = tf.data.Options()
    opts.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    ds = ds.with_options(opts)
    res = summary(timed_fit(model, (ds, None), args), n, args.batch_size)
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
        from hvdlite import mpi_library
        path = mpi_library.launcher_program(mpi_library.load()["library"])
        if path:
            return path
    except Exception:  # noqa: BLE001
        pass
    return "mpirun"


def launch(cmds, keras_backend, timeout):
    """Start the processes, wait for all; return (rc, [output of each])."""
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", KERAS_BACKEND=keras_backend)
    procs = [subprocess.Popen(["timeout", "--kill-after=10", str(timeout)] + c, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for c in cmds]
    outs = [p.communicate()[0] for p in procs]
    rc = max(p.returncode for p in procs)
    return rc, outs


def result_of(output):
    for line in output.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    return None


def configs_for(b, args):
    me = [sys.executable, os.path.abspath(__file__)]
    common = ["--batch-size", str(args.batch_size), "--steps", str(args.steps),
              "--warmup", str(args.warmup), "--hidden", args.hidden,
              "--threads", str(args.threads)]
    mpi = [mpirun(), "--oversubscribe", "--bind-to", "none"]
    configs = [("plain", [me + ["--mode", "plain"] + common]),
               (f"nocomm-{args.np}", [me + ["--mode", "plain"] + common] * args.np),
               (f"hvdlite-{args.np}", [mpi + ["-np", str(args.np)] + me +
                                       ["--mode", "hvdlite"] + common])]
    own = {"tensorflow": ("mwms", f"mwms-{args.np}"),
           "jax": ("dataparallel", f"dataparallel-{args.np}")}.get(b)
    if own:
        ports = ",".join(map(str, free_ports(args.np)))
        configs.append((own[1], [me + ["--mode", own[0], "--ports", ports,
                                       "--worker-index", str(i)] + common
                                 for i in range(args.np)]))
    return configs


def run_all(args):
    rows = []
    for b in [b for b in args.backends.split(",") if b]:
        for name, cmds in configs_for(b, args):
            t0 = time.time()
            rc, outs = launch(cmds, b, args.timeout)
            out = outs[0]
            res = result_of(out)
            if name.startswith("nocomm-"):   # N independent processes: the slowest one counts
                each = [result_of(o) for o in outs]
                res = (None if None in each else
                       dict(max(each, key=lambda r: r["mean_ms"]), config=name))
            if res is None:
                tail = "\n".join(out.strip().splitlines()[-15:])
                print(f"{b}/{name}: FAILED (rc={rc}, {time.time() - t0:.0f}s)\n{tail}\n",
                      flush=True)
                rows.append({"config": name, "backend": b, "error": f"rc={rc}"})
                continue
            print(f"{b}/{name}: done in {time.time() - t0:.0f}s", flush=True)
            rows.append(res)
    print(f"\nmodel: 64-{'-'.join(map(str, hidden_of(args)))}-10 MLP, Adam, batch "
          f"{args.batch_size} per replica, {args.steps} timed steps, {args.threads} compute "
          f"thread(s) per process, {os.cpu_count()} CPU cores")
    print(f"{'backend':<11} {'config':<16} {'median ms':>10} {'mean ms':>9} {'p90 ms':>8} "
          f"{'samples/s':>10} {'plain/this time':>16} {'this/no-comm':>13}")
    plain = {r["backend"]: r["mean_ms"] for r in rows if r["config"] == "plain" and
             "error" not in r}
    nocomm = {r["backend"]: r["mean_ms"] for r in rows
              if r["config"] == f"nocomm-{args.np}" and "error" not in r}
    for r in rows:
        if "error" in r:
            print(f"{r['backend']:<11} {r['config']:<16} {'failed: ' + r['error']:>40}")
            continue
        ratio = plain.get(r["backend"], float("nan")) / r["mean_ms"]
        over_nocomm = r["mean_ms"] / nocomm.get(r["backend"], float("nan"))
        r["ratio_over_nocomm"] = over_nocomm
        print(f"{r['backend']:<11} {r['config']:<16} {r['median_ms']:>10.2f} "
              f"{r['mean_ms']:>9.2f} {r['p90_ms']:>8.2f} {r['samples_per_s']:>10.0f} "
              f"{ratio:>16.2f} {over_nocomm:>13.2f}")
    for r in rows:
        if "step_allreduce_us" in r:
            eager = (f", eagerly {r['eager_allreduce_us']:.0f} us"
                     if "eager_allreduce_us" in r else "")
            print(f"{r['backend']}/{r['config']}: gradients {r['grad_bytes'] / 1024:.0f} KiB; "
                  f"one grouped all-reduce as the train step makes it "
                  f"{r['step_allreduce_us']:.0f} us (the same compiled call without it "
                  f"{r['empty_step_us']:.0f} us: it adds "
                  f"{r['step_allreduce_us'] - r['empty_step_us']:.0f} us){eager}, from numpy "
                  f"into the core {r['numpy_allreduce_us']:.0f} us")
    print("RESULTS " + json.dumps(rows))


def main():
    args = parse_args()
    {"all": run_all, "plain": run_plain, "hvdlite": run_hvdlite, "mwms": run_mwms,
     "dataparallel": run_dataparallel}[args.mode](args)


if __name__ == "__main__":
    main()
