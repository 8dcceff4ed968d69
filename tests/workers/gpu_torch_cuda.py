"""CUDA tensors through hvdlite.torch on a real GPU (tests/gpu/test_torch_cuda.py; every rank
uses device local_rank % device_count). Each check compares against values computed here."""
import os

import torch

import hvdlite.torch as hvd
from hvdlite import _core

torch.set_num_threads(1)
hvd.init()
rank, size = hvd.rank(), hvd.size()
dev = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
torch.cuda.set_device(dev)
assert hvd.cuda_built(), "the core loaded no CUDA runtime"
checks = 0


def expect(name, got, want, tol=0.0):
    global checks
    assert got.device == dev, f"rank {rank}: {name}: result on {got.device}, not {dev}"
    g, w = got.double().cpu(), want.double().cpu()
    ok = torch.equal(g, w) if tol == 0 else torch.allclose(g, w, rtol=tol, atol=tol)
    assert ok, f"rank {rank}: {name}: got {g.flatten()[:5]} want {w.flatten()[:5]}"
    checks += 1


def ramp(n, dtype, r):
    return ((torch.arange(n, device=dev) % 7) + r + 1).to(dtype)


for dtype, tol in ((torch.float32, 0), (torch.float16, 1e-3), (torch.bfloat16, 1e-2),
                   (torch.float64, 0), (torch.int32, 0)):
    for n in (1, 1000, 300_001):
        total = sum(ramp(n, torch.float64, r) for r in range(size))
        x = ramp(n, dtype, rank)
        expect(f"sum {dtype} {n}", hvd.allreduce(x, op=hvd.Sum), total, tol)
        if dtype.is_floating_point:
            expect(f"average {dtype} {n}", hvd.allreduce(x), total / size, tol)
        y = ramp(n, dtype, rank)
        hvd.allreduce_(y, op=hvd.Sum)
        expect(f"in place {dtype} {n}", y, total, tol)

# Pipelined staging (HVDLITE_PIPELINE_PIECE_BYTES, 4 MiB by default): batches of 8 MiB and
# more copy, reduce and copy back in pieces. Random values, produced by a kernel just before
# the submission and read by one just after: at 2 ranks each element is one float addition,
# so the result must equal the sum computed here bitwise; grouped tensors of uneven sizes.
def noise(n, r):
    return torch.randn(n, generator=torch.Generator().manual_seed(r)).to(dev)


def tolerance(dtype):
    return 0 if size <= 2 and dtype == torch.float32 else 1e-2


for sizes in ((3_000_001,), (5_000_000, 1234, 2_000_003)):
    xs = [noise(n, 10 * rank + i) * 1.0 for i, n in enumerate(sizes)]
    outs = hvd.grouped_allreduce(xs, op=hvd.Sum)
    for i, (n, o) in enumerate(zip(sizes, outs)):
        want = noise(n, i)
        for r in range(1, size):
            want = want + noise(n, 10 * r + i)
        expect(f"pipelined sum {sizes}[{i}]", o, want, tolerance(torch.float32))
y = noise(6_000_001, rank).half()
hvd.allreduce_(y, op=hvd.Average)
expect("pipelined average float16 in place", y,
       sum(noise(6_000_001, r).half().double() for r in range(size)) / size, 1e-2)

xs = [ramp(10 + i, torch.float32, rank) for i in range(4)]
outs = hvd.grouped_allreduce(xs, op=hvd.Sum)
for i, o in enumerate(outs):
    expect(f"grouped {i}", o, sum(ramp(10 + i, torch.float32, r) for r in range(size)))
h = hvd.allreduce_async(ramp(77, torch.float32, rank), op=hvd.Sum)
expect("async", hvd.synchronize(h), sum(ramp(77, torch.float32, r) for r in range(size)))
g = hvd.allgather(torch.full((rank + 1, 2), float(rank), device=dev))
expect("allgather", g, torch.cat([torch.full((r + 1, 2), float(r)) for r in range(size)]).to(dev))
b = hvd.broadcast(torch.full((5,), float(rank), device=dev), size - 1)
expect("broadcast", b, torch.full((5,), float(size - 1), device=dev))
a = hvd.alltoall(torch.arange(2 * size, device=dev, dtype=torch.float32) + 100 * rank)
expect("alltoall", a, torch.cat([torch.arange(2 * rank, 2 * rank + 2) + 100.0 * r
                                 for r in range(size)]).to(dev))
rs = hvd.reducescatter(torch.ones(2 * size, 3, device=dev) * (rank + 1), op=hvd.Sum)
expect("reducescatter", rs, torch.full((2, 3), float(sum(range(1, size + 1))), device=dev))
# The same with more shapes: groups (fused on the device under NCCL), bfloat16, int64,
# uneven rows and splits, an empty part, Average.
gs = hvd.grouped_allgather([torch.full((rank + 2, 3), float(rank), device=dev),
                            torch.full((rank % 2,), rank, device=dev, dtype=torch.int64),
                            ramp(4, torch.bfloat16, rank)])
expect("grouped allgather 0", gs[0], torch.cat([torch.full((r + 2, 3), float(r)) for r in range(size)]).to(dev))
expect("grouped allgather 1", gs[1], torch.cat([torch.full((r % 2,), r, dtype=torch.int64) for r in range(size)]).to(dev))
expect("grouped allgather 2", gs[2], torch.cat([ramp(4, torch.float64, r) for r in range(size)]))
rows = 3 * size + 1  # uneven: the first rank gets one more row
rss = hvd.grouped_reducescatter([ramp(rows * 2, torch.float32, rank).reshape(rows, 2),
                                 ramp(5 * size, torch.float64, rank)], op=hvd.Average)
share = [rows // size + (1 if r < rows % size else 0) for r in range(size)]
start = sum(share[:rank])
mean0 = (sum(ramp(rows * 2, torch.float64, r) for r in range(size)) / size).reshape(rows, 2)
expect("grouped reducescatter 0", rss[0], mean0[start:start + share[rank]], 1e-6)
expect("grouped reducescatter 1", rss[1], (sum(ramp(5 * size, torch.float64, r) for r in range(size)) / size)[5 * rank:5 * rank + 5], 1e-12)
splits = [(rank + p) % 3 + 1 for p in range(size)]
x = torch.cat([torch.full((n, 2), 10.0 * rank + p, device=dev) for p, n in enumerate(splits)])
a2, received = hvd.alltoall(x, splits=splits)
expect("alltoall splits", a2, torch.cat([torch.full(((p + rank) % 3 + 1, 2), 10.0 * p + rank)
                                        for p in range(size)]).to(dev))
assert received.tolist() == [(p + rank) % 3 + 1 for p in range(size)], received
if os.environ.get("HVDLITE_GPU_OPERATIONS") == "nccl":
    # Every collective above ran on NCCL, not staged through the host.
    ran = _core.nccl_requests_run()
    for op in ("allreduce", "broadcast", "allgather", "reducescatter", "alltoall"):
        assert ran[op] > 0, f"rank {rank}: no {op} ran on NCCL: {dict(ran)}"
    checks += 1

# DistributedOptimizer against one process on the global batch.
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)).to(dev)
reference = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1)).to(dev)
reference.load_state_dict(model.state_dict())
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                               named_parameters=model.named_parameters())
ref_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
gen = torch.Generator().manual_seed(1)
for step in range(5):
    data = torch.randn(size * 8, 16, generator=gen).to(dev)
    target = torch.randn(size * 8, 1, generator=gen).to(dev)
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(data[rank * 8:(rank + 1) * 8]),
                                 target[rank * 8:(rank + 1) * 8]).backward()
    opt.step()
    ref_opt.zero_grad()
    torch.nn.functional.mse_loss(reference(data), target).backward()
    ref_opt.step()
for p, q in zip(model.parameters(), reference.parameters()):
    expect("DistributedOptimizer", p.detach(), q.detach(), 1e-5)

torch.cuda.synchronize()
if rank == 0:
    print(f"GPU operations: {os.environ.get('HVDLITE_GPU_OPERATIONS', 'default')}, "
          f"nccl_built {hvd.nccl_built()}, {size} rank(s) on {torch.cuda.device_count()} GPU(s), "
          f"requests on NCCL {dict(_core.nccl_requests_run())}",
          flush=True)
hvd.shutdown()
print(f"rank {rank}: {checks} checks passed", flush=True)
