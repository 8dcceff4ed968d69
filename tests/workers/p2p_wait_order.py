"""Point-to-point waited in any order (Note [point-to-point progress] in
csrc/transport/peer_channel.h), at 2 and 4 ranks, every value checked exactly. Each rank posts
a receive from the previous rank of a ring and a send to the next (at 2 ranks: to each other):

- at every size from 128 B to 16 MiB (doubling; the eager limit is 4 KiB), waiting on the
  send first and on the receive first, through torch.distributed's isend / irecv on the
  "hvdlite" backend and through hvdlite.p2p on numpy arrays;
- batch_isend_irecv of float64 33x17 (and 512x256) tensors with both neighbours, the works
  waited in reverse, with the sends listed first and with the receives listed first;
- a receive whose rank waits on a collective meanwhile: odd ranks send 4 MiB to the even rank
  before them and wait on the send before they join the all-reduce; the even rank waits in
  the all-reduce before it waits on its receive.

Every wait has a limit (WAIT_S), so a transfer that never moves fails naming itself.
"""
import datetime

import numpy as np
import torch

torch.set_num_threads(1)

import torch.distributed as dist  # noqa: E402

import hvdlite  # noqa: E402
import hvdlite.torch.distributed as hvd_dist  # noqa: E402
from hvdlite import p2p  # noqa: E402
from worker_checks import check, count  # noqa: E402

WAIT_S = 60
LIMIT = datetime.timedelta(seconds=WAIT_S)

hvd_dist.init_process_group()
R, N = dist.get_rank(), dist.get_world_size()
nxt, prv = (R + 1) % N, (R - 1) % N
SIZES = [128 << k for k in range(18)]  # 128 B .. 16 MiB


def pattern(nbytes, rank):
    return ((np.arange(nbytes, dtype=np.int64) * 7 + rank) % 251).astype(np.uint8)


def wait_all(works, what):
    for label, w in works:
        try:
            w.wait(timeout=LIMIT) if isinstance(w, dist.Work) else w.wait(timeout=WAIT_S)
        except Exception as e:  # noqa: BLE001 - named, then raised
            raise AssertionError(f"rank {R}: {what}: waiting on the {label} failed: {e}") from e


for nbytes in SIZES:
    want = torch.from_numpy(pattern(nbytes, prv))
    for order in ("send first", "recv first"):
        got = torch.zeros(nbytes, dtype=torch.uint8)
        r = dist.irecv(got, prv)
        s = dist.isend(torch.from_numpy(pattern(nbytes, R)), nxt)
        works = [("send", s), ("recv", r)]
        wait_all(works if order == "send first" else works[::-1], f"torch {nbytes} B, {order}")
        check(torch.equal(got, want), f"torch {nbytes} B, {order}: wrong bytes received")

        buf = np.zeros(nbytes, np.uint8)
        r = p2p.recv_async(buf, prv)
        s = p2p.send_async(pattern(nbytes, R), nxt)
        works = [("send", s), ("recv", r)]
        wait_all(works if order == "send first" else works[::-1], f"hvdlite.p2p {nbytes} B, {order}")
        check(np.array_equal(buf, want.numpy()), f"hvdlite.p2p {nbytes} B, {order}: wrong bytes")
        check(r.source == prv, f"hvdlite.p2p {nbytes} B: source {r.source}, not {prv}")

for shape in ((33, 17), (512, 256)):
    for sends_first in (True, False):
        mine = torch.arange(shape[0] * shape[1], dtype=torch.float64).reshape(shape)
        from_prv, from_nxt = torch.zeros(shape, dtype=torch.float64), torch.zeros(shape, dtype=torch.float64)
        sends = [dist.P2POp(dist.isend, mine + 1000 * R + 1, nxt),
                 dist.P2POp(dist.isend, mine + 1000 * R + 2, prv)]
        recvs = [dist.P2POp(dist.irecv, from_prv, prv), dist.P2POp(dist.irecv, from_nxt, nxt)]
        works = dist.batch_isend_irecv(sends + recvs if sends_first else recvs + sends)
        what = f"batch_isend_irecv {shape}, {'sends' if sends_first else 'receives'} listed first"
        wait_all([(f"work {i}", w) for i, w in reversed(list(enumerate(works)))], what)
        # at 2 ranks prv == nxt: the receives match the sends in posting order all the same
        check(torch.equal(from_prv, mine + 1000 * prv + 1), f"{what}: from the previous rank")
        check(torch.equal(from_nxt, mine + 1000 * nxt + 2), f"{what}: from the next rank")

# a receive driven while its rank waits in a collective
big = 1 << 22
if R % 2 == 1:
    s = dist.isend(torch.from_numpy(pattern(big, R)), R - 1)
    wait_all([("send", s)], "a 4 MiB send to a rank waiting in an all-reduce")
    dist.all_reduce(torch.ones(3))
elif R + 1 < N:
    got = torch.zeros(big, dtype=torch.uint8)
    r = dist.irecv(got, R + 1)
    x = torch.ones(3)
    dist.all_reduce(x)
    check(torch.equal(x, torch.full((3,), float(N))), f"all-reduce beside a receive: {x}")
    wait_all([("recv", r)], "a 4 MiB receive waited after an all-reduce")
    check(torch.equal(got, torch.from_numpy(pattern(big, R + 1))), "4 MiB beside a collective")
else:
    dist.all_reduce(torch.ones(3))

dist.barrier()
print(f"p2p wait order: rank {R} OK ({count()} checks)", flush=True)
dist.destroy_process_group()
hvdlite.shutdown()
