"""Sharded optimizer state (ZeRO-1) against the unsharded DistributedOptimizer.

    torch_zero.py equivalence      SGD+momentum, Adam, AdamW with backward_passes_per_step=2
                                   (and clipping by global norm, consolidation, resharding,
                                   state memory, errors); prints "torch_zero OK at N ranks"
    torch_zero.py save PATH        train, save model + consolidated optimizer state to PATH
    torch_zero.py resume PATH      load PATH at this size (sharded and unsharded), train on;
                                   both must agree

Every rank trains on its own random batches; the unsharded run all-reduces gradients, the
sharded one reduce-scatters them and steps 1/N of the state. Parameters must agree to
rtol 1e-6 after every configuration: in float64 with atol 1e-12 (the algorithms are the
same), and in float32 with atol 1e-6, since at 3 ranks the two runs sum a gradient's three
contributions in different orders (different ring segments), and Adam turns the last-bit
difference of an element that nearly cancels into a few 1e-7 of parameter.
"""
import sys

import torch
import torch.nn as nn

torch.set_num_threads(1)

import hvdlite.torch as hvd  # noqa: E402
from hvdlite.exceptions import HvdliteInvalidArgumentError  # noqa: E402

hvd.init()
R, N = hvd.rank(), hvd.size()
RTOL = 1e-6
ATOL = {torch.float64: 1e-12, torch.float32: 1e-6}
DTYPE = torch.float64
PASSES = 2
BUCKET_BYTES = 600          # small: several buckets, parameters cut across ranks


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(20, 33)
        self.fc2 = nn.Linear(33, 17)
        self.fc3 = nn.Linear(17, 5)
        self.unused = nn.Linear(3, 3)     # no gradient: contributes zeros on every rank
        self.frozen = nn.Parameter(torch.ones(4), requires_grad=False)

    def forward(self, x):
        return self.fc3(torch.tanh(self.fc2(torch.tanh(self.fc1(x)))))


OPTIMIZERS = {
    "sgd_momentum": lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, weight_decay=1e-3),
    "adam": lambda ps: torch.optim.Adam(ps, lr=1e-2, weight_decay=1e-3),
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.05),
}


def batch(step, passno):
    g = torch.Generator().manual_seed(1000 * step + 10 * passno + R)
    return (torch.randn(8, 20, generator=g, dtype=DTYPE),
            torch.randn(8, 5, generator=g, dtype=DTYPE))


def make(kind, sharded, model=None, **kw):
    torch.manual_seed(7)
    model = model or Net().to(DTYPE)
    params = [{"params": [model.fc1.weight, model.fc1.bias, model.unused.weight,
                          model.unused.bias, model.frozen]},
              {"params": list(model.fc2.parameters()) + list(model.fc3.parameters()),
               "lr": OPTIMIZERS[kind]([torch.zeros(1, requires_grad=True)]).defaults["lr"] / 2}]
    opt = hvd.DistributedOptimizer(OPTIMIZERS[kind](params),
                                   named_parameters=model.named_parameters(),
                                   backward_passes_per_step=PASSES,
                                   shard_optimizer_state=sharded,
                                   **({"bucket_bytes": BUCKET_BYTES} if sharded else {}), **kw)
    return model, opt


def train(model, opt, steps, first=0, clip=None):
    for step in range(first, first + steps):
        opt.zero_grad()
        for passno in range(PASSES):
            x, y = batch(step, passno)
            ((model(x) - y) ** 2).mean().backward()
        if clip is None:
            opt.step()
            continue
        opt.synchronize()
        if getattr(opt, "_hvd_sharded", False):
            norm = opt.clip_grad_norm_(clip)
        else:
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        with opt.skip_synchronize():
            opt.step()
        yield float(norm)


def run(model, opt, steps, first=0, clip=None):
    return list(train(model, opt, steps, first, clip)) if clip else (
        list(train(model, opt, steps, first)) or [])


def same(a, b, what):
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values()):
        torch.testing.assert_close(x, y, rtol=RTOL, atol=ATOL[DTYPE],
                                   msg=lambda m: f"{what}: {name} differs at rank {R}: {m}")


def state_numel(opt):
    return sum(v.numel() for st in opt.state.values() for v in st.values()
               if torch.is_tensor(v) and v.dim() > 0)


def same_state(full, ref, what):
    assert len(full["param_groups"]) == len(ref["param_groups"]), what
    for g, h in zip(full["param_groups"], ref["param_groups"]):
        assert g == h, f"{what}: param group {g} != {h}"
    assert sorted(full["state"]) == sorted(ref["state"]), (what, sorted(full["state"]),
                                                           sorted(ref["state"]))
    for i, st in ref["state"].items():
        assert list(full["state"][i]) == list(st), (what, i, list(full["state"][i]), list(st))
        for k, v in st.items():
            torch.testing.assert_close(full["state"][i][k], v, rtol=RTOL, atol=ATOL[DTYPE],
                                       msg=lambda m: f"{what}: state[{i}][{k}]: {m}")


def equivalence():
    global DTYPE
    for DTYPE in (torch.float64, torch.float32):
        for kind in OPTIMIZERS:
            same_training(kind)
        for kind in ("sgd_momentum", "adam"):
            same_clipping(kind)
    DTYPE = torch.float64
    behaviours()


def same_training(kind):
    ref_model, ref = make(kind, False)
    model, opt = make(kind, True)
    run(ref_model, ref, 4)
    run(model, opt, 4)
    same(model, ref_model, kind)
    assert model.frozen.eq(1).all()
    # About 1/N of the state per rank (plus at most one element of padding per bucket).
    full_numel = state_numel(ref)
    mine = state_numel(opt)
    per_kind = sum(torch.is_tensor(v) and v.dim() > 0    # per-element tensors (not step)
                   for v in next(iter(ref.state.values())).values())
    assert mine <= full_numel / N + per_kind * len(opt._zero_buckets), (mine, full_numel)
    # Consolidated state == the unsharded optimizer's state dict.
    full = opt.consolidate_state_dict(to=0)
    if R == 0:
        same_state(full, ref.state_dict(), kind)
    else:
        assert full is None
    full = opt.consolidate_state_dict(to=None)
    # A fresh sharded optimizer loads it (resharding) and keeps matching the reference.
    model2, opt2 = make(kind, True)
    model2.load_state_dict(model.state_dict())
    opt2.load_state_dict(full)
    run(ref_model, ref, 2, first=4)
    run(model2, opt2, 2, first=4)
    same(model2, ref_model, kind + " after reshard")
    # A plain (unsharded) optimizer loads the consolidated dict as is.
    plain_model, plain = make(kind, False)
    plain.load_state_dict(opt2.consolidate_state_dict(to=None))
    same_state(plain.state_dict(), ref.state_dict(), kind + " plain load")
    # Own shard state dict: round trip at the same size and rank.
    sd = opt2.state_dict()
    opt2.load_state_dict(sd)
    if R == 0:
        print(f"equivalence {kind} {DTYPE}: {4 + 2} steps, state elements per rank "
              f"{mine} of {full_numel}", flush=True)


def same_clipping(kind):
    """Clipping by the global norm: clip_grad_norm_ of the shards vs of the parameters."""
    ref_model, ref = make(kind, False)
    model, opt = make(kind, True)
    n_ref = run(ref_model, ref, 3, clip=0.05)
    n = run(model, opt, 3, clip=0.05)
    assert all(v > 0.05 for v in n_ref), n_ref     # clipping was active
    torch.testing.assert_close(torch.tensor(n, dtype=torch.float64),
                               torch.tensor(n_ref, dtype=torch.float64), rtol=RTOL, atol=0)
    same(model, ref_model, kind + " clip")
    if R == 0:
        print(f"clip {kind} {DTYPE}: norms {['%.4f' % v for v in n]}", flush=True)


def behaviours():
    # Gradients replaced behind the optimizer's back (model.zero_grad() sets them to None,
    # autograd then allocates new ones) are still reduced.
    ref_model, ref = make("adam", False)
    model, opt = make("adam", True)
    for m, o in ((ref_model, ref), (model, opt)):
        for step in range(2):
            m.zero_grad(set_to_none=True)
            for passno in range(PASSES):
                x, y = batch(step, passno)
                ((m(x) - y) ** 2).mean().backward()
            o.step()
    same(model, ref_model, "model.zero_grad()")

    # One backward pass too many is refused before it adds into a bucket in flight.
    from hvdlite.torch import GradientAccumulationError
    try:
        for passno in range(PASSES + 1):
            x, y = batch(9, passno)
            ((model(x) - y) ** 2).mean().backward()
    except GradientAccumulationError as e:
        assert "backward_passes_per_step=2" in str(e) and "fc" in str(e), e
    else:
        raise AssertionError("a third backward pass was accepted")
    opt.synchronize()           # the job goes on
    with opt.skip_synchronize():
        opt.step()

    # broadcast_optimizer_state reshards root's state.
    model, opt = make("adam", True)
    run(model, opt, 1)
    before = opt.consolidate_state_dict(to=None)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    same_state(opt.consolidate_state_dict(to=None), before, "broadcast_optimizer_state")
    # ... also with ranks whose optimizer has no state yet: root says which state it holds,
    # so they take part in gathering it, with zeros for their slices, as ranks whose state
    # is all zeros would.
    zeros = {"param_groups": before["param_groups"], "state": {
        i: {k: torch.zeros_like(v) if v.dim() else v for k, v in st.items()}
        for i, st in before["state"].items()}}
    model, opt = make("adam", True)
    opt.load_state_dict(before if R == 0 else zeros)
    want = opt.consolidate_state_dict(to=None)
    model, opt = make("adam", True)
    if R == 0:
        opt.load_state_dict(before)
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    same_state(opt.consolidate_state_dict(to=None), want,
               "broadcast_optimizer_state to ranks with no state")

    # Errors.
    model = Net()
    for bad in (torch.optim.LBFGS(model.parameters()),
                torch.optim.SparseAdam([model.fc1.weight])):
        try:
            hvd.DistributedOptimizer(bad, shard_optimizer_state=True)
        except HvdliteInvalidArgumentError as e:
            assert type(bad).__name__ in str(e) and "Supported: SGD" in str(e), e
        else:
            raise AssertionError(f"{type(bad).__name__} was accepted")
    try:
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                                 shard_optimizer_state=True, compression=hvd.Compression.fp16)
    except HvdliteInvalidArgumentError as e:
        assert "compression" in str(e), e
    else:
        raise AssertionError("compression with sharding was accepted")
    model, opt = make("adam", True)
    run(model, opt, 1)
    sd = opt.state_dict()
    sd["hvdlite_zero"] = dict(sd["hvdlite_zero"], size=N + 1)
    try:
        opt.load_state_dict(sd)
    except HvdliteInvalidArgumentError as e:
        assert "consolidate_state_dict" in str(e), e
    else:
        raise AssertionError("a shard saved at another size was accepted")
    try:
        opt.step(lambda: 0.0)
    except HvdliteInvalidArgumentError as e:
        assert "closure" in str(e), e
    else:
        raise AssertionError("step(closure) was accepted")
    # Elastic training that resized the job: TorchState.reset re-cuts the shards for the
    # job's size from the committed (consolidated) state. (The shards are made to look cut
    # for another size, as after a resize.)
    from hvdlite.torch.elastic import TorchState
    state = TorchState(model, opt)
    committed = opt.consolidate_state_dict(to=None)
    opt._zero_size += 1
    assert opt.needs_reshard()
    state.reset()
    assert not opt.needs_reshard() and opt._zero_size == N
    same_state(opt.consolidate_state_dict(to=None), committed, "resharded by TorchState.reset")


def save(path):
    model, opt = make("adamw", True)
    run(model, opt, 3)
    full = opt.consolidate_state_dict(to=0)
    if R == 0:
        torch.save({"model": model.state_dict(), "optimizer": full, "size": N}, path)
        print(f"saved at {N} ranks", flush=True)


def resume(path):
    ckpt = torch.load(path, weights_only=False)
    assert ckpt["size"] != N, "resume must run at another size than save"
    model, opt = make("adamw", True)
    ref_model, ref = make("adamw", False)
    for m, o in ((model, opt), (ref_model, ref)):
        m.load_state_dict(ckpt["model"])
        o.load_state_dict(ckpt["optimizer"])
    run(model, opt, 3, first=3)
    run(ref_model, ref, 3, first=3)
    same(model, ref_model, f"resumed at {N} ranks from {ckpt['size']}")
    if R == 0:
        print(f"resumed at {N} ranks from a checkpoint saved at {ckpt['size']}", flush=True)


mode = sys.argv[1]
if mode == "equivalence":
    equivalence()
elif mode == "save":
    save(sys.argv[2])
else:
    resume(sys.argv[2])
if R == 0:
    print(f"torch_zero OK at {N} ranks", flush=True)
hvd.shutdown()
