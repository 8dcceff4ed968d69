"""hvdlite.torch with op=hvd.Adasum at any number of ranks: allreduce (sync, async, in place,
grouped) for float16, bfloat16, float32 and float64 against the float64 reference
(adasum_reference.py), and DistributedOptimizer(op=Adasum) against a simulation of Horovod's
Adasum optimizer (Note [Adasum optimizer]): every rank's own optimizer steps on its own
gradients, the parameters' deltas are combined by Adasum. At a number of ranks that is not a
power of two: Horovod's NotImplementedError on every rank, and the job goes on.
"""
import copy

import numpy as np
import torch

import hvdlite.torch as hvd
from adasum_reference import adasum_tree, relative_error, tolerance

torch.manual_seed(0)
hvd.init()
R, N = hvd.rank(), hvd.size()
EPS = {torch.float16: 2.0 ** -10, torch.bfloat16: 2.0 ** -7, torch.float32: 2.0 ** -23,
       torch.float64: 2.0 ** -52}


def expect(exc_type, pattern, fn):
    import re
    try:
        fn()
    except exc_type as e:
        assert re.search(pattern, str(e)), str(e)
        return
    raise AssertionError(f"did not raise {exc_type.__name__}")


def close(got, inputs, dtype, scale=1.0, what=""):
    want = adasum_tree([x.double().numpy() for x in inputs]) * scale
    err = relative_error(got.double().numpy(), want)
    assert err <= tolerance(EPS[dtype], N), f"{what} {dtype}: error {err}"


if N & (N - 1):
    expect(NotImplementedError, f"power-of-two number of ranks.*has {N}",
           lambda: hvd.allreduce(torch.ones(3), op=hvd.Adasum))
    model = torch.nn.Linear(3, 2)
    expect(NotImplementedError, f"has {N}", lambda: hvd.DistributedOptimizer(
        torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters(),
        op=hvd.Adasum))
    assert torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full((2,), float(N)))
    hvd.shutdown()
    print(f"rank {R}: ALL OK")
    raise SystemExit(0)

# ------------------------------------------------------------------------- allreduce
for dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
    g = torch.Generator().manual_seed(5)
    shared = torch.randn(300, generator=g, dtype=torch.float64)
    inputs = [(shared * (r % 3 + 1) + torch.randn(300, generator=g, dtype=torch.float64)).to(dtype)
              for r in range(N)]
    mine = inputs[R].clone()
    close(hvd.allreduce(mine, op=hvd.Adasum), inputs, dtype, what="allreduce")
    assert torch.equal(mine, inputs[R]), "allreduce leaves its input alone"
    close(hvd.synchronize(hvd.allreduce_async(mine, op=hvd.Adasum)), inputs, dtype, what="async")
    x = mine.clone()
    hvd.allreduce_(x, op=hvd.Adasum, prescale_factor=4.0, postscale_factor=0.5)
    close(x, inputs, dtype, scale=2.0, what="allreduce_ with scales")
    parts = [mine[:10].clone(), mine[10:].reshape(29, 10).clone()]
    outs = hvd.grouped_allreduce(parts, op=hvd.Adasum)
    close(outs[0], [t[:10] for t in inputs], dtype, what="grouped member 0")
    close(outs[1].reshape(-1), [t[10:] for t in inputs], dtype, what="grouped member 1")

# Differentiable: the gradient of an Adasum all-reduce is the Adasum of the gradients, as in
# Horovod (the same op backwards).
w = torch.arange(4.0, dtype=torch.float64, requires_grad=True)
y = hvd.allreduce(w * (R + 1), op=hvd.Adasum, name="diff")
upstream = torch.full((4,), float(R + 1), dtype=torch.float64)
y.backward(upstream)
assert w.grad is not None and torch.isfinite(w.grad).all()


# --------------------------------------------------------- DistributedOptimizer(op=Adasum)
def make_model():
    torch.manual_seed(42)
    return torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 1))


def batches(rank, step, passes):
    g = torch.Generator().manual_seed(1000 * step + 10 * rank)
    return [(torch.randn(8, 6, generator=g), torch.randn(8, 1, generator=g))
            for _ in range(passes)]


def make_optimizer(params, kind):
    if kind == "sgd":
        return torch.optim.SGD(params, lr=0.1, momentum=0.9)
    return torch.optim.Adam(params, lr=0.01)


def simulate(kind, steps, passes):
    """Horovod's Adasum optimizer by hand: per rank a model copy holding the shared weights
    and its own optimizer state; each step every rank steps locally, the deltas combine."""
    shared = make_model()
    replicas = [copy.deepcopy(shared) for _ in range(N)]
    opts = [make_optimizer(m.parameters(), kind) for m in replicas]
    for step in range(steps):
        deltas = []
        for r in range(N):
            m, opt = replicas[r], opts[r]
            m.load_state_dict(shared.state_dict())
            opt.zero_grad()
            for x, t in batches(r, step, passes):
                torch.nn.functional.mse_loss(m(x), t).backward()
            start = [p.detach().clone() for p in m.parameters()]
            opt.step()
            deltas.append([p.detach() - s for p, s in zip(m.parameters(), start)])
        with torch.no_grad():
            for i, p in enumerate(shared.parameters()):
                p.add_(torch.from_numpy(adasum_tree([d[i].double().numpy() for d in deltas]))
                       .to(p.dtype).reshape(p.shape))
    return shared


for kind, passes in (("sgd", 1), ("adam", 1), ("sgd", 2)):
    model = make_model()
    opt = hvd.DistributedOptimizer(make_optimizer(model.parameters(), kind),
                                   named_parameters=model.named_parameters(), op=hvd.Adasum,
                                   backward_passes_per_step=passes)
    assert isinstance(opt, torch.optim.SGD if kind == "sgd" else torch.optim.Adam)
    for step in range(3):
        opt.zero_grad()
        for x, t in batches(R, step, passes):
            torch.nn.functional.mse_loss(model(x), t).backward()
        opt.step()
    want = simulate(kind, 3, passes)
    for (name, p), q in zip(model.named_parameters(), want.parameters()):
        err = (p.detach() - q.detach()).abs().max().item()
        assert err < 1e-5, f"{kind} passes={passes} {name}: off by {err}"
    # Every rank holds the same parameters.
    for p in model.parameters():
        g = hvd.allgather(p.detach()[None])
        assert all(torch.equal(g[r], p.detach()) for r in range(N))
    opt.synchronize()  # nothing to do: Horovod's Adasum optimizer reduces in step()
    expect(AssertionError, "not supported when using Adasum", lambda: opt.skip_synchronize().__enter__())

# A pass beyond backward_passes_per_step is refused, as in Horovod.
model = make_model()
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                               named_parameters=model.named_parameters(), op=hvd.Adasum)
x, t = batches(R, 0, 1)[0]
torch.nn.functional.mse_loss(model(x), t).backward()
expect(AssertionError, "backward_passes_per_step",
       lambda: torch.nn.functional.mse_loss(model(x), t).backward())
opt.step()
expect(ValueError, "Adasum", lambda: hvd.DistributedOptimizer(
    torch.optim.SGD(model.parameters(), lr=0.1), named_parameters=model.named_parameters(),
    op=hvd.Adasum, shard_optimizer_state=True))

hvd.shutdown()
print(f"rank {R}: ALL OK")
