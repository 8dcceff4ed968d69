"""torch.compile over a torch.distributed backend: compiled DDP, FSDP2 and a compiled model under
hvdlite's DistributedOptimizer, each a few float64 training steps of a tiny MLP.

``python c10d_compile.py BACKEND OUT.pt STORE_FILE MODES``: BACKEND "hvdlite" (hvdlite://) or
"gloo" (a FileStore); MODES a comma-separated list of
- ``ddp``: ``torch.compile(DistributedDataParallel(model))``, the model with a buffer that DDP
  broadcasts before every forward (the group's broadcast, entered from DDP's C++ inside the
  compiled call: Note [c10d calls under torch.compile] in src/hvdlite/torch/distributed.py);
- ``fsdp2``: ``fully_shard`` per layer, then ``torch.compile`` of the model;
- ``hvd_optimizer``: ``torch.compile(model)`` trained with ``hvdlite.torch.DistributedOptimizer``
  (hvdlite's own API beside the c10d group).
Each rank checks each mode against one process trained on the global batch (float64, rtol
1e-12); rank 0 saves the parameters per mode to OUT.pt so the test compares backends
(tests/torch/test_c10d.py).
"""
import os
import sys

import torch

torch.set_num_threads(1)

import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

from worker_checks import check  # noqa: E402

backend, out_path, store_file, modes = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
if backend == "hvdlite":
    import hvdlite.torch.distributed as hvd_dist
    hvd_dist.init_process_group()
else:
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0")))
    size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("PMI_SIZE", "1")))
    dist.init_process_group(backend, init_method=f"file://{store_file}", rank=rank,
                            world_size=size)
R, N = dist.get_rank(), dist.get_world_size()
PER_RANK, STEPS, LR = 4, 3, 0.05


class Net(torch.nn.Module):
    """An MLP whose input is shifted by a buffer (DDP broadcasts buffers every forward)."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 8)
        self.fc2 = torch.nn.Linear(8, 2)
        self.register_buffer("shift", torch.full((6,), 0.25))

    def forward(self, x):
        return self.fc2(torch.tanh(self.fc1(x - self.shift)))


def fresh(seed=0):
    torch.manual_seed(seed)
    return Net().double()


def batch(step):
    """The global batch of one step (every rank can make it)."""
    g = torch.Generator().manual_seed(100 + step)
    return (torch.randn(PER_RANK * N, 6, generator=g, dtype=torch.float64),
            torch.randn(PER_RANK * N, 2, generator=g, dtype=torch.float64))


def mine(t):
    return t[R * PER_RANK:(R + 1) * PER_RANK]


def reference():
    """One process on the global batch (the loss: the mean over every rank's samples)."""
    model = fresh()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    for step in range(STEPS):
        x, y = batch(step)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return [p.detach().clone() for p in model.parameters()]


def train(step_model, opt):
    for step in range(STEPS):
        x, y = batch(step)
        opt.zero_grad()
        torch.nn.functional.mse_loss(step_model(mine(x)), mine(y)).backward()
        opt.step()


def ddp():
    model = fresh(0 if R == 0 else R + 1)   # DDP must broadcast rank 0's parameters
    if R:
        model.shift.fill_(-1.0)              # ... and its buffer, before every forward
    wrapped = DDP(model)
    train(torch.compile(wrapped), torch.optim.SGD(wrapped.parameters(), lr=LR, momentum=0.9))
    check(torch.equal(model.shift, torch.full((6,), 0.25, dtype=torch.float64)),
          f"{backend} ddp: rank 0's buffer reached every rank")
    return [p.detach().clone() for p in model.parameters()]


def fsdp2():
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    mesh = init_device_mesh("cpu", (N,))
    model = fresh()
    for layer in (model.fc1, model.fc2):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    train(torch.compile(model), torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9))
    return [p.full_tensor().detach().clone() for p in model.parameters()]


def hvd_optimizer():
    import hvdlite.torch as hvd
    model = fresh(0 if R == 0 else R + 1)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9),
                                   named_parameters=model.named_parameters())
    train(torch.compile(model), opt)
    return [p.detach().clone() for p in model.parameters()]


want = reference()
results = {}
for mode in modes.split(","):
    params = {"ddp": ddp, "fsdp2": fsdp2, "hvd_optimizer": hvd_optimizer}[mode]()
    for i, (p, q) in enumerate(zip(params, want)):
        err = ((p - q).abs() / (1e-13 + 1e-12 * q.abs())).max().item()
        check(err <= 1.0, f"{backend} {mode}: parameter {i} differs from one process trained "
                          f"on the global batch (max |diff|/tol {err:.3g})")
    gathered = [torch.empty_like(params[0]) for _ in range(N)]
    dist.all_gather(gathered, params[0])
    check(all(torch.equal(g, params[0]) for g in gathered), f"{backend} {mode}: ranks agree")
    results[mode] = params
    print(f"compiled {mode} {backend} trained rank {R}", flush=True)

if R == 0:
    torch.save(results, out_path)
dist.barrier()
dist.destroy_process_group()
print(f"compile {backend} ok rank {R}", flush=True)
