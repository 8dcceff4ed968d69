"""hvdlite.torch with process_set= at 3 ranks: every collective kind, autograd, the optimizer.

Run by tests/torch/test_process_sets.py at 3 ranks. Sets: ``ps02`` = ranks [0, 2] (rank 1 is
outside it) and ``ps12`` = ranks [1, 2] (overlapping on rank 2); a third set, [0, 1], is added
and removed while the job runs. Results are checked against references computed here in
numpy/torch from every rank's known input. A failed assertion aborts the job.
"""
import numpy as np
import torch

torch.set_num_threads(1)

import hvdlite.torch as hvd  # noqa: E402

ps02, ps12 = hvd.ProcessSet([0, 2]), hvd.ProcessSet([1, 2])
hvd.init(process_sets=[ps02, ps12])
R, N = hvd.rank(), hvd.size()
assert N == 3, "this worker needs exactly 3 ranks"


def data(r, shape=(2, 3), dtype=torch.float32):
    """The input rank ``r`` contributes: distinct per rank, exact in every dtype used."""
    return (torch.arange(int(np.prod(shape)), dtype=torch.float64).view(shape) + 10 * r).to(dtype)


def expect_error(fn, exc, *fragments):
    try:
        fn()
    except exc as e:
        for f in fragments:
            assert f in str(e), f"expected {f!r} in error message: {e}"
        return
    raise AssertionError(f"{fn} did not raise {exc.__name__}")


def check_set(ps):
    """Every collective in ``ps`` on its members, against references over ``ps.ranks``."""
    members = ps.ranks
    n = len(members)
    assert ps.included() and ps.size() == n and ps.rank() == members.index(R)
    x = data(R)
    total = sum(data(r) for r in members)

    # allreduce: every op, Average divides by the set's size (not the world's)
    assert torch.equal(hvd.allreduce(x, op=hvd.Sum, process_set=ps), total)
    assert torch.equal(hvd.allreduce(x, op=hvd.Average, process_set=ps), total / n)
    assert torch.equal(hvd.allreduce(x, op=hvd.Min, process_set=ps), data(members[0]))
    assert torch.equal(hvd.allreduce(x, op=hvd.Max, process_set=ps), data(members[-1]))
    prod = data(members[0]) * data(members[1])
    assert torch.equal(hvd.allreduce(x, op=hvd.Product, process_set=ps), prod)
    assert torch.allclose(hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.25,
                                        process_set=ps), total / 2)
    z = x.clone()
    assert hvd.allreduce_(z, op=hvd.Sum, process_set=ps) is z and torch.equal(z, total)
    h = hvd.allreduce_async(x, op=hvd.Sum, name="ps.async", process_set=ps)
    assert torch.equal(hvd.synchronize(h), total)
    outs = hvd.grouped_allreduce([x, 2 * x], op=hvd.Average, process_set=ps)
    assert torch.equal(outs[0], total / n) and torch.equal(outs[1], 2 * total / n)
    ints = hvd.allreduce(x.to(torch.int32), op=hvd.Sum, process_set=ps)
    assert ints.dtype == torch.int32 and torch.equal(ints, total.to(torch.int32))

    # allgather: first dimensions differ per member, order is the set's rank order
    mine = data(R, shape=(R + 1, 2))
    gathered = hvd.allgather(mine, process_set=ps)
    assert torch.equal(gathered, torch.cat([data(r, shape=(r + 1, 2)) for r in members]))
    g0, g1 = hvd.grouped_allgather([mine, x], process_set=ps)
    assert torch.equal(g1, torch.cat([data(r) for r in members]))

    # broadcast: the root is a global rank inside the set
    root = members[-1]
    assert torch.equal(hvd.broadcast(x, root_rank=root, process_set=ps), data(root))
    b = x.clone()
    hvd.broadcast_(b, root_rank=root, process_set=ps)
    assert torch.equal(b, data(root))
    assert hvd.broadcast_object({"from": R}, root_rank=root, process_set=ps) == {"from": root}
    assert hvd.allgather_object(R * 7, process_set=ps) == [r * 7 for r in members]

    # alltoall: member i sends (i + 1) rows to each member j; receive order follows the set
    me = members.index(R)
    rows = torch.cat([torch.full((me + 1, 2), float(100 * R + j)) for j in range(n)])
    out, received = hvd.alltoall(rows, splits=[me + 1] * n, process_set=ps)
    want = torch.cat([torch.full((i + 1, 2), float(100 * members[i] + me)) for i in range(n)])
    assert torch.equal(out, want) and received.tolist() == [i + 1 for i in range(n)]

    # reducescatter: member i gets the i-th slice of the set's sum/average
    big = data(R, shape=(2 * n, 3))
    big_total = sum(data(r, shape=(2 * n, 3)) for r in members)
    piece = slice(2 * me, 2 * me + 2)
    assert torch.equal(hvd.reducescatter(big, op=hvd.Sum, process_set=ps), big_total[piece])
    assert torch.equal(hvd.reducescatter(big, op=hvd.Average, process_set=ps),
                       big_total[piece] / n)
    rs = hvd.grouped_reducescatter([big, 3 * big], op=hvd.Sum, process_set=ps)
    assert torch.equal(rs[1], 3 * big_total[piece])

    # autograd through each collective, with Horovod's gradient rules over the set
    w = x.clone().requires_grad_()
    hvd.allreduce(w, op=hvd.Average, process_set=ps).sum().backward()
    assert torch.equal(w.grad, torch.ones_like(x)), w.grad  # mean over n of n ones
    w = x.clone().requires_grad_()
    (hvd.allgather(w, process_set=ps) * (me + 1)).sum().backward()
    # Horovod's rule: the gathered gradient averaged over the set, this member's slice
    assert torch.equal(w.grad, torch.full_like(x, sum(range(1, n + 1)) / n)), w.grad
    w = x.clone().requires_grad_()
    hvd.broadcast(w, root_rank=root, process_set=ps).sum().backward()
    # Horovod's rule: the gradient averaged over the set, kept on the root only
    assert torch.equal(w.grad, torch.full_like(x, 1.0 if R == root else 0.0)), w.grad
    w = big.clone().requires_grad_()
    hvd.reducescatter(w, op=hvd.Sum, process_set=ps).sum().backward()
    # Horovod's rule: a Sum's gradient is the gathered gradient times the set's size
    assert torch.equal(w.grad, torch.full_like(big, float(n))), w.grad

    hvd.barrier(process_set=ps)


def check_optimizer(ps):
    """DistributedOptimizer(process_set=ps) on the set's members equals full-batch SGD; so do
    the sharded state and local SGD with H=1 over the set; top-k keeps the members equal."""
    for options in ({}, {"shard_optimizer_state": True}, {"local_steps": 1},
                    {"compression": hvd.Compression.topk(0.3)}):
        check_optimizer_with(ps, options)


def check_optimizer_with(ps, options):
    torch.manual_seed(0)
    features = torch.randn(4 * len(ps.ranks), 5, dtype=torch.float64)
    targets = torch.randn(4 * len(ps.ranks), 1, dtype=torch.float64)

    def model():
        torch.manual_seed(1)
        return torch.nn.Linear(5, 1).double()

    reference = model()
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1)
    dist = model()
    opt = hvd.DistributedOptimizer(torch.optim.SGD(dist.parameters(), lr=0.1),
                                   named_parameters=dist.named_parameters(), process_set=ps,
                                   **options)
    shard = slice(4 * ps.rank(), 4 * ps.rank() + 4)
    for _ in range(3):
        ref_opt.zero_grad()
        torch.nn.functional.mse_loss(reference(features), targets).backward()
        ref_opt.step()
        opt.zero_grad()
        torch.nn.functional.mse_loss(dist(features[shard]), targets[shard]).backward()
        opt.step()
    if "compression" not in options:
        for a, b in zip(reference.parameters(), dist.parameters()):
            assert torch.allclose(a, b, rtol=1e-12, atol=1e-12), (options, a, b)
    every = hvd.allgather(dist.weight.detach(), process_set=ps)
    assert torch.equal(every[0], every[1]), f"{options}: members' parameters diverged"


def check_outsider(ps):
    """A rank outside ``ps`` gets a clear error naming the set, and can go on afterwards."""
    x = data(R)
    for call in (lambda: hvd.allreduce(x, process_set=ps),
                 lambda: hvd.allgather(x, process_set=ps),
                 lambda: hvd.broadcast(x, root_rank=ps.ranks[0], process_set=ps),
                 lambda: hvd.alltoall(x, process_set=ps),
                 lambda: hvd.reducescatter(x, process_set=ps),
                 lambda: hvd.barrier(process_set=ps)):
        expect_error(call, ValueError, "not a member of process set", str(ps.process_set_id))
    assert ps.included() is False
    expect_error(ps.rank, ValueError, "not a member of process set")
    check_outsider_optimizer(ps)


def check_outsider_optimizer(ps):
    """Outside ``ps``, DistributedOptimizer(process_set=ps) steps on this rank's own
    gradients like the optimizer it wraps (Horovod's test_optimizer_process_sets)."""
    torch.manual_seed(R)
    features = torch.randn(4, 5, dtype=torch.float64)
    targets = torch.randn(4, 1, dtype=torch.float64)
    models = []
    for wrap in (False, True):
        torch.manual_seed(1)
        model = torch.nn.Linear(5, 1).double()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        if wrap:
            opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                                           process_set=ps)
        for _ in range(2):
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(features), targets).backward()
            opt.step()
        models.append(model)
    for a, b in zip(models[0].parameters(), models[1].parameters()):
        assert torch.equal(a, b), (a, b)


# Disjoint work at once: ranks 0 and 2 run in ps02 while rank 1 is told it is outside it.
if ps02.included():
    check_set(ps02)
    check_optimizer(ps02)
else:
    check_outsider(ps02)
hvd.barrier()
# Overlapping set: rank 2 belongs to both; rank 0 is the outsider now.
if ps12.included():
    check_set(ps12)
    check_optimizer(ps12)
else:
    check_outsider(ps12)

# A set added and removed while the job runs (HVDLITE_DYNAMIC_PROCESS_SETS=1).
ps01 = hvd.add_process_set([0, 1])
if ps01.included():
    check_set(ps01)
else:
    check_outsider(ps01)
assert hvd.remove_process_set(ps01) and ps01.process_set_id is None

# The global set still works, with the world's size.
assert torch.equal(hvd.allreduce(data(R), op=hvd.Average), sum(data(r) for r in range(N)) / N)
print(f"rank {R}: torch process sets ok", flush=True)
