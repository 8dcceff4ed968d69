"""Under Slurm (srun, or hvdlite-run inside an allocation): the job's topology is what the
launcher set up, and collectives work. ``argv[1]``: the expected size (one node: every rank
is local); ``argv[2]``: ``srun`` where srun started the ranks itself (then Slurm's task
numbers are MPI's ranks; under hvdlite-run they are not: MPICH's Hydra starts its proxy with
a one-task srun step even on one node, and its ranks inherit that step's SLURM_PROCID=0,
SLURM_NTASKS=1). Prints "slurm worker ok" per rank; a failed check raises (the excepthook then
ends the job)."""
import os
import sys

import numpy as np

import hvdlite as hvd
from worker_checks import check

N = int(sys.argv[1])
started_by_srun = sys.argv[2:] == ["srun"]
hvd.init()
R = hvd.rank()
topology = (hvd.size(), hvd.local_rank(), hvd.local_size(), hvd.cross_rank(), hvd.cross_size())
check(topology == (N, R, N, 0, 1),
      f"rank {R}: (size, local rank, local size, cross rank, cross size) = {topology}")
if started_by_srun:
    check(int(os.environ["SLURM_PROCID"]) == R and int(os.environ["SLURM_NTASKS"]) == N,
          f"rank {R}: SLURM_PROCID={os.environ['SLURM_PROCID']}, SLURM_NTASKS="
          f"{os.environ['SLURM_NTASKS']}")
total = hvd.allreduce(np.full(1000, R + 1.0), op=hvd.Sum, name="sum")
check(np.array_equal(total, np.full(1000, N * (N + 1) / 2)), f"allreduce: {total[:3]}")
ranks = hvd.allgather(np.array([R], np.int64), name="ranks")
check(list(ranks) == list(range(N)), f"allgather: {ranks}")
root = hvd.broadcast(np.arange(5.0) * (R + 1), root_rank=N - 1, name="root")
check(np.array_equal(root, np.arange(5.0) * N), f"broadcast: {root}")
print(f"slurm worker ok: rank {R} of {N}", flush=True)
