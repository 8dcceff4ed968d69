"""hvdlite.keras beyond Horovod, on the backend KERAS_BACKEND names, through model.fit:

- shard_optimizer_state=True equals the unsharded DistributedOptimizer (rtol 1e-6) for SGD
  with momentum, Adam and AdamW with backward_passes_per_step=2, and keeps 1/size of the
  slots; unsupported options are refused by name;
- local_steps=1 (momentum averaged too) equals synchronous SGD; local_steps=4 leaves the
  ranks equal after every 4th step only, and the warm-up steps are synchronous;
- stateful compression (PowerSGD) keeps its state in optimizer variables: saved by
  model.save and restored by hvd.load_model, so that training goes on exactly as if
  uninterrupted; on another rank the restored error buffers restart at zero;
- combinations that cannot work fail at construction with a clear error.
Run by tests/keras/test_keras_beyond.py at 2 ranks: ``keras_beyond.py FOLDER [all]`` (a
folder for checkpoints; without ``all``, the sharded check runs Adam only and local SGD one
warm-up). Prints "keras_beyond: <backend> rank r OK".
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from keras_common import BACKEND, check, digits, done, expect_error, rel_err  # noqa: E402

import numpy as np  # noqa: E402
import keras  # noqa: E402

import hvdlite  # noqa: E402
import hvdlite.keras as hvd  # noqa: E402
from hvdlite.exceptions import HvdliteInvalidArgumentError  # noqa: E402

WORLD_SET = hvd.global_process_set     # a real subset: tests/workers/keras_process_sets.py
hvd.init()
R, N = hvd.rank(), hvd.size()
CHECKPOINTS = sys.argv[1]
EVERYTHING = sys.argv[2:] == ["all"]     # else one optimizer, one local SGD warm-up
LOCAL_B = 8
X, Y = digits()
X_R, Y_R = X[R::N][:LOCAL_B * 8], Y[R::N][:LOCAL_B * 8]     # 8 local batches per epoch


def make_model():
    keras.utils.set_random_seed(1)
    return keras.Sequential([keras.Input((64,)), keras.layers.Dense(12, activation="relu"),
                             keras.layers.Dense(10, activation="softmax")])


def np_of(variable):
    return keras.ops.convert_to_numpy(variable.value)


def weights(model):
    return [np.array(w) for w in model.get_weights()]


def fit(opt, epochs=1, model=None):
    model = model or make_model()
    model.compile(optimizer=opt, loss="sparse_categorical_crossentropy")
    model.fit(X_R, Y_R, batch_size=LOCAL_B, epochs=epochs, shuffle=False, verbose=0)
    return model


def max_rel(a, b):
    return max(float(np.max(np.abs(x - y) / (np.abs(y) + 1e-6))) for x, y in zip(a, b))


def rank0(ws):
    return [hvdlite.broadcast(np.ascontiguousarray(w), 0) for w in ws]


def slot_elements(opt):
    """Elements of the wrapped optimizer's own slots (momentum, moments; on the shards when
    sharded), not hvdlite's variables (accumulators, the shards themselves)."""
    return sum(int(np.prod(v.shape)) for v in opt.variables if len(v.shape) and not (
        v.name.startswith("hvdlite_") or v.name.endswith("_hvdlite_grad_accumulator")))


def plain_values(opt):
    """The wrapped optimizer's own variables (no hvdlite accumulators or shards)."""
    return [np_of(v) for v in opt.variables if not (
        v.name.startswith("hvdlite_") or v.name.endswith("_hvdlite_grad_accumulator"))]


def check_consolidated(kind, opt, ref_opt, model):
    """consolidate_variables gives the unsharded optimizer's variables (on rank 0 only, or
    on every rank); a plain optimizer and a fresh sharded one load them."""
    full = opt.consolidate_variables(to=0)
    want = plain_values(ref_opt)
    check((full is None) == (R != 0), f"consolidated {kind}: on rank 0 only")
    everywhere = opt.consolidate_variables(to=None)
    check(len(everywhere) == len(want) and all(
        a.shape == b.shape for a, b in zip(everywhere, want)),
        f"consolidated {kind}: shapes {[a.shape for a in everywhere]} != "
        f"{[b.shape for b in want]}")
    check(max_rel(everywhere[1:], want[1:]) <= 1e-6 and int(everywhere[0]) == int(want[0]),
          f"consolidated {kind}: equals the unsharded optimizer's variables")
    if full is not None:
        check(max_rel(full, everywhere) == 0.0, f"consolidated {kind}: to=0 equals to=None")
    plain = OPTIMIZERS[kind]()
    plain.build(model.trainable_variables)
    for v, value in zip(plain.variables, everywhere):
        v.assign(value)
    check(max_rel(plain_values(plain), everywhere) == 0.0, f"consolidated {kind}: plain load")
    # A fresh sharded optimizer takes them back: consolidating it gives the same values.
    back = hvd.DistributedOptimizer(OPTIMIZERS[kind](), shard_optimizer_state=True)
    back.build(model.trainable_variables)
    back.load_consolidated_variables(everywhere)
    check(max_rel(back.consolidate_variables(to=None), everywhere) == 0.0,
          f"consolidated {kind}: loaded into a sharded optimizer")
    expect_error(HvdliteInvalidArgumentError,
                 lambda: back.load_consolidated_variables(everywhere[:-1]),
                 [f"got {len(everywhere) - 1} values"], f"consolidated {kind}: too few values")


# ----------------------------------------------------------- sharded == unsharded
OPTIMIZERS = {"sgd_momentum": lambda: keras.optimizers.SGD(0.1, momentum=0.9),
              "adam": lambda: keras.optimizers.Adam(0.01),
              "adamw": lambda: keras.optimizers.AdamW(0.01, weight_decay=0.05)}
for kind, make in OPTIMIZERS.items() if EVERYTHING else [("adam", OPTIMIZERS["adam"])]:
    for process_set in (None, WORLD_SET) if kind == "adam" else (None,):
        ref_opt = hvd.DistributedOptimizer(make(), backward_passes_per_step=2,
                                           average_aggregated_gradients=True)
        ref = fit(ref_opt, epochs=2)
        opt = hvd.DistributedOptimizer(make(), backward_passes_per_step=2,
                                       average_aggregated_gradients=True,
                                       shard_optimizer_state=True, process_set=process_set)
        model = fit(opt, epochs=2)
        err = max_rel(weights(model), weights(ref))
        check(err <= 1e-6, f"sharded {kind} (process_set={process_set}): relative error {err}")
        check(max_rel(weights(model), rank0(weights(model))) == 0.0, f"sharded {kind}: ranks")
        full, mine = slot_elements(ref_opt), slot_elements(opt)
        check(mine <= full / N + 64, f"sharded {kind}: {mine} slot elements of {full}")
        check(int(np_of(opt.iterations)) == int(np_of(ref_opt.iterations)),
              f"sharded {kind}: iterations")
        if R == 0:
            print(f"sharded {kind} process_set={process_set is not None}: max relative error "
                  f"{err:.1e}, slot elements {mine} of {full}", flush=True)
        check_consolidated(kind, opt, ref_opt, model)

if BACKEND == "torch":
    # Elastic training that resized the job: the shards cannot follow, and say so (the
    # shards are made to look cut for another size, as after a resize; torch runs eagerly,
    # so the next step sees it).
    sharded = opt._hvd.sharded
    sharded.rank_size = (R, N + 1)
    expect_error(HvdliteInvalidArgumentError, lambda: model.fit(   # 2 passes: one step
        X_R[:2 * LOCAL_B], Y_R[:2 * LOCAL_B], batch_size=LOCAL_B, shuffle=False, verbose=0),
        ["cut for", "resharded"], "sharded state after a resize")
    sharded.rank_size = (R, N)

expect_error(HvdliteInvalidArgumentError, lambda: hvd.DistributedOptimizer(
    keras.optimizers.SGD(0.1, clipnorm=1.0), shard_optimizer_state=True), ["clipnorm"],
    "sharded clipnorm")
expect_error(HvdliteInvalidArgumentError, lambda: hvd.DistributedOptimizer(
    keras.optimizers.SGD(0.1), shard_optimizer_state=True, local_steps=2), ["local_steps"],
    "sharded + local SGD")
expect_error(HvdliteInvalidArgumentError, lambda: hvd.DistributedOptimizer(
    keras.optimizers.SGD(0.1), shard_optimizer_state=True,
    compression=hvd.Compression.powersgd(rank=1)), ["compression"], "sharded + powersgd")
expect_error(HvdliteInvalidArgumentError, lambda: hvd.DistributedOptimizer(
    keras.optimizers.Lamb(0.1), shard_optimizer_state=True), ["Lamb"], "sharded Lamb")
expect_error(HvdliteInvalidArgumentError, lambda: hvd.DistributedOptimizer(
    keras.optimizers.SGD(0.1), local_steps=2, compression=hvd.Compression.topk(0.1)),
    ["local_steps", "compression"], "local SGD + top-k")
expect_error(HvdliteInvalidArgumentError, lambda: hvd.DistributedOptimizer(
    keras.optimizers.SGD(0.1), local_sgd_warmup_steps=3), ["local_steps"], "warm-up alone")
expect_error(HvdliteInvalidArgumentError, lambda: hvd.DistributedOptimizer(
    keras.optimizers.SGD(0.1), local_steps=2).register_local_var(
        keras.Variable(np.zeros(2, np.float32))), ["local variables"],
    "local SGD + local variables")

# ------------------------------------------------------------------- local SGD
sync = fit(hvd.DistributedOptimizer(keras.optimizers.SGD(0.1, momentum=0.9)), epochs=1)
local1 = fit(hvd.DistributedOptimizer(keras.optimizers.SGD(0.1, momentum=0.9), local_steps=1,
                                      average_optimizer_state=True), epochs=1)
err = max(rel_err(a, b) for a, b in zip(weights(local1), weights(sync)))
check(err < 1e-6, f"local SGD H=1: relative error {err} against synchronous")


def ranks_equal(model):
    ws = weights(model)
    diff = np.array([max_rel(ws, rank0(ws))])
    return float(hvdlite.allreduce(diff, op=hvd.Max)[0]) == 0.0


# After n steps the ranks agree only if step n was a warm-up step or an averaging step.
# (Checked after fit returns: JAX's trainer syncs the variables then.)
for warmup, counts in ((0, (3, 4)), (3, (3, 5, 7))) if EVERYTHING else ((3, (5, 7)),):
    for n in counts:
        model = make_model()
        model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.1),
                                                         local_steps=4,
                                                         local_sgd_warmup_steps=warmup),
                      loss="sparse_categorical_crossentropy")
        model.fit(X_R[:n * LOCAL_B], Y_R[:n * LOCAL_B], batch_size=LOCAL_B, epochs=1,
                  shuffle=False, verbose=0)
        want = n <= warmup or (n - warmup) % 4 == 0
        check(ranks_equal(model) == want, f"local SGD H=4 warm-up {warmup}: after {n} steps "
                                          f"the ranks should {'' if want else 'not '}agree")
    if R == 0:
        print(f"local SGD H=4 warm-up {warmup}: ranks agree exactly when expected", flush=True)

# ------------------------------------------- compression state in the checkpoint
COMP = hvd.Compression.powersgd(rank=1)
straight = fit(hvd.DistributedOptimizer(keras.optimizers.SGD(0.1, momentum=0.9),
                                        compression=COMP), epochs=2)
half = fit(hvd.DistributedOptimizer(keras.optimizers.SGD(0.1, momentum=0.9),
                                    compression=COMP), epochs=1)
def hvdlite_state(opt):
    return [(v.name.split("_hvdlite_")[-1], np_of(v)) for v in opt.variables
            if "hvdlite" in v.name]


saved_state = hvdlite_state(half.optimizer)
check([k for k, _ in saved_state].count("error_feedback") == 2 and
      all(np.abs(a).max() > 0 for k, a in saved_state if k == "error_feedback"),
      f"compression state variables {[k for k, _ in saved_state]}")
if True:        # the checkpoints go to the folder the test gives (shared by the ranks)
    tmp = CHECKPOINTS
    path = os.path.join(tmp, f"powersgd_rank{R}.keras")
    half.save(path)
    resumed = hvd.load_model(path, compression=COMP)
    restored = hvdlite_state(resumed.optimizer)
    check([k for k, _ in restored] == [k for k, _ in saved_state] and
          all(np.array_equal(a, b) for (_, a), (_, b) in zip(restored, saved_state)),
          f"load_model restores the compression state: {[k for k, _ in restored]}")
    resumed.fit(X_R, Y_R, batch_size=LOCAL_B, epochs=1, shuffle=False, verbose=0)
    err = max(rel_err(a, b) for a, b in zip(weights(resumed), weights(straight)))
    check(err < 1e-6, f"powersgd resumed from a checkpoint: relative error {err}")
    # Another rank's checkpoint: its error buffers are not this rank's; they restart at 0.
    other = os.path.join(tmp, f"powersgd_rank{(R + 1) % N}.keras")
    hvdlite.barrier()
    swapped = hvd.load_model(other, compression=COMP)
    swapped.fit(X_R[:LOCAL_B], Y_R[:LOCAL_B], batch_size=LOCAL_B, epochs=1, shuffle=False,
                verbose=0)
    owner = [v for v in swapped.optimizer.variables if "compression_owner" in v.name][0]
    check(np_of(owner).tolist() == [R, N], "owner after a step")
    # A sharded checkpoint loads back on its own rank only.
    sharded = fit(hvd.DistributedOptimizer(keras.optimizers.Adam(0.01),
                                           shard_optimizer_state=True))
    path = os.path.join(tmp, f"sharded_rank{R}.keras")
    sharded.save(path)
    back = hvd.load_model(path, shard_optimizer_state=True)
    check(max_rel([np_of(v) for v in back.optimizer.variables if len(v.shape)],
                  [np_of(v) for v in sharded.optimizer.variables if len(v.shape)])
          == 0.0, "sharded state restored")
    hvdlite.barrier()
    expect_error(HvdliteInvalidArgumentError, lambda: hvd.load_model(
        os.path.join(tmp, f"sharded_rank{(R + 1) % N}.keras"), shard_optimizer_state=True),
        [f"saved by rank {(R + 1) % N} of {N}"], "sharded checkpoint of another rank")
    hvdlite.barrier()
done("keras_beyond", R)
hvd.shutdown()
