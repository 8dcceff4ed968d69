"""Every hvdlite.torch collective at any size: values, dtypes, autograd, handles, errors.

Run by tests/torch/test_torch_ops.py at 1, 2 and 3 ranks. A failed assertion aborts the
job (hvdlite's excepthook), so the test sees a non-zero exit and this rank's traceback.
"""
import sys
import warnings

import torch

torch.set_num_threads(1)

import hvdlite.torch as hvd  # noqa: E402

hvd.init()
R, N = hvd.rank(), hvd.size()
done = []


def check(name):
    def deco(fn):
        skipped = fn() == "skipped"
        done.append(name + (" (skipped)" if skipped else ""))
        return fn
    return deco


def expect_error(fn, exc, *fragments):
    try:
        fn()
    except exc as e:
        msg = str(e)
        for f in fragments:
            assert f in msg, f"expected {f!r} in error message: {msg}"
        return e
    raise AssertionError(f"{fn} did not raise {exc.__name__}")


def rank_tensor(r, shape=(2, 3), dtype=torch.float32):
    return (torch.arange(int(torch.tensor(shape).prod()), dtype=torch.float64).view(shape)
            + 10 * r).to(dtype)


@check("allreduce ops and scaling")
def _():
    x = rank_tensor(R)
    total = sum(rank_tensor(r) for r in range(N))
    assert torch.equal(hvd.allreduce(x, op=hvd.Sum), total)
    assert torch.allclose(hvd.allreduce(x), total / N)
    assert torch.allclose(hvd.allreduce(x, name="avg.named"), total / N)
    assert torch.equal(hvd.allreduce(x, op=hvd.Min), rank_tensor(0))
    assert torch.equal(hvd.allreduce(x, op=hvd.Max), rank_tensor(N - 1))
    prod = rank_tensor(0)
    for r in range(1, N):
        prod = prod * rank_tensor(r)
    assert torch.allclose(hvd.allreduce(x, op=hvd.Product), prod)
    y = hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5)
    assert torch.allclose(y, total)
    assert torch.allclose(hvd.allreduce(x, prescale_factor=3.0), 3 * total / N)
    assert torch.equal(x, rank_tensor(R)), "out-of-place allreduce modified its input"
    # in place: result lands in the caller's memory
    z = x.clone()
    ptr = z.data_ptr()
    out = hvd.allreduce_(z, op=hvd.Sum)
    assert out is z and z.data_ptr() == ptr and torch.equal(z, total)
    # deprecated average= alias
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        assert torch.equal(hvd.allreduce(x, average=False), total)
        assert any(issubclass(i.category, DeprecationWarning) for i in w)
    expect_error(lambda: hvd.allreduce(x, average=True, op=hvd.Sum), ValueError, "supersedes")
    expect_error(lambda: hvd.allreduce(torch.ones(2, dtype=torch.int32), op=hvd.Adasum),
                 hvd.HvdliteInvalidArgumentError, "Adasum")  # floating point only


@check("allreduce dtypes")
def _():
    for dtype in (torch.uint8, torch.int8, torch.int32, torch.int64, torch.float16,
                  torch.bfloat16, torch.float32, torch.float64):
        x = (torch.arange(5) % 3 + R).to(dtype)
        expect = sum((torch.arange(5) % 3 + r) for r in range(N)).to(dtype)
        y = hvd.allreduce(x, op=hvd.Sum, name=f"dtype.{dtype}")
        assert y.dtype == dtype and torch.equal(y, expect), (dtype, y, expect)
        g = hvd.allgather(x.view(5, 1), name=f"gather.{dtype}")
        assert g.dtype == dtype and g.shape == (5 * N, 1)
        b = hvd.broadcast(x, N - 1, name=f"bcast.{dtype}")
        assert b.dtype == dtype and torch.equal(b, (torch.arange(5) % 3 + N - 1).to(dtype))
    flags = torch.tensor([R == 0, True, False])
    assert torch.equal(hvd.broadcast(flags, 0), torch.tensor([True, True, False]))
    assert hvd.allgather(flags).dtype == torch.bool


@check("grouped allreduce")
def _():
    xs = [rank_tensor(R, (3,)), rank_tensor(R, (2, 2), torch.float64)]
    outs = hvd.grouped_allreduce(xs, op=hvd.Sum, name="grp")
    assert isinstance(outs, list) and len(outs) == 2
    for o, shape, dt in zip(outs, [(3,), (2, 2)], [torch.float32, torch.float64]):
        assert torch.equal(o, sum(rank_tensor(r, shape, dt) for r in range(N)))
    ys = [x.clone() for x in xs]
    res = hvd.grouped_allreduce_(ys)
    assert res[0] is ys[0] and torch.allclose(ys[1], outs[1] / N)
    h = hvd.grouped_allreduce_async(xs, op=hvd.Max)
    got = hvd.synchronize(h)
    assert torch.equal(got[0], rank_tensor(N - 1, (3,)))
    assert hvd.grouped_allreduce([]) == []


@check("async handles, poll, synchronize")
def _():
    x = rank_tensor(R)
    h1 = hvd.allreduce_async(x, op=hvd.Sum, name="async.1")
    h2 = hvd.allgather_async(x, name="async.2")
    h3 = hvd.broadcast_async(x, 0, name="async.3")
    y = x.clone()
    h4 = hvd.allreduce_async_(y, op=hvd.Max, name="async.4")
    h5 = hvd.broadcast_async_(x.clone(), 0, name="async.5")
    for h in (h1, h2, h3, h4, h5):
        assert isinstance(hvd.poll(h), bool)
    assert torch.equal(hvd.synchronize(h4), rank_tensor(N - 1)) and torch.equal(y, rank_tensor(N - 1))
    assert torch.equal(hvd.synchronize(h2)[-2:], rank_tensor(N - 1))
    assert torch.equal(hvd.synchronize(h1), sum(rank_tensor(r) for r in range(N)))
    assert torch.equal(hvd.synchronize(h3), rank_tensor(0))
    assert torch.equal(hvd.synchronize(h5), rank_tensor(0))
    expect_error(lambda: hvd.synchronize(h1), hvd.HvdliteInvalidArgumentError, "unknown handle")
    h = hvd.allreduce_async(x, compression=hvd.Compression.fp16)
    while not hvd.poll(h):
        pass
    assert torch.allclose(hvd.synchronize(h), sum(rank_tensor(r) for r in range(N)) / N,
                          rtol=1e-3)


@check("allgather / broadcast / alltoall / reducescatter values")
def _():
    x = torch.full((R + 1, 2), float(R))
    g = hvd.allgather(x)
    assert g.shape == (N * (N + 1) // 2, 2)
    rows = torch.cat([torch.full((r + 1, 2), float(r)) for r in range(N)])
    assert torch.equal(g, rows)
    # zero rows on some rank
    e = hvd.allgather(torch.ones(R % 2, 3))
    assert e.shape == (sum(r % 2 for r in range(N)), 3)
    b = torch.full((3,), float(R))
    assert torch.equal(hvd.broadcast(b, N - 1), torch.full((3,), float(N - 1)))
    assert torch.equal(b, torch.full((3,), float(R))), "broadcast modified its input"
    hvd.broadcast_(b, 0)
    assert torch.equal(b, torch.zeros(3))
    # alltoall, equal parts: rank r sends rows [k] to rank k
    t = torch.arange(N, dtype=torch.float32) + 100 * R
    out = hvd.alltoall(t)
    assert torch.equal(out, torch.tensor([100.0 * k + R for k in range(N)]))
    # explicit splits: rank r sends (1 + (r + k) % 2) rows to rank k
    splits = [1 + (R + k) % 2 for k in range(N)]
    t = torch.arange(sum(splits), dtype=torch.int64) + 1000 * R
    out, received = hvd.alltoall(t, splits=torch.tensor(splits, dtype=torch.int32))
    assert received.tolist() == [1 + (s + R) % 2 for s in range(N)]
    expect = []
    for s in range(N):
        s_splits = [1 + (s + k) % 2 for k in range(N)]
        off = sum(s_splits[:R])
        expect += [1000 * s + off + i for i in range(s_splits[R])]
    assert out.tolist() == expect, (out.tolist(), expect)
    hh = hvd.alltoall_async(t, splits=splits)
    out2, rec2 = hvd.synchronize(hh)
    assert torch.equal(out2, out) and torch.equal(rec2, received)
    # reducescatter: rows split n // size (+1 for the first n % size ranks)
    rows = 2 * N + 1
    x = torch.arange(rows * 2, dtype=torch.float32).view(rows, 2) * (R + 1)
    y = hvd.reducescatter(x, op=hvd.Sum)
    counts = [rows // N + (1 if r < rows % N else 0) for r in range(N)]
    start = sum(counts[:R])
    full = torch.arange(rows * 2, dtype=torch.float32).view(rows, 2) * (N * (N + 1) / 2)
    assert torch.equal(y, full[start:start + counts[R]])
    ya = hvd.synchronize(hvd.reducescatter_async(x))
    assert torch.allclose(ya, full[start:start + counts[R]] / N)


@check("autograd")
def _():
    w = [torch.arange(6, dtype=torch.float64).view(2, 3) * (r + 1) for r in range(N)]
    w_mean = sum(w) / N
    w_sum = sum(w)
    # allreduce: grad = allreduce(grad) with the same op and factors
    x = rank_tensor(R, dtype=torch.float64).requires_grad_()
    (hvd.allreduce(x) * w[R]).sum().backward()
    assert torch.allclose(x.grad, w_mean)
    x.grad = None
    (hvd.allreduce(x, op=hvd.Sum, prescale_factor=2.0) * w[R]).sum().backward()
    assert torch.allclose(x.grad, 2 * w_sum)
    # python-side compression keeps the graph (cast is differentiable)
    x.grad = None
    (hvd.allreduce(x, compression=hvd.Compression.bf16, op=hvd.Sum) * w[R]).sum().backward()
    assert x.grad.dtype == torch.float64 and torch.allclose(x.grad, w_sum.to(torch.bfloat16).double(),
                                                           rtol=1e-2)
    # grouped
    a = rank_tensor(R, (3,), torch.float64).requires_grad_()
    b = rank_tensor(R, (2, 3), torch.float64).requires_grad_()
    oa, ob = hvd.grouped_allreduce([a, b], op=hvd.Sum)
    ((oa * (R + 1)).sum() + (ob * w[R]).sum()).backward()
    assert torch.allclose(a.grad, torch.full((3,), N * (N + 1) / 2, dtype=torch.float64))
    assert torch.allclose(b.grad, w_sum)
    # allgather: this rank's slice of the incoming gradient averaged over ranks (Horovod)
    x = torch.ones(R + 1, 2, dtype=torch.float64, requires_grad=True)
    total = N * (N + 1) // 2
    ws = [torch.arange(total * 2, dtype=torch.float64).view(total, 2) * (r + 1) for r in range(N)]
    (hvd.allgather(x) * ws[R]).sum().backward()
    off = R * (R + 1) // 2
    assert torch.allclose(x.grad, (sum(ws) / N)[off:off + R + 1])
    # broadcast: root gets the averaged gradient, others zero (Horovod)
    for root in {0, N - 1}:
        x = rank_tensor(R, dtype=torch.float64).requires_grad_()
        y = hvd.broadcast(x, root)
        assert torch.equal(y.detach(), rank_tensor(root, dtype=torch.float64))
        (y * w[R]).sum().backward()
        assert torch.allclose(x.grad, w_mean if R == root else torch.zeros(2, 3, dtype=torch.float64))
    # alltoall: gradient travels back the same routes
    D = 2
    splits = [1 + (R + k) % 2 for k in range(N)]
    x = torch.randn(sum(splits), D, dtype=torch.float64, requires_grad=True)
    out, received = hvd.alltoall(x, splits=splits)

    def w_for(k):
        rows = sum(1 + (s + k) % 2 for s in range(N))
        return torch.arange(rows * D, dtype=torch.float64).view(rows, D) * (k + 1)
    (out * w_for(R)).sum().backward()
    expect = []
    for k in range(N):
        off = sum(1 + (s + k) % 2 for s in range(R))
        expect.append(w_for(k)[off:off + splits[k]])
    assert torch.allclose(x.grad, torch.cat(expect))
    # reducescatter (Horovod's rule): gradient = allgather of the incoming gradients, times
    # size for Sum, times the scale factors
    rows = 2 * N + 1
    counts = [rows // N + (1 if r < rows % N else 0) for r in range(N)]
    x = torch.randn(rows, 2, dtype=torch.float64, requires_grad=True)
    wr = [torch.full((counts[r], 2), float(r + 1), dtype=torch.float64) for r in range(N)]
    (hvd.reducescatter(x, op=hvd.Average) * wr[R]).sum().backward()
    assert torch.allclose(x.grad, torch.cat(wr))
    x.grad = None
    (hvd.reducescatter(x, op=hvd.Sum, prescale_factor=3.0) * wr[R]).sum().backward()
    assert torch.allclose(x.grad, torch.cat(wr) * 3 * N)
    x.grad = None
    (hvd.reducescatter(x, op=hvd.Average, postscale_factor=0.5) * wr[R]).sum().backward()
    assert torch.allclose(x.grad, torch.cat(wr) * 0.5)


@check("non-contiguous tensors and bad input")
def _():
    base = rank_tensor(R, (3, 4))
    nc = base.t()
    assert not nc.is_contiguous()
    total = sum(rank_tensor(r, (3, 4)) for r in range(N)).t()
    assert torch.equal(hvd.allreduce(nc, op=hvd.Sum), total)
    assert torch.equal(hvd.allgather(nc)[:4], rank_tensor(0, (3, 4)).t())
    assert torch.equal(hvd.broadcast(nc, 0), rank_tensor(0, (3, 4)).t())
    expect_error(lambda: hvd.allreduce_(nc, name="grad.nc"), hvd.HvdliteInvalidArgumentError,
                 "'grad.nc'", "not contiguous", "allreduce_")
    expect_error(lambda: hvd.broadcast_(nc, 0), hvd.HvdliteInvalidArgumentError, "not contiguous")
    expect_error(lambda: hvd.grouped_allreduce_async_([base, nc], name="g"),
                 hvd.HvdliteInvalidArgumentError, "'g.1'", "not contiguous")
    for dtype in (torch.complex64, torch.uint32, torch.float8_e4m3fn if hasattr(torch, "float8_e4m3fn") else torch.uint32):
        bad = torch.zeros(3, dtype=dtype)
        e = expect_error(lambda: hvd.allreduce(bad, name="weights.bad"),
                         hvd.HvdliteInvalidArgumentError, "'weights.bad'", str(dtype))
        assert isinstance(e, ValueError)
        expect_error(lambda: hvd.allgather(bad), hvd.HvdliteInvalidArgumentError, str(dtype))
        expect_error(lambda: hvd.broadcast_(bad, 0), hvd.HvdliteInvalidArgumentError, str(dtype))
    expect_error(lambda: hvd.allreduce([1, 2]), hvd.HvdliteInvalidArgumentError, "torch.Tensor")
    expect_error(lambda: hvd.allgather(torch.tensor(1.0)), hvd.HvdliteInvalidArgumentError,
                 "scalar")
    expect_error(lambda: hvd.allreduce(torch.eye(3).to_sparse()),
                 hvd.HvdliteInvalidArgumentError, "sparse")
    # the job is still healthy after local errors
    assert torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full((2,), float(N)))


@check("mismatch across ranks")
def _():
    if N == 1:
        return
    x = torch.ones(R + 1)
    expect_error(lambda: hvd.allreduce(x, name="mismatched.shape"), hvd.HvdliteMismatchError,
                 "mismatched.shape")
    assert torch.equal(hvd.allreduce(torch.ones(2), op=hvd.Sum), torch.full((2,), float(N)))


@check("broadcast_parameters / broadcast_optimizer_state / objects")
def _():
    torch.manual_seed(100 + R)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3), torch.nn.Linear(3, 2))
    with torch.no_grad():
        model[1].running_mean.add_(R)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    flat = torch.cat([t.detach().double().flatten() for t in model.state_dict().values()])
    gathered = hvd.allgather(flat.unsqueeze(0))
    assert all(torch.equal(gathered[0], gathered[r]) for r in range(N))
    # parameters() / named_parameters() (generators), non-contiguous parameter
    p = torch.nn.Parameter(torch.full((3, 2), float(R)).t())
    hvd.broadcast_parameters([p], root_rank=N - 1)
    assert torch.equal(p.detach(), torch.full((2, 3), float(N - 1)))
    hvd.broadcast_parameters(model.named_parameters(), root_rank=0)
    # optimizer state: root has stepped (non-empty state), the others are fresh
    opt = torch.optim.Adam(model.parameters(), lr=1e-3 * (R + 1), betas=(0.8, 0.9))
    if R == 0:
        model(torch.randn(5, 4)).sum().backward()
        opt.step()
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    sd = opt.state_dict()
    assert sd["param_groups"][0]["lr"] == 1e-3 and sd["param_groups"][0]["betas"] == (0.8, 0.9)
    assert len(sd["state"]) == 6
    states = hvd.allgather_object({k: {n: (v.tolist() if torch.is_tensor(v) else v)
                                       for n, v in s.items()} for k, s in sd["state"].items()})
    assert all(s == states[0] for s in states)
    # a fresh optimizer everywhere: its state is created first (as Horovod), then matches
    opt2 = torch.optim.SGD(model.parameters(), lr=0.1 * (R + 1), momentum=0.9)
    before = [q.detach().clone() for q in model.parameters()]
    hvd.broadcast_optimizer_state(opt2, root_rank=0)
    sd2 = opt2.state_dict()
    assert len(sd2["state"]) == 6 and sd2["param_groups"][0]["lr"] == 0.1
    bufs = hvd.allgather_object([s["momentum_buffer"].tolist() for s in sd2["state"].values()])
    assert all(b == bufs[0] for b in bufs)
    assert all(torch.equal(a, q) for a, q in zip(before, model.parameters()))  # zero steps
    # a DistributedOptimizer stepped on root only (a rank that just joined an elastic job):
    # the others' zero step must be the wrapped optimizer's own, with no all-reduce that
    # root would never join (it stalled once)
    dist = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                    named_parameters=model.named_parameters())
    if R == 0:  # gradients set by hand: backward() would start the hooks' all-reduces
        params = list(model.parameters())
        for q, g in zip(params, torch.autograd.grad(model(torch.randn(5, 4)).sum(), params)):
            q.grad = g
        with dist.skip_synchronize():
            dist.step()
    hvd.broadcast_optimizer_state(dist, root_rank=0)
    bufs = hvd.allgather_object([s["momentum_buffer"].tolist()
                                 for s in dist.state_dict()["state"].values()])
    assert len(bufs[0]) == 6 and all(b == bufs[0] for b in bufs)
    dist.zero_grad()
    # objects
    obj = hvd.broadcast_object({"rank": R, "f": (lambda v: v + 1) if R == 0 else None}, root_rank=0)
    assert obj["rank"] == 0 and obj["f"](1) == 2
    assert hvd.broadcast_object(None if R else [1, "a"], root_rank=0, name="named") == [1, "a"]
    objs = hvd.allgather_object({"r": R, "pad": "x" * (R * 7)})
    assert objs == [{"r": r, "pad": "x" * (r * 7)} for r in range(N)]


@check("SyncBatchNorm equals BatchNorm on the global batch")
def _():
    for dims, Bn, Sbn in (((3, 4, 4), torch.nn.BatchNorm2d, hvd.SyncBatchNorm),
                          ((3,), torch.nn.BatchNorm1d, hvd.SyncBatchNorm)):
        C = dims[0]
        counts = [2 + r for r in range(N)]          # uneven shards
        torch.manual_seed(7)
        X = torch.randn(sum(counts), *dims, dtype=torch.float64) * 3 + 1
        G = torch.randn(sum(counts), *dims, dtype=torch.float64)
        ref = Bn(C).double()
        with torch.no_grad():
            ref.weight.copy_(torch.linspace(0.5, 1.5, C))
            ref.bias.copy_(torch.linspace(-1, 1, C))
        sbn = Sbn(C).double()
        sbn.load_state_dict(ref.state_dict())
        Xr = X.clone().requires_grad_()
        yref = ref(Xr)
        (yref * G).sum().backward()
        start = sum(counts[:R])
        x = X[start:start + counts[R]].clone().requires_grad_()
        y = sbn(x)
        assert torch.allclose(y, yref[start:start + counts[R]], rtol=1e-9, atol=1e-10)
        (y * G[start:start + counts[R]]).sum().backward()
        assert torch.allclose(x.grad, Xr.grad[start:start + counts[R]], rtol=1e-9, atol=1e-10), \
            (x.grad - Xr.grad[start:start + counts[R]]).abs().max()
        assert torch.allclose(hvd.allreduce(sbn.weight.grad, op=hvd.Sum), ref.weight.grad)
        assert torch.allclose(hvd.allreduce(sbn.bias.grad, op=hvd.Sum), ref.bias.grad)
        assert torch.allclose(sbn.running_mean, ref.running_mean)
        assert torch.allclose(sbn.running_var, ref.running_var)
        assert int(sbn.num_batches_tracked) == 1
        # eval mode: plain BatchNorm with the (synchronized) running statistics
        ref2 = Bn(C).double()
        ref2.load_state_dict(sbn.state_dict())
        sbn.eval()
        ref2.eval()
        assert torch.allclose(sbn(x.detach()), ref2(x.detach()))
    conv = hvd.SyncBatchNorm.convert_sync_batchnorm(torch.nn.Sequential(torch.nn.BatchNorm2d(3)))
    assert isinstance(conv[0], hvd.SyncBatchNorm)


@check("join and barrier")
def _():
    hvd.barrier()
    if R == N - 1:
        extra = hvd.allreduce(torch.ones(3), op=hvd.Sum, name="after.join")
        assert torch.equal(extra, torch.ones(3)), extra     # others contribute zeros
    last = hvd.join()
    assert last == N - 1, last
    hvd.barrier()


@check("CUDA tensors staged through host")
def _():
    if not torch.cuda.is_available():
        return "skipped"
    x = rank_tensor(R).cuda()
    y = hvd.allreduce(x, op=hvd.Sum)
    assert y.is_cuda and torch.equal(y.cpu(), sum(rank_tensor(r) for r in range(N)))
    hvd.allreduce_(x, op=hvd.Sum)
    assert x.is_cuda and torch.equal(x.cpu(), y.cpu())
    g = hvd.allgather(x)
    assert g.is_cuda and g.shape == (2 * N, 3)
    b = rank_tensor(R).cuda()
    hvd.broadcast_(b, 0)
    assert torch.equal(b.cpu(), rank_tensor(0))
    xr = rank_tensor(R).cuda().requires_grad_()
    hvd.allreduce(xr).sum().backward()
    assert xr.grad.is_cuda and torch.allclose(xr.grad.cpu(), torch.ones(2, 3))


hvd.barrier()
if R == 0:
    print(f"torch_ops OK at {N} ranks: {len(done)} groups of checks: {', '.join(done)}")
    sys.stdout.flush()
hvd.shutdown()
