"""Point-to-point on the hvdlite backend (run at 2 and 3 ranks), every value checked exactly:

- a ring of blocking sends (1 MiB, past MPI's eager limit) and one of isend/irecv pairs;
- two tagged messages received in the other order than sent, waited in a third; 40
  messages of one (source, tag), matched in posting order while waited in reverse;
- recv from any source: its return value (and irecv's Work's _source_rank()) is the sender;
- a subgroup from new_group: global ranks in, global ranks out (any source too);
- dtypes float32, float64, int64, bfloat16, bool, float16, uint8, complex64 through
  batch_isend_irecv; a 0-d and an empty tensor;
- non-contiguous tensors both ways (a transposed send, a strided view received into, the
  rest of its base untouched);
- a future from irecv, completed while the caller does a collective; a receive dropped
  unwaited before its message came is withdrawn (the next receive gets the message);
- errors: a rank out of range and this rank itself (naming the rank and the group's size), a
  receive smaller and one larger than the message (naming both byte counts; the channel goes
  on matching the next message).
"""
import datetime
import gc

import torch

torch.set_num_threads(1)

import torch.distributed as dist  # noqa: E402

import hvdlite.torch.distributed as hvd_dist  # noqa: E402
from worker_checks import check, count, expect_error  # noqa: E402

hvd_dist.init_process_group()
R, N = dist.get_rank(), dist.get_world_size()
nxt, prv = (R + 1) % N, (R - 1) % N

# -- a ring of blocking sends: even ranks send first, odd ranks receive first -------------
big = 1 << 18   # float32 elements: 1 MiB
out = torch.arange(big, dtype=torch.float32) + R
got = torch.empty(big)
if R % 2 == 0:
    dist.send(out, nxt)
    dist.recv(got, prv)
else:
    dist.recv(got, prv)
    dist.send(out, nxt)
check(torch.equal(got, torch.arange(big, dtype=torch.float32) + prv), "blocking ring")

# -- isend/irecv ring, Works waited receive first -----------------------------------------
got = torch.zeros(7, dtype=torch.float64)
r = dist.irecv(got, prv)
s = dist.isend(torch.full((7,), R + 0.5, dtype=torch.float64), nxt)
r.wait()
s.wait()
check(torch.equal(got, torch.full((7,), prv + 0.5, dtype=torch.float64)), f"isend ring: {got}")

# -- tags: sent 1 then 2, received 2 then 1, waited 1 then 2 (both past the eager limit) --
if R == 0:
    a, b = torch.full((5000,), 1.0), torch.full((5000,), 2.0)
    works = [dist.isend(a, 1, tag=1), dist.isend(b, 1, tag=2)]
    for w in works:
        w.wait()
elif R == 1:
    two, one = torch.zeros(5000), torch.zeros(5000)
    w2 = dist.irecv(two, 0, tag=2)
    w1 = dist.irecv(one, 0, tag=1)
    w1.wait()
    w2.wait()
    check(torch.equal(one, torch.full((5000,), 1.0)) and torch.equal(two, torch.full((5000,), 2.0)),
          f"tags out of order: tag 1 got {one[:3]}, tag 2 got {two[:3]}")

# -- one (source, tag) stream: receives match in posting order, whatever order they are
# waited in (messages of several sizes, so a receive matched out of order fails loudly) ----
sizes = [i % 3 for i in range(40)]
into = [torch.full((k,), -1.0) for k in sizes]
recvs = [dist.irecv(t, prv, tag=3) for t in into]
sends = [dist.isend(torch.full((k,), float(i)), nxt, tag=3) for i, k in enumerate(sizes)]
for w in reversed(recvs):
    w.wait()
for w in sends:
    w.wait()
check(all(torch.equal(t, torch.full((k,), float(i))) for i, (t, k) in enumerate(zip(into, sizes))),
      f"posting order: {into}")

# -- any source ----------------------------------------------------------------------------
if R == 0:
    senders = []
    for _ in range(N - 1):
        t = torch.zeros(3, dtype=torch.int64)
        src = dist.recv(t)
        check(torch.equal(t, torch.full((3,), 10 * src)), f"recv from any: rank {src} sent {t}")
        senders.append(src)
    check(sorted(senders) == list(range(1, N)), f"recv from any: senders {senders}")
    t = torch.zeros(1)
    w = dist.irecv(t, tag=1)
    w.wait()
    check(w._source_rank() == N - 1 and t.item() == N - 1, f"irecv any: {w._source_rank()}, {t}")
else:
    dist.send(torch.full((3,), 10 * R, dtype=torch.int64), 0)
    if R == N - 1:
        dist.send(torch.full((1,), float(R)), 0, tag=1)   # not one of the tag-0 messages

# -- a subgroup: its ranks are global in the calls, translated as c10d does ----------------
g = dist.new_group([0, N - 1])
if R in (0, N - 1):
    peer = N - 1 if R == 0 else 0
    t = torch.full((4,), float(R))
    back = torch.zeros(4)
    if R == 0:
        dist.send(t, peer, group=g, tag=4)
        src = dist.recv(back, group=g)
        check(src == peer, f"subgroup recv from any returned {src}, not global rank {peer}")
    else:
        dist.recv(back, src=0, group=g, tag=4)
        dist.send(t, group_dst=0, group=g)
    check(torch.equal(back, torch.full((4,), float(peer))), f"subgroup: {back}")
    dist.all_reduce(t, group=g)   # collectives of the set still run in order beside it
    check(torch.equal(t, torch.full((4,), float(N - 1))), f"subgroup all_reduce: {t}")

# -- dtypes through batch_isend_irecv (on rings: N = 2 sends both ways) ---------------------
def sample(dtype, rank):
    base = torch.arange(6) + rank
    if dtype == torch.bool:
        return base % 2 == 0
    if dtype == torch.complex64:
        return torch.complex(base.float(), -base.float())
    return base.to(dtype) * (1 if dtype in (torch.int64, torch.uint8) else 1.25)


for dtype in [torch.float32, torch.float64, torch.int64, torch.bfloat16, torch.bool,
              torch.float16, torch.uint8, torch.complex64]:
    into = torch.zeros(6, dtype=dtype)
    ops = [dist.P2POp(dist.isend, sample(dtype, R), nxt, tag=7),
           dist.P2POp(dist.irecv, into, prv, tag=7)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    check(torch.equal(into, sample(dtype, prv)), f"{dtype}: got {into}")

zero_d, empty = torch.tensor(0.0), torch.zeros(0)
works = [dist.isend(torch.tensor(float(R)), nxt), dist.irecv(zero_d, prv),
         dist.isend(torch.zeros(0), nxt), dist.irecv(empty, prv)]
for w in works:
    w.wait()
check(zero_d.item() == prv and empty.numel() == 0, f"0-d {zero_d}, empty {empty}")

# -- non-contiguous both ways ----------------------------------------------------------------
m = (torch.arange(12.0) + 100 * R).reshape(3, 4).t()        # 4 x 3, transposed
base = torch.full((4, 6), -1.0)
view = base[:, ::2]                                            # 4 x 3, strided
works = [dist.irecv(view, prv), dist.isend(m, nxt)]
for w in works:
    w.wait()
check(torch.equal(view, (torch.arange(12.0) + 100 * prv).reshape(3, 4).t()), f"strided recv: {view}")
check(torch.equal(base[:, 1::2], torch.full((4, 3), -1.0)), f"strided recv wrote past its view: {base}")

# -- a future, completed while this rank is in a collective -------------------------------
t = torch.zeros(2)
fut = dist.irecv(t, prv, tag=11).get_future()
s = dist.isend(torch.full((2,), float(R)), nxt, tag=11)
x = torch.ones(1)
dist.all_reduce(x)
check(x.item() == N, "all_reduce between p2p calls")
value = fut.wait()
s.wait()
check(torch.equal(value[0], torch.full((2,), float(prv))) and value[0] is t, f"future: {value}")
into = torch.zeros(3)
batch = dist.batch_isend_irecv([dist.P2POp(dist.irecv, into, prv, tag=12),
                                dist.P2POp(dist.isend, torch.full((3,), float(R)), nxt, tag=12)])
for w in batch:
    w.get_future().wait()
check(torch.equal(into, torch.full((3,), float(prv))), f"batch futures: {into}")

# -- a receive dropped before any message matched it is withdrawn: the next one gets it ----
if R == 1:
    dropped = dist.irecv(torch.zeros(2), 0, tag=13)
    del dropped
    gc.collect()
dist.barrier()
if R == 0:
    dist.send(torch.ones(2), 1, tag=13)
elif R == 1:
    t = torch.zeros(2)
    dist.irecv(t, 0, tag=13).wait(timeout=datetime.timedelta(seconds=60))
    check(torch.equal(t, torch.ones(2)), f"after a dropped receive: {t}")

# -- errors ----------------------------------------------------------------------------------
expect_error(Exception, lambda: dist.send(torch.ones(1), N + 1),
             [f"rank {N + 1} is out of range", f"group of {N} rank"], "send out of range")
expect_error(Exception, lambda: dist.isend(torch.ones(1), R),
             [f"rank {R} is this rank itself", f"group of {N} rank"], "send to self")
if R == 0:
    dist.send(torch.ones(3), 1, tag=5)                         # 12 bytes into 20
    dist.send(torch.ones(10000), 1, tag=5)                     # 40000 bytes into 4
    dist.send(torch.arange(5.0), 1, tag=5)                     # then one that fits
elif R == 1:
    expect_error(Exception, lambda: dist.recv(torch.zeros(5), 0, tag=5),
                 ["message has 12 bytes", "tensor has 20 bytes", "rank 0"], "recv too large")
    small = torch.zeros(1)
    expect_error(Exception, lambda: dist.irecv(small, 0, tag=5).wait(),
                 ["message has 40000 bytes", "tensor has 4 bytes"], "recv too small")
    check(small.item() == 0, "a message larger than the tensor left it untouched")
    fits = torch.zeros(5)
    dist.recv(fits, 0, tag=5)
    check(torch.equal(fits, torch.arange(5.0)), f"the channel goes on after a mismatch: {fits}")
dist.barrier()
dist.destroy_process_group()
print(f"c10d p2p ok rank {R} ({count()} checks)", flush=True)
