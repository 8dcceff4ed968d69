"""Local SGD (DistributedOptimizer(local_steps=H)).

- H=1 equals synchronous SGD (plain SGD, and SGD with momentum when the momentum buffers
  are averaged too), in float64 and float32, with backward_passes_per_step=2;
- a warm-up of synchronous steps equals synchronous SGD over those steps;
- ranks hold identical parameters right after each averaging and differ in between;
- H=4 sends 4x fewer bytes than synchronous SGD (the core's transport counters);
- state_dict carries the step count.
Prints "torch_local_sgd OK at N ranks".
"""
import torch
import torch.nn as nn

torch.set_num_threads(1)

import hvdlite.torch as hvd  # noqa: E402
from hvdlite import _core  # noqa: E402

hvd.init()
R, N = hvd.rank(), hvd.size()
PASSES = 2
ATOL = {torch.float64: 1e-12, torch.float32: 1e-6}


def make(dtype, momentum, **kw):
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(10, 24), nn.Tanh(), nn.Linear(24, 4)).to(dtype)
    opt = hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1, momentum=momentum),
        named_parameters=model.named_parameters(), backward_passes_per_step=PASSES, **kw)
    return model, opt


def train(model, opt, steps, dtype):
    for step in range(steps):
        opt.zero_grad()
        for passno in range(PASSES):
            g = torch.Generator().manual_seed(100 * step + 10 * passno + R)
            x = torch.randn(6, 10, generator=g, dtype=dtype)
            y = torch.randn(6, 4, generator=g, dtype=dtype)
            ((model(x) - y) ** 2).mean().backward()
        opt.step()


def same(a, b, dtype, what):
    for (name, x), y in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(x, y, rtol=1e-6, atol=ATOL[dtype],
                                   msg=lambda m: f"{what}: {name} at rank {R}: {m}")


def identical_across_ranks(model):
    return all(torch.equal(hvd.allreduce(p.detach(), op=hvd.Max), p.detach())
               and torch.equal(hvd.allreduce(p.detach(), op=hvd.Min), p.detach())
               for p in model.parameters())


for dtype in (torch.float64, torch.float32):
    for momentum, avg_state in ((0.0, False), (0.9, True)):
        ref_model, ref = make(dtype, momentum)
        model, opt = make(dtype, momentum, local_steps=1, average_optimizer_state=avg_state)
        train(ref_model, ref, 5, dtype)
        train(model, opt, 5, dtype)
        same(model, ref_model, dtype, f"H=1 momentum={momentum}")
        if R == 0:
            print(f"H=1 equals synchronous SGD: {dtype}, momentum {momentum}", flush=True)

# Warm-up steps are synchronous steps.
ref_model, ref = make(torch.float64, 0.9)
model, opt = make(torch.float64, 0.9, local_steps=4, local_sgd_warmup_steps=3)
train(ref_model, ref, 3, torch.float64)
train(model, opt, 3, torch.float64)
same(model, ref_model, torch.float64, "warm-up")

# Local steps diverge, averaging brings the ranks together.
model, opt = make(torch.float32, 0.9, local_steps=4)
for step in range(1, 9):
    train(model, opt, 1, torch.float32)
    if N > 1:
        assert identical_across_ranks(model) == (step % 4 == 0), step

# Bytes: H=4 sends 4x fewer than synchronous SGD.
sent = {}
for name, kw in (("sync", {}), ("local H=4", {"local_steps": 4})):
    model, opt = make(torch.float32, 0.9, **kw)
    train(model, opt, 4, torch.float32)     # negotiation and caches warm; one averaging
    _core.transport_stats(reset=True)
    train(model, opt, 8, torch.float32)     # local: averages after steps 8 and 12
    sent[name] = _core.transport_stats()["bytes_sent"] / 8
if N > 1:
    assert sent["sync"] == 4 * sent["local H=4"], sent
    if R == 0:
        print(f"bytes per step: sync {sent['sync']:.0f}, local H=4 {sent['local H=4']:.0f} "
              f"({sent['sync'] / sent['local H=4']:.2f}x fewer)", flush=True)

sd = opt.state_dict()
assert sd["hvdlite_local_sgd"]["steps_taken"] == 12
model2, opt2 = make(torch.float32, 0.9, local_steps=4)
opt2.load_state_dict(sd)
assert opt2.steps_taken == 12
# Settings that do not combine, or make no sense, are refused with a clear error.
from hvdlite.exceptions import HvdliteInvalidArgumentError  # noqa: E402
model = nn.Linear(3, 2)
for kw, error, words in (
        ({"local_steps": 0}, ValueError, "local_steps must be >= 1"),
        ({"local_steps": 2, "local_sgd_warmup_steps": -1}, ValueError, "warmup"),
        ({"local_steps": 2, "compression": hvd.Compression.topk(0.1)},
         HvdliteInvalidArgumentError, "cannot be combined with compression"),
        ({"local_steps": 2, "shard_optimizer_state": True}, HvdliteInvalidArgumentError,
         "cannot be combined with local_steps"),
        ({"local_steps": 2, "op": hvd.Sum}, HvdliteInvalidArgumentError, "op must be Average"),
        ({"bucket_bytes": 10}, TypeError, "bucket_bytes goes with shard_optimizer_state"),
        ({"local_steps": 2, "bucket_bytes": 10}, HvdliteInvalidArgumentError,
         "bucket_bytes applies to"),
        ({"local_step": 2}, TypeError, "local_step"),
        ({"compression": hvd.Compression.powersgd(rank=1), "groups": 2},
         HvdliteInvalidArgumentError, "cannot be combined with groups")):
    try:
        hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), **kw)
    except error as e:
        assert words in str(e), (kw, e)
    else:
        raise AssertionError(f"{kw} was accepted")
wrapped = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), local_steps=2)
for kw in ({}, {"local_steps": 2}, {"shard_optimizer_state": True}):
    try:
        hvd.DistributedOptimizer(wrapped, **kw)
    except ValueError as e:
        assert "already a DistributedOptimizer" in str(e), e
    else:
        raise AssertionError("wrapping twice was accepted")
for bad in (lambda: hvd.Compression.topk(1.5), lambda: hvd.Compression.powersgd(rank=0)):
    try:
        bad()
    except ValueError:
        pass
    else:
        raise AssertionError("a bad compression setting was accepted")

if R == 0:
    print(f"torch_local_sgd OK at {N} ranks", flush=True)
hvd.shutdown()
