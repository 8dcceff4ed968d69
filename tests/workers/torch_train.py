"""DistributedOptimizer: equivalence with single-process training, and its behaviours.

Run by tests/torch/test_torch_train.py at 2 and 3 ranks (also works at 1).

Equivalence: a small CNN on scikit-learn's digits trains K steps, each rank on its shard of
the global batch; rank 0 also trains the same model on the whole global batch in one
process (same seed). Final parameters must agree to ``rtol`` (see TOLERANCES), and every
rank must hold bitwise-identical parameters after every step.

Prints one line per configuration on rank 0 (max abs / relative differences), then
"torch_train OK".
"""
import sys
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)

import hvdlite.torch as hvd  # noqa: E402

hvd.init()
R, N = hvd.rank(), hvd.size()
STEPS = 12
BATCH = 48          # global batch: divisible by 1, 2, 3, 4, 6 ranks

# max |dist - ref| <= RTOL * max|ref| per tensor... see compare(); per configuration
EXACT = dict(rtol=1e-5, atol=1e-6)      # float32 rounding only (summation order differs)
FP16 = dict(rtol=1e-2, atol=1e-4)       # SGD, gradients rounded to fp16 on the wire
BF16 = dict(rtol=5e-2, atol=2e-3)       # SGD, gradients rounded to bf16 on the wire
# Adam divides by sqrt(v), so fp16 rounding of near-zero gradients can flip an update of
# size lr: bound the difference relative to how far training moved the parameters.
FP16_ADAM = dict(rtol=1e-2, atol=1e-2, movement=0.05)


def load_digits():
    from sklearn.datasets import load_digits as _load
    d = _load()
    X = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(d.target, dtype=torch.int64)
    return X, y


X_ALL, Y_ALL = load_digits()
PERM = torch.randperm(len(X_ALL), generator=torch.Generator().manual_seed(1234))


class Net(nn.Module):
    def __init__(self, norm=None):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, padding=1)
        self.norm = norm(8) if norm is not None else nn.Identity()
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1)
        self.fc1 = nn.Linear(16 * 2 * 2, 32)
        self.fc2 = nn.Linear(32, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.norm(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def batch_indices(step, micro, bpps, shard):
    k = step * bpps + micro
    idx = PERM[(k * BATCH) % (len(PERM) - BATCH):][:BATCH]
    if shard:
        per = BATCH // N
        idx = idx[R * per:(R + 1) * per]
    return idx


class Float64Compressor(hvd.Compressor):
    """A custom (Python-side) compressor: lossless, to check the compress/decompress path."""

    @staticmethod
    def compress(tensor):
        return tensor.to(torch.float64), tensor.dtype

    @staticmethod
    def decompress(tensor, ctx):
        return tensor.to(ctx)


def flat_params(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def assert_identical_across_ranks(model, where):
    flat = flat_params(model)
    gathered = hvd.allgather(flat.unsqueeze(0), name=f"check.{where}")
    for r in range(1, N):
        assert torch.equal(gathered[0], gathered[r]), \
            f"{where}: rank {r} parameters differ from rank 0 (max diff " \
            f"{(gathered[0] - gathered[r]).abs().max().item():.3g})"


def train(cfg, distributed):
    torch.manual_seed(0)
    norm = cfg.get("norm")
    if norm == "sync":
        norm = hvd.SyncBatchNorm if distributed else nn.BatchNorm2d
    model = Net(norm)
    if cfg["opt"] == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    bpps = cfg.get("bpps", 1)
    if distributed:
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        groups = cfg.get("groups")
        if groups == "list":
            groups = [[model.conv1.weight, model.conv1.bias], [model.fc1.weight, model.fc2.weight]]
        opt = hvd.DistributedOptimizer(
            opt, named_parameters=model.named_parameters(),
            compression=cfg.get("compression", hvd.Compression.none),
            backward_passes_per_step=bpps, groups=groups,
            gradient_predivide_factor=cfg.get("predivide", 1.0))
        hvd.broadcast_optimizer_state(opt, root_rank=0)
    else:
        # what broadcast_optimizer_state does to a fresh optimizer (as Horovod): one step
        # with zero gradients creates its state (Adam's step count starts at 1)
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
        opt.step()
    for step in range(STEPS):
        opt.zero_grad()
        for micro in range(bpps):
            idx = batch_indices(step, micro, bpps, shard=distributed)
            F.cross_entropy(model(X_ALL[idx]), Y_ALL[idx]).backward()
        opt.step()
        if distributed:
            assert_identical_across_ranks(model, f"{cfg['name']} step {step}")
    return model


def compare(name, dist_model, ref_model, rtol, atol, movement=None):
    """Every parameter: |dist - ref| <= atol + rtol * |ref| (elementwise, as torch.allclose).

    With ``movement``: also ||dist - ref|| <= movement * ||ref - initial|| over all
    parameters (the distributed run followed the reference's trajectory to that fraction).
    """
    worst_abs = worst_rel = 0.0
    if movement is not None:
        torch.manual_seed(0)
        init = flat_params(Net())
        ref_flat, dist_flat = flat_params(ref_model), flat_params(dist_model)
        frac = ((dist_flat - ref_flat).norm() / (ref_flat - init).norm()).item()
        assert frac <= movement, f"{name}: ||dist - ref|| is {frac:.3g} of the distance moved"
        print(f"  {name}: ||dist - ref|| / ||ref - init|| = {frac:.2e} (tolerance {movement})")
    for (pname, a), b in zip(dist_model.named_parameters(), ref_model.parameters()):
        d = (a.detach() - b.detach()).abs()
        worst_abs = max(worst_abs, d.max().item())
        worst_rel = max(worst_rel, (d / b.detach().abs().clamp_min(1e-3)).max().item())
        assert torch.allclose(a, b, rtol=rtol, atol=atol), \
            f"{name}: parameter {pname} differs from single-process training: max abs diff " \
            f"{d.max().item():.3g} (rtol={rtol}, atol={atol})"
    # buffers (SyncBatchNorm running statistics)
    for (bname, a), b in zip(dist_model.named_buffers(), ref_model.buffers()):
        assert torch.allclose(a.double(), b.double(), rtol=rtol, atol=atol), f"{name}: buffer {bname}"
    return worst_abs, worst_rel


CONFIGS = [
    dict(name="SGD momentum", opt="sgd", tol=EXACT),
    dict(name="Adam", opt="adam", tol=EXACT),
    dict(name="SGD momentum, backward_passes_per_step=2", opt="sgd", bpps=2, tol=EXACT),
    dict(name="Adam, backward_passes_per_step=2", opt="adam", bpps=2, tol=EXACT),
    dict(name="SGD, groups=2, gradient_predivide_factor=2", opt="sgd", groups=2, predivide=2.0,
         tol=EXACT),
    dict(name="Adam, groups=[[...]], backward_passes_per_step=2", opt="adam", groups="list",
         bpps=2, tol=EXACT),
    dict(name="SGD + SyncBatchNorm (vs BatchNorm2d on the global batch)", opt="sgd",
         norm="sync", tol=EXACT),
    dict(name="SGD, custom Python compressor (float64)", opt="sgd",
         compression=Float64Compressor, tol=EXACT),
    dict(name="SGD momentum, Compression.fp16", opt="sgd", compression=hvd.Compression.fp16,
         tol=FP16),
    dict(name="Adam, Compression.fp16", opt="adam", compression=hvd.Compression.fp16,
         tol=FP16_ADAM),
    dict(name="SGD momentum, Compression.bf16", opt="sgd", compression=hvd.Compression.bf16,
         tol=BF16),
]

only = sys.argv[1:]
for cfg in CONFIGS:
    if only and not any(o in cfg["name"] for o in only):
        continue
    dist = train(cfg, distributed=True)
    if R == 0:
        ref = train(cfg, distributed=False)
        wa, wr = compare(cfg["name"], dist, ref, **cfg["tol"])
        print(f"equivalence [{N} ranks] {cfg['name']}: max abs diff {wa:.2e}, "
              f"max rel diff {wr:.2e} (tolerance "
              f"{', '.join(f'{k}={v}' for k, v in cfg['tol'].items())})", flush=True)
    hvd.barrier()


# ---------------------------------------------------------------------------------------
# behaviours

def expect_error(fn, exc, *fragments):
    try:
        fn()
    except exc as e:
        for f in fragments:
            assert f in str(e), f"expected {f!r} in: {e}"
        return e
    raise AssertionError(f"did not raise {exc.__name__}")


def small_model(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def data(seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(6, 4, generator=g), torch.randn(6, 2, generator=g)


# A parameter that gets no gradient on some ranks must not hang, and gets the average of
# the gradients that exist (zeros elsewhere), as in Horovod.
class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(3)
        self.body = nn.Linear(4, 4)
        self.head_a = nn.Linear(4, 1)
        self.head_b = nn.Linear(4, 1)

    def forward(self, x, use_b):
        h = torch.relu(self.body(x))
        out = self.head_a(h)
        return out + self.head_b(h) if use_b else out


for groups in (None, 1):
    model = TwoHeads()
    plain = torch.optim.SGD(model.parameters(), lr=0.1)
    opt = hvd.DistributedOptimizer(plain, named_parameters=model.named_parameters(),
                                   groups=groups)
    for step in range(3):
        x, _ = data(10 + step + R)
        use_b = R == 0                       # only rank 0 uses head_b
        # local gradient of head_b, computed separately for the check
        local = torch.autograd.grad(model(x, True).sum(), model.head_b.weight)[0] if use_b \
            else torch.zeros_like(model.head_b.weight)
        expected_b = hvd.allreduce(local, name=f"expected_b.{groups}.{step}")
        opt.zero_grad()
        model(x, use_b).sum().backward()
        opt.synchronize()
        assert torch.allclose(model.head_b.weight.grad, expected_b, rtol=1e-6, atol=1e-7)
        with opt.skip_synchronize():
            opt.step()
        assert_identical_across_ranks(model, f"missing-grad groups={groups} step {step}")
done = ["a parameter with no gradient on some ranks (also grouped)"]

# Gradient clipping with synchronize() + skip_synchronize(), compared with one process.
model = small_model()
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5),
                               named_parameters=model.named_parameters())
ref_model = small_model()
ref_opt = torch.optim.SGD(ref_model.parameters(), lr=0.5)
for step in range(3):
    xs, ys = zip(*[data(100 + step * 10 + r) for r in range(N)])
    opt.zero_grad()
    F.mse_loss(model(xs[R]), ys[R]).backward()
    opt.synchronize()
    nn.utils.clip_grad_norm_(model.parameters(), 0.05)
    with opt.skip_synchronize():
        opt.step()
    ref_opt.zero_grad()
    F.mse_loss(ref_model(torch.cat(xs)), torch.cat(ys)).backward()
    nn.utils.clip_grad_norm_(ref_model.parameters(), 0.05)
    ref_opt.step()
for a, b in zip(model.parameters(), ref_model.parameters()):
    assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)
# step() right after synchronize() warns (as Horovod) but works
opt.zero_grad()
F.mse_loss(model(xs[R]), ys[R]).backward()
opt.synchronize()
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    opt.step()
assert any("skip_synchronize" in str(i.message) for i in w)
done.append("clipping with synchronize()/skip_synchronize()")

# Too many backward passes before step(): clear error on every rank, then recover.
for bpps in (1, 2):
    model = small_model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters(),
                                   backward_passes_per_step=bpps)
    x, y = data(7 + R)
    local = torch.autograd.grad(F.mse_loss(model(x), y), list(model.parameters()))
    expected = [hvd.allreduce(g * bpps, name=f"acc.{bpps}.{i}") for i, g in enumerate(local)]
    for _ in range(bpps):
        F.mse_loss(model(x), y).backward()
    e = expect_error(lambda: F.mse_loss(model(x), y).backward(), hvd.GradientAccumulationError,
                     f"backward_passes_per_step={bpps}", "optimizer.step()")
    assert isinstance(e, AssertionError) and "Gradient of parameter '" in str(e), str(e)
    # torch.autograd.grad() accumulates nothing into .grad: allowed while all-reduces fly
    torch.autograd.grad(F.mse_loss(model(x), y), list(model.parameters()))
    # zero_grad() before step()/synchronize() is refused (race with in-flight all-reduces)
    expect_error(lambda: opt.zero_grad(), AssertionError, "zero_grad")
    opt.synchronize()
    # the refused pass was stopped before it could add into the buffers being reduced
    for p, e in zip(model.parameters(), expected):
        assert torch.allclose(p.grad, e, rtol=1e-6, atol=1e-7), (p.grad, e)
    with opt.skip_synchronize():
        opt.step()
    opt.zero_grad()
    F.mse_loss(model(x), y).backward()
    opt.step()
    assert_identical_across_ranks(model, f"after accumulation error bpps={bpps}")
done.append("error on more backward passes than backward_passes_per_step; zero_grad guard")

# Wrapping keeps the optimizer's class, state and hyper-parameters; schedulers work.
model = small_model()
base = torch.optim.Adam(model.parameters(), lr=0.01)
F.mse_loss(model(data(1)[0]), data(1)[1]).backward()
base.step()                                   # state exists before wrapping
base.zero_grad()
state_before = {k: v["exp_avg"].clone() for k, v in base.state_dict()["state"].items()}
hvd.broadcast_parameters(model.state_dict(), 0)
hvd.broadcast_optimizer_state(base, 0)
opt = hvd.DistributedOptimizer(base, named_parameters=model.named_parameters())
assert isinstance(opt, torch.optim.Adam) and type(opt).__name__ == "Adam"
sd = opt.state_dict()
assert len(sd["state"]) == 4 and sd["param_groups"][0]["lr"] == 0.01
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    for step in range(2):
        opt.zero_grad()
        x, y = data(50 + step + R)
        F.mse_loss(model(x), y).backward()
        opt.step()
        sched.step()
    assert not [i for i in w if "lr_scheduler" in str(i.message)], [str(i.message) for i in w]
assert abs(opt.param_groups[0]["lr"] - 0.0025) < 1e-12
clone = torch.optim.Adam(small_model().parameters(), lr=1.0)
clone.load_state_dict(opt.state_dict())
opt.load_state_dict(opt.state_dict())
assert int(opt.state_dict()["state"][0]["step"]) == 3
assert_identical_across_ranks(model, "wrapped pre-existing Adam")
done.append("isinstance/state_dict/load_state_dict/LR scheduler")

# Names: duplicates and unnamed parameters are rejected like Horovod; defaults work.
model = small_model()
named = list(model.named_parameters())
expect_error(lambda: hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                              named_parameters=[("w", p) for _, p in named]),
             ValueError, "unique", "w")
expect_error(lambda: hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                              named_parameters=named[:2]),
             ValueError, "not named")
expect_error(lambda: hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                              named_parameters=[p for _, p in named]),
             ValueError, "tuples")
expect_error(lambda: hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                              op=hvd.Adasum, shard_optimizer_state=True),
             ValueError, "Adasum")
expect_error(lambda: hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                              op=hvd.Sum, gradient_predivide_factor=2.0),
             ValueError, "gradient_predivide_factor")
opt = hvd.DistributedOptimizer(torch.optim.SGD(
    [{"params": model[0].parameters()}, {"params": model[2].parameters(), "lr": 0.01}], lr=0.1))
F.mse_loss(model(data(5 + R)[0]), data(5 + R)[1]).backward()
opt.step()
assert_identical_across_ranks(model, "unnamed parameters, two param groups")
extra = nn.Linear(2, 2)
hvd.broadcast_parameters(extra.state_dict(), root_rank=0)
opt.add_param_group({"params": extra.parameters(), "lr": 0.05})
opt.zero_grad()
x, _ = data(6 + R)
extra(model(x)).sum().backward()
opt.step()
assert_identical_across_ranks(extra, "add_param_group")
del opt
import gc  # noqa: E402
gc.collect()
assert not model[0].weight._post_accumulate_grad_hooks, "hooks outlived their optimizer"
done.append("named_parameters validation, generated names, add_param_group")

# op=Sum, and a non-contiguous gradient (a parameter viewed through a transpose).
model = small_model()
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                               named_parameters=model.named_parameters(), op=hvd.Sum)
x, y = data(20 + R)
local = torch.autograd.grad(F.mse_loss(model(x), y), list(model.parameters()))
F.mse_loss(model(x), y).backward()
expected = [hvd.allreduce(g, op=hvd.Sum, name=f"sum.{i}") for i, g in enumerate(local)]
opt.synchronize()
for p, e in zip(model.parameters(), expected):
    assert torch.allclose(p.grad, e, rtol=1e-6, atol=1e-7)
with opt.skip_synchronize():
    opt.step()
w = nn.Parameter(torch.randn(3, 5).t())          # non-contiguous parameter (and grad)
opt = hvd.DistributedOptimizer(torch.optim.SGD([w], lr=1.0), named_parameters=[("w", w)])
(w * (R + 1)).sum().backward()
assert not w.grad.is_contiguous(), w.grad.stride()
opt.synchronize()
assert torch.allclose(w.grad, torch.full((5, 3), (N + 1) / 2))
with opt.skip_synchronize():
    opt.step()
done.append("op=Sum, non-contiguous gradients")


# Sparse gradients (nn.Embedding(sparse=True)): all-gathered, or reduced as dense.
class Bag(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(5)
        self.emb = nn.Embedding(20, 3, sparse=True)
        self.out = nn.Linear(3, 1)

    def forward(self, idx):
        return self.out(self.emb(idx).mean(1))


for as_dense in (False, True):
    model, ref = Bag(), Bag()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5),
                                   named_parameters=model.named_parameters(),
                                   sparse_as_dense=as_dense)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.5)
    for step in range(3):
        g = torch.Generator().manual_seed(200 + step)
        idx = torch.randint(0, 20, (4 * N, 5), generator=g)
        target = torch.randn(4 * N, 1, generator=g)
        opt.zero_grad()
        F.mse_loss(model(idx[4 * R:4 * R + 4]), target[4 * R:4 * R + 4]).backward()
        opt.step()
        ref_opt.zero_grad()
        F.mse_loss(ref(idx), target).backward()
        ref_opt.step()
    for a, b in zip(model.parameters(), ref.parameters()):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6), (as_dense, (a - b).abs().max())
    assert_identical_across_ranks(model, f"sparse as_dense={as_dense}")
done.append("sparse gradients (allgather and sparse_as_dense)")

if torch.cuda.is_available():
    model = small_model().cuda()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                   named_parameters=model.named_parameters())
    x, y = data(30 + R)
    F.mse_loss(model(x.cuda()), y.cuda()).backward()
    opt.step()
    assert_identical_across_ranks(model.cpu(), "cuda")
    done.append("CUDA parameters")

hvd.barrier()
if R == 0:
    print("behaviours:", "; ".join(done))
    print(f"torch_train OK at {N} ranks", flush=True)
hvd.shutdown()
