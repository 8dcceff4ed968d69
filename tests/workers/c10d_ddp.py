"""DistributedDataParallel over a torch.distributed backend: a few training steps per mode.

``python c10d_ddp.py BACKEND OUT.pt STORE_FILE`` at any rank count. BACKEND is "hvdlite"
(the engine, via hvdlite://) or "gloo" (a FileStore; hvdlite is never initialised).
Modes: several gradient buckets; ``no_sync`` gradient accumulation; the allreduce and fp16
compression communication hooks. Each rank checks its model against one process trained on
the global batch (the same samples, the same steps), and rank 0 saves the parameters of
every mode to OUT.pt so the test can compare backends (tests/torch/test_c10d.py).
"""
import os
import sys

import torch

torch.set_num_threads(1)

import torch.distributed as dist  # noqa: E402
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

from worker_checks import check  # noqa: E402

backend, out_path, store_file = sys.argv[1:4]
if backend == "hvdlite":
    import hvdlite.torch.distributed as hvd_dist
    hvd_dist.init_process_group()
else:
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0")))
    size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("PMI_SIZE", "1")))
    dist.init_process_group(backend, init_method=f"file://{store_file}", rank=rank,
                            world_size=size)
R, N = dist.get_rank(), dist.get_world_size()
PER_RANK, STEPS = 8, 4


class Net(torch.nn.Module):
    """A small CNN + MLP on 8x8 images (the digits example's shape)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3)
        self.fc1 = torch.nn.Linear(4 * 6 * 6, 32)
        self.fc2 = torch.nn.Linear(32, 10)

    def forward(self, x):
        x = torch.relu(self.conv(x)).flatten(1)
        return self.fc2(torch.relu(self.fc1(x)))


def batch(step, micro=0):
    """The global batch of one step (every rank can make it): samples, labels."""
    g = torch.Generator().manual_seed(1000 * step + micro)
    return torch.randn(PER_RANK * N, 1, 8, 8, generator=g), torch.randint(0, 10, (PER_RANK * N,), generator=g)


def mine(x):
    return x[R * PER_RANK:(R + 1) * PER_RANK]


def fresh():
    torch.manual_seed(0)
    return Net()


def reference(micro_batches):
    """One process, the global batch: the loss is the mean over all N ranks' samples."""
    model = fresh()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for step in range(STEPS):
        opt.zero_grad()
        for m in range(micro_batches):
            x, y = batch(step, m)
            (torch.nn.functional.cross_entropy(model(x), y) / micro_batches).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def train(mode):
    torch.manual_seed(R + 1)         # DDP must broadcast rank 0's initial parameters
    model = Net() if R else fresh()
    ddp = DDP(model, bucket_cap_mb=0.002)    # a few KiB per bucket: several buckets
    if mode == "allreduce_hook":
        ddp.register_comm_hook(None, default_hooks.allreduce_hook)
    elif mode == "fp16_hook":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    micro_batches = 2 if mode == "no_sync" else 1
    for step in range(STEPS):
        opt.zero_grad()
        for m in range(micro_batches):
            x, y = batch(step, m)
            loss = torch.nn.functional.cross_entropy(ddp(mine(x)), mine(y)) / micro_batches
            if m < micro_batches - 1:
                with ddp.no_sync():
                    loss.backward()
            else:
                loss.backward()
        opt.step()
    buckets = int(ddp._get_ddp_logging_data().get("num_buckets_reduced", 0))
    return [p.detach().clone() for p in model.parameters()], buckets


results = {}
for mode in ("buckets", "no_sync", "allreduce_hook", "fp16_hook"):
    params, buckets = train(mode)
    check(buckets > 1, f"{mode}: DDP made {buckets} bucket(s); the test wants several")
    ref = reference(2 if mode == "no_sync" else 1)
    # fp16 compression rounds every gradient to 11 significant bits
    rtol, atol = (2e-3, 2e-4) if mode == "fp16_hook" else (1e-6, 1e-7)
    for i, (p, q) in enumerate(zip(params, ref)):
        err = ((p - q).abs() / (atol + rtol * q.abs())).max().item()
        check(err <= 1.0, f"{backend} {mode}: parameter {i} differs from single-process "
                          f"training on the global batch (max |diff|/tol {err:.3g})")
    gathered = [torch.empty_like(params[0]) for _ in range(N)]
    dist.all_gather(gathered, params[0])
    check(all(torch.equal(g, params[0]) for g in gathered), f"{mode}: ranks agree")
    results[mode] = params

if R == 0:
    torch.save(results, out_path)
dist.barrier()
dist.destroy_process_group()
print(f"ddp {backend} ok rank {R}", flush=True)
