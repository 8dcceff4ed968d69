"""torch.distributed on the "hvdlite" backend: every collective against references.

Run by tests/torch/test_c10d.py at 2 and 3 ranks. ``argv[1]``: ``init`` (hvdlite://),
``env`` (plain ``dist.init_process_group("hvdlite")`` with torchrun's variables), or
``hvd-first`` (hvdlite.init() starts the engine first; init_process_group joins it). Each rank's
input is known to every rank, so each result is checked exactly against a reference
computed here. A failed check raises; the excepthook then ends the whole job.
"""
import os
import sys

import torch

torch.set_num_threads(1)

import torch.distributed as dist  # noqa: E402

import hvdlite  # noqa: E402
import hvdlite.torch.distributed as hvd_dist  # noqa: E402
from worker_checks import check, expect_error  # noqa: E402

how = sys.argv[1] if len(sys.argv) > 1 else "init"
if how == "hvd-first":
    os.environ["HVDLITE_DYNAMIC_PROCESS_SETS"] = "1"
    hvdlite.init()
    assert hvdlite.is_initialized()
if how == "env":   # torchrun's variables (MASTER_ADDR/PORT come from the test): env://
    os.environ["RANK"] = os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", ""))
    os.environ["WORLD_SIZE"] = os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("PMI_SIZE", ""))
    dist.init_process_group("hvdlite")
else:
    hvd_dist.init_process_group()
R, N = dist.get_rank(), dist.get_world_size()
check(dist.get_backend() == "hvdlite", f"backend is {dist.get_backend()}")
check((R, N) == (hvdlite.rank(), hvdlite.size()), "rank and size come from hvdlite")
Op = dist.ReduceOp


def data(r, shape=(2, 3), dtype=torch.float32):
    """Rank r's input: distinct per rank and exact in every dtype used here."""
    n = 1
    for s in shape:
        n *= s
    return (torch.arange(n, dtype=torch.float64).view(shape) + 10 * r + 1).to(dtype)


def eq(a, b, what):
    check(a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b),
          f"{what}: got {a} expected {b}")


# -- all_reduce: every op, several dtypes, non-contiguous, async with futures ------------
everyone = [data(r) for r in range(N)]
refs = {Op.SUM: sum(everyone), Op.MIN: torch.stack(everyone).min(0).values,
        Op.MAX: torch.stack(everyone).max(0).values, Op.PRODUCT: torch.stack(everyone).prod(0),
        Op.AVG: sum(everyone) / N}
for op, ref in refs.items():
    t = data(R)
    dist.all_reduce(t, op=op)
    check(torch.allclose(t, ref, rtol=1e-6), f"all_reduce {op}: {t} vs {ref}")
for dtype in (torch.float64, torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.uint8):
    t = data(R, dtype=dtype)
    dist.all_reduce(t)
    eq(t, sum(data(r, dtype=torch.float64) for r in range(N)).to(dtype), f"all_reduce {dtype}")
t = data(R, (3, 4)).t()                       # not contiguous: the result lands in t anyway
dist.all_reduce(t)
eq(t, sum(data(r, (3, 4)) for r in range(N)).t(), "all_reduce non-contiguous")
works = [dist.all_reduce(data(R) * (k + 1), async_op=True) for k in range(5)]
futs = [w.get_future().then(lambda f: f.value()[0] * 2) for w in works]
for k, f in enumerate(futs):
    eq(f.wait(), sum(everyone) * (k + 1) * 2, f"async all_reduce future {k}")
for w in works:
    check(w.wait() and w.is_completed(), "async work completes")
c = data(R, dtype=torch.complex64) * (1 + 1j)
dist.all_reduce(c)
eq(c, sum(data(r, dtype=torch.complex64) for r in range(N)) * (1 + 1j), "all_reduce complex")
expect_error(Exception, lambda: dist.all_reduce(data(R), op=Op.BAND),
             ["BAND", "not supported"], "all_reduce BAND")

# -- sparse all-reduce (SUM): ranks hold different numbers of entries, some overlapping --
idx = torch.tensor([[R, R + 1, 7][: R + 1]])
sp = torch.sparse_coo_tensor(idx, torch.full((R + 1, 2), float(R + 1)), (10, 2))
dense = sum(torch.sparse_coo_tensor(torch.tensor([[r, r + 1, 7][: r + 1]]),
                                    torch.full((r + 1, 2), float(r + 1)), (10, 2)).to_dense()
            for r in range(N))
dist.all_reduce(sp)
check(sp.is_sparse and sp.is_coalesced(), "sparse all_reduce leaves a coalesced sparse tensor")
eq(sp.to_dense(), dense, "sparse all_reduce")
expect_error(Exception, lambda: dist.all_reduce(sp, op=Op.MAX), ["sparse", "SUM"],
             "sparse all_reduce MAX")

# -- coalesced all-reduce (fused): the coalescing manager and all_reduce_coalesced -------
ts = [data(R, (k + 1,)) for k in range(4)]
with dist._coalescing_manager(async_ops=True) as cm:
    for t in ts:
        dist.all_reduce(t)
cm.wait()
for k, t in enumerate(ts):
    eq(t, sum(data(r, (k + 1,)) for r in range(N)), f"coalesced all_reduce {k}")

# -- broadcast ---------------------------------------------------------------------------
for root in range(N):
    for dtype in (torch.float32, torch.int64, torch.complex128, torch.bool):
        t = data(R, dtype=dtype) if dtype != torch.bool else (data(R) > 10 * R + 3)
        dist.broadcast(t, src=root)
        want = data(root, dtype=dtype) if dtype != torch.bool else (data(root) > 10 * root + 3)
        eq(t, want, f"broadcast from {root} {dtype}")

# -- all_gather_coalesced: output_lists[rank][i] gets input i of that rank ------------------
ins = [data(R, (k + 1,)) for k in range(3)]
out_lists = [[torch.empty(k + 1) for k in range(3)] for _ in range(N)]
dist.all_gather_coalesced(out_lists, ins)
for r in range(N):
    for k in range(3):
        eq(out_lists[r][k], data(r, (k + 1,)), f"all_gather_coalesced rank {r} input {k}")
expect_error(Exception, lambda: dist.all_gather_coalesced([[torch.empty(1)]], ins),
             ["allgather_coalesced", "output lists"], "all_gather_coalesced wrong layout")

# -- all_gather, all_gather_into_tensor, gather --------------------------------------------
outs = [torch.empty(2, 3) for _ in range(N)]
dist.all_gather(outs, data(R))
for r in range(N):
    eq(outs[r], data(r), f"all_gather [{r}]")
out = torch.empty(N * 2, 3, dtype=torch.float64)
dist.all_gather_into_tensor(out, data(R, dtype=torch.float64))
eq(out, torch.cat([data(r, dtype=torch.float64) for r in range(N)]), "all_gather_into_tensor")
out = torch.empty(N, 2, 3)
dist.all_gather_into_tensor(out, data(R), async_op=True).wait()
eq(out, torch.stack([data(r) for r in range(N)]), "all_gather_into_tensor stacked, async")
# The contiguous outputs above took the results directly (Note [outputs the caller gives]):
# no copy. A bfloat16 one, a complex one (moved as bytes) and a non-contiguous reduce-scatter
# output likewise land or are copied, exactly.
copies = []
real_into = hvd_dist._into
hvd_dist._into = lambda dst, src: (copies.append(dst.shape), real_into(dst, src))
out = torch.empty(N * 2, 3, dtype=torch.bfloat16)
dist.all_gather_into_tensor(out, data(R, dtype=torch.bfloat16))
eq(out, torch.cat([data(r, dtype=torch.bfloat16) for r in range(N)]), "all_gather_into_tensor bf16")
out = torch.empty(N * 2, dtype=torch.complex64)
dist.all_gather_into_tensor(out, torch.tensor([R + 1j, -R - 1j], dtype=torch.complex64))
eq(out, torch.tensor([v for r in range(N) for v in (r + 1j, -r - 1j)], dtype=torch.complex64),
   "all_gather_into_tensor complex")
check(copies == [], f"outputs given were copied into: {copies}")
strided = torch.zeros(3, 2).t()[:, :2]   # 2 x 2, not contiguous
dist.reduce_scatter_tensor(strided, torch.ones(2 * N, 2))
eq(strided, torch.full((2, 2), float(N)), "reduce_scatter_tensor into a non-contiguous output")
check(copies == [torch.Size([2, 2])], f"the non-contiguous output was not copied into: {copies}")
hvd_dist._into = real_into
objs = [None] * N
dist.all_gather_object(objs, {"rank": R})
check(objs == [{"rank": r} for r in range(N)], f"all_gather_object {objs}")
for root in range(N):
    gl = [torch.empty(2, 3) for _ in range(N)] if R == root else None
    dist.gather(data(R), gl, dst=root)
    if R == root:
        for r in range(N):
            eq(gl[r], data(r), f"gather to {root} [{r}]")

# -- reduce ------------------------------------------------------------------------------
for root in range(N):
    t = data(R)
    dist.reduce(t, dst=root, op=Op.MAX)
    eq(t, refs[Op.MAX] if R == root else data(R), f"reduce to {root}")

# -- reduce_scatter, reduce_scatter_tensor -------------------------------------------------
blocks = [data(R, (2,)) + 100 * k for k in range(N)]
out = torch.empty(2)
dist.reduce_scatter(out, blocks)
eq(out, sum(data(r, (2,)) + 100 * R for r in range(N)), "reduce_scatter")
big = data(R, (N * 2, 3))
out = torch.empty(2, 3)
dist.reduce_scatter_tensor(out, big, op=Op.AVG)
want = sum(data(r, (N * 2, 3)) for r in range(N))[2 * R:2 * R + 2] / N
check(torch.allclose(out, want), f"reduce_scatter_tensor AVG {out} vs {want}")

# -- all_to_all_single (equal and uneven splits), all_to_all, scatter ----------------------
t = torch.arange(N * 2, dtype=torch.float32) + 100 * R
out = torch.empty(N * 2)
dist.all_to_all_single(out, t)
eq(out, torch.cat([torch.arange(2 * R, 2 * R + 2, dtype=torch.float32) + 100 * r
                   for r in range(N)]), "all_to_all_single")
# rank r sends (s + 1) rows to rank s; each row: [sender, receiver]
in_splits = [s + 1 for s in range(N)]
rows = torch.tensor([[R, s] for s in range(N) for _ in range(s + 1)], dtype=torch.int64)
out_splits = [R + 1] * N
out = torch.empty(sum(out_splits), 2, dtype=torch.int64)
dist.all_to_all_single(out, rows, out_splits, in_splits)
eq(out, torch.tensor([[r, R] for r in range(N) for _ in range(R + 1)]), "all_to_all_single splits")
ins = [torch.full((s + 1,), float(R * 10 + s)) for s in range(N)]
outs = [torch.empty(R + 1) for _ in range(N)]
dist.all_to_all(outs, ins)
for r in range(N):
    eq(outs[r], torch.full((R + 1,), float(r * 10 + R)), f"all_to_all [{r}]")
for root in range(N):
    out = torch.empty(2, 3)
    dist.scatter(out, [data(r) * 7 for r in range(N)] if R == root else None, src=root)
    eq(out, data(R) * 7, f"scatter from {root}")

# -- barrier, send/recv --------------------------------------------------------------------
dist.barrier()
dist.barrier(async_op=True).wait()
got = torch.zeros(2)   # a ring of sends between collectives (the details: c10d_p2p.py)
works = [dist.irecv(got, (R - 1) % N), dist.isend(torch.full((2,), float(R)), (R + 1) % N)]
for w in works:
    w.wait()
eq(got, torch.full((2,), float((R - 1) % N)), "send/recv ring")

# -- new_group: process sets; collectives in a subgroup and the world interleaved ---------
sub = dist.new_group([0, N - 1])
if R in (0, N - 1):
    t = data(R)
    w = dist.all_reduce(t, group=sub, async_op=True)
    u = data(R)
    dist.all_reduce(u)
    w.wait()
    eq(t, data(0) + data(N - 1), "subgroup all_reduce")
    eq(u, sum(everyone), "world all_reduce while the subgroup's is in flight")
    b = data(R)
    dist.broadcast(b, src=N - 1, group=sub)      # src: a global rank
    eq(b, data(N - 1), "subgroup broadcast")
else:
    check(sub == dist.GroupMember.NON_GROUP_MEMBER, "non-member gets NON_GROUP_MEMBER")
    u = data(R)
    dist.all_reduce(u)
    eq(u, sum(everyone), "world all_reduce beside the subgroup")
world_again = dist.new_group(list(range(N)))
t = data(R)
dist.all_reduce(t, group=world_again)
eq(t, sum(everyone), "all_reduce in a second group of every rank")

# -- mismatch: the first disagreeing call is named -----------------------------------------
t = data(R, (2 + R,))
msg = expect_error(Exception, lambda: dist.all_reduce(t), ["allreduce (call",
                                                          "c10d.0."], "mismatched shapes")
check("shape" in msg.lower(), f"mismatch names shapes: {msg}")
if R == 0:
    print("mismatch message:", msg, flush=True)

dist.barrier()
dist.destroy_process_group()
print(f"c10d collectives ok rank {R}", flush=True)
