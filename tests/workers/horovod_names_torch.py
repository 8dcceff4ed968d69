"""A Horovod program, unmodified: run under hvdlite-run --horovod or HVDLITE_HOROVOD_NAMES=1
(tests/test_horovod_names.py). One DistributedOptimizer step of a linear model, each rank
on its own data; every rank prints the averaged weights, which must agree."""
import torch

import horovod.torch as hvd
from horovod.torch.mpi_ops import synchronize

hvd.init()
torch.manual_seed(0)
model = torch.nn.Linear(3, 1, bias=False)
optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.5),
                                     named_parameters=model.named_parameters())
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
x = torch.full((4, 3), float(hvd.rank() + 1))
optimizer.zero_grad()
model(x).sum().backward()
optimizer.step()
total = synchronize(hvd.allreduce_async(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum))
weights = " ".join(f"{w:.6f}" for w in model.weight.detach().flatten().tolist())
print(f"module={hvd.__name__} rank={hvd.rank()} size={hvd.size()} sum={total.item():g} "
      f"weights={weights}", flush=True)
