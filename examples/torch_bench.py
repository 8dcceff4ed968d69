"""Training step time: ``hvd.DistributedOptimizer`` against PyTorch DDP (gloo) and against the
same step with no communication at all, in one run.

    hvdlite-run -np 2 python examples/torch_bench.py

Two models, each trained data-parallel at the job's size, from the same weights:

- ``cnn``: the digits CNN of examples/pytorch_digits.py (compute-bound, tiny gradients),
  batch 32 per rank;
- ``mlp``: 6 fully connected 1024 x 1024 layers and a 10-way head (6.3 M parameters; shape
  by --mlp-layers and --mlp-width), batch 32 per rank.

Three methods, all SGD with momentum: ``no-comm`` is the same step with a plain optimizer and
no communication (every rank computing; the limit a data-parallel library is measured
against), ``hvdlite`` uses ``hvd.DistributedOptimizer`` (gradients all-reduced from the
post-accumulate-grad hooks while backward runs) and ``DDP`` uses
``torch.nn.parallel.DistributedDataParallel`` on a gloo process group (default settings, at
127.0.0.1 on a port rank 0 picks).

Honest baselines: a library's background thread slows whatever else runs in its process, so
each method runs in a phase of its own, with the other libraries not running: ``no-comm``
with neither hvdlite nor gloo initialised, ``DDP`` with its gloo group up and hvdlite not
initialised, ``hvdlite`` between ``hvd.init()`` and ``hvd.shutdown()`` with no gloo group.
The ranks meet through mpi4py (which initialises MPI first, so hvdlite can start and stop).
The phases take turns over --rounds rounds (order rotating); a round's time is the slowest
rank's; the median round and the best round are reported (the best is the least disturbed
by other load on the machine). Ratios: hvdlite / no-comm and DDP / no-comm (1.0 is the
limit), and DDP / hvdlite (above 1: hvdlite is faster).
"""
import argparse
import json
import os
import socket
import statistics
import time

# The MPI setting hvdlite's init() would make (yield while waiting), made here because mpi4py
# initialises MPI first: every phase runs on the same MPI configuration.
os.environ.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")
try:
    from mpi4py import MPI
except ImportError as e:
    raise SystemExit(f"torch_bench needs mpi4py (pip install mpi4py): the ranks meet through it "
                     f"while neither hvdlite nor gloo is running ({e})")

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

import hvdlite.torch as hvd
from pytorch_digits import Net as DigitsCNN  # the example's model, as the issue asks

COMM = MPI.COMM_WORLD.Dup()   # the benchmark's own meeting place, apart from the libraries'
RANK, SIZE = COMM.Get_rank(), COMM.Get_size()
METHODS = ("no-comm", "DDP", "hvdlite")


def make_mlp(width, layers):
    """``layers`` fully connected layers 1024 -> width -> ... -> width -> 1024 (ReLU between),
    then a 10-way head."""
    dims = [1024] + [width] * (layers - 1) + [1024]
    body = []
    for d_in, d_out in zip(dims, dims[1:]):
        body += [nn.Linear(d_in, d_out), nn.ReLU()]
    return nn.Sequential(*body, nn.Linear(1024, 10))


def load_digits_arrays():
    """scikit-learn's digits as (images N x 8 x 8, labels). Where scikit-learn is missing (the
    GPU machine), from a copy of its data file named by HVDLITE_DIGITS_CSV
    (scripts/download_device_wheels.sh carries one)."""
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        path = os.environ.get("HVDLITE_DIGITS_CSV")
        if not path:
            raise
        import numpy as np
        data = np.loadtxt(path, delimiter=",")
        return data[:, :-1].reshape(-1, 8, 8), data[:, -1].astype(np.int64)
    d = load_digits()
    return d.images, d.target


def cnn_batches(batch, count):
    images, labels = load_digits_arrays()
    X = torch.tensor(images, dtype=torch.float32).unsqueeze(1) / 16.0
    y = torch.tensor(labels, dtype=torch.int64)
    g = torch.Generator().manual_seed(RANK)
    out = []
    for _ in range(count):
        idx = torch.randint(0, len(y), (batch,), generator=g)
        out.append((X[idx], y[idx]))
    return out


def mlp_batches(batch, count):
    g = torch.Generator().manual_seed(RANK)
    return [(torch.randn(batch, 1024, generator=g), torch.randint(0, 10, (batch,), generator=g))
            for _ in range(count)]


def start_gloo():
    """Join a gloo process group at 127.0.0.1 on a port chosen by rank 0."""
    port = None
    if RANK == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    port = COMM.bcast(port, root=0)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", rank=RANK, world_size=SIZE)


def train_steps(model, opt, batches, steps):
    for i in range(steps):
        x, y = batches[i % len(batches)]
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()


def timed_steps(model, opt, batches, steps, warmup):
    """The slowest rank's seconds per step over ``steps`` steps, after ``warmup`` untimed ones."""
    train_steps(model, opt, batches, warmup)
    COMM.Barrier()
    t0 = time.perf_counter()
    train_steps(model, opt, batches, steps)
    return COMM.allreduce((time.perf_counter() - t0) / steps, op=MPI.MAX)


def autotune(model, opt, batches, max_steps):
    """With HVDLITE_AUTOTUNE=1: train until the tuner has written its final choice to
    HVDLITE_AUTOTUNE_LOG (rank 0 reads it). Returns (steps taken, the final CSV row or None).
    The choice then goes into the environment with autotune off, so that every hvdlite phase
    (each a fresh init()) runs the tuned settings."""
    log = os.environ.get("HVDLITE_AUTOTUNE_LOG") or os.environ.get("HOROVOD_AUTOTUNE_LOG")
    if not log:
        raise SystemExit("--autotune-steps needs HVDLITE_AUTOTUNE=1 and HVDLITE_AUTOTUNE_LOG")
    final, steps = None, max_steps
    for step in range(1, max_steps + 1):
        train_steps(model, opt, batches, 1)
        if RANK == 0 and os.path.exists(log):
            final = next((l.strip() for l in open(log) if l.startswith("final,")), None)
        if COMM.bcast(final is not None, root=0):
            steps = step
            break
    final = COMM.bcast(final, root=0)
    header = COMM.bcast(open(log).readline().strip() if RANK == 0 and final else None, root=0)
    if final:
        fields = dict(zip(header.split(","), final.split(",")))
        for key in ("HVDLITE_AUTOTUNE", "HOROVOD_AUTOTUNE", "HOROVOD_FUSION_THRESHOLD",
                    "HOROVOD_CYCLE_TIME", "HOROVOD_HIERARCHICAL_ALLREDUCE"):
            os.environ.pop(key, None)
        os.environ["HVDLITE_FUSION_THRESHOLD"] = fields["fusion_threshold"]
        os.environ["HVDLITE_CYCLE_TIME"] = fields["cycle_time_ms"]
        os.environ["HVDLITE_RING_PIECE_BYTES"] = fields["ring_piece_bytes"]
        os.environ["HVDLITE_HIERARCHICAL_ALLREDUCE"] = fields["hierarchical_allreduce"]
    return steps, final


class Bench:
    """One model's three methods, each with its own copy of the same initial weights."""

    def __init__(self, name, build, batches, steps, args):
        self.name, self.batches, self.steps, self.args = name, batches, steps, args
        torch.manual_seed(0)
        reference = build()
        self.params = sum(p.numel() for p in reference.parameters())
        self.models = {}
        self.opts = {}
        for m in METHODS:
            model = build()
            model.load_state_dict(reference.state_dict())
            self.models[m] = model
            self.opts[m] = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
        self.times = {m: [] for m in METHODS}
        self.tuned = None
        self.hvd_wrapped = False

    def run(self, method):
        """Time ``method`` once; its library (if any) is running."""
        model, opt = self.models[method], self.opts[method]
        if method == "DDP":   # a fresh wrapper on this phase's gloo group (same module, weights)
            model = nn.parallel.DistributedDataParallel(model)
        elif method == "hvdlite":
            if not self.hvd_wrapped:   # wrapped once; its hooks reach whichever engine is up
                opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
                self.opts[method], self.hvd_wrapped = opt, True
                if self.args.autotune_steps:
                    self.tuned = autotune(model, opt, self.batches, self.args.autotune_steps)
        self.times[method].append(timed_steps(model, opt, self.batches, self.steps,
                                              self.args.warmup))

    def result(self):
        med = {m: statistics.median(v) for m, v in self.times.items()}
        best = {m: min(v) for m, v in self.times.items()}
        local = med["no-comm"]
        return {
            "model": self.name, "params": self.params, "batch_per_rank": len(self.batches[0][1]),
            "ranks": SIZE, "rounds": self.args.rounds, "steps_per_round": self.steps,
            "method": "each method in its own phase, the other libraries not running",
            "local_ms": 1e3 * local, "hvdlite_ms": 1e3 * med["hvdlite"],
            "ddp_ms": 1e3 * med["DDP"],
            "ratio_hvdlite_over_local": med["hvdlite"] / local,
            "ratio_ddp_over_local": med["DDP"] / local,
            "ratio_ddp_over_hvdlite": med["DDP"] / med["hvdlite"],
            "best_local_ms": 1e3 * best["no-comm"], "best_hvdlite_ms": 1e3 * best["hvdlite"],
            "best_ddp_ms": 1e3 * best["DDP"],
            "best_ratio_hvdlite_over_local": best["hvdlite"] / best["no-comm"],
            "best_ratio_ddp_over_local": best["DDP"] / best["no-comm"],
            "best_ratio_ddp_over_hvdlite": best["DDP"] / best["hvdlite"],
            "rounds_ms": {m: [1e3 * t for t in v] for m, v in self.times.items()},
            "autotune_steps": self.tuned and self.tuned[0],
            "autotune_final": self.tuned and self.tuned[1],
        }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="cnn,mlp")
    parser.add_argument("--steps", type=int, default=10,
                        help="timed steps per round (x5 for the cnn)")
    parser.add_argument("--warmup", type=int, default=3,
                        help="untimed steps at the start of every phase")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--cnn-batch", type=int, default=32, help="per rank")
    parser.add_argument("--mlp-batch", type=int, default=32, help="per rank")
    parser.add_argument("--mlp-width", type=int, default=1024)
    parser.add_argument("--mlp-layers", type=int, default=6,
                        help="fully connected layers before the 10-way head")
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--autotune-steps", type=int, default=0,
                        help="with HVDLITE_AUTOTUNE=1: train hvdlite up to this many steps, until "
                             "the tuner has converged, before timing (later hvdlite phases start "
                             "with its choice)")
    parser.add_argument("--quick", action="store_true", help="a few steps (smoke test)")
    parser.add_argument("--json", action="store_true", help="print one JSON object per model")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.warmup, args.rounds, args.mlp_width = 3, 2, 1, 512

    torch.set_num_threads(1)
    benches = []
    for name in args.models.split(","):
        if name == "cnn":
            benches.append(Bench("cnn", DigitsCNN, cnn_batches(args.cnn_batch, 8),
                                 args.steps * 5, args))
        elif name == "mlp":
            benches.append(Bench("mlp", lambda: make_mlp(args.mlp_width, args.mlp_layers),
                                 mlp_batches(args.mlp_batch, 4), args.steps, args))
        else:
            raise SystemExit(f"unknown model {name!r}; use cnn and/or mlp")

    for r in range(args.rounds):
        shift = r % len(METHODS)
        for method in METHODS[shift:] + METHODS[:shift]:   # the order rotates round by round
            if method == "DDP":
                start_gloo()
            elif method == "hvdlite":
                hvd.init()
            for b in benches:
                b.run(method)
            if method == "DDP":
                dist.destroy_process_group()
            elif method == "hvdlite":
                hvd.shutdown()

    for b in benches:
        res = b.result()
        if RANK != 0:
            continue
        if args.json:
            print(json.dumps(res), flush=True)
            continue
        print(f"{res['model']}: {res['params'] / 1e6:.2f} M params, batch "
              f"{res['batch_per_rank']}/rank, {res['ranks']} ranks, {res['rounds']} "
              f"rounds of {res['steps_per_round']} steps, each method in its own phase", flush=True)
        for label, pre in (("median round", ""), ("best round  ", "best_")):
            print(f"  step time, {label}: no-comm {res[pre + 'local_ms']:7.2f} ms | "
                  f"hvdlite {res[pre + 'hvdlite_ms']:7.2f} ms | DDP(gloo) {res[pre + 'ddp_ms']:7.2f} ms"
                  f" | hvdlite/no-comm {res[pre + 'ratio_hvdlite_over_local']:.2f}"
                  f" | DDP/no-comm {res[pre + 'ratio_ddp_over_local']:.2f}"
                  f" | DDP/hvdlite {res[pre + 'ratio_ddp_over_hvdlite']:.2f}", flush=True)
        if args.autotune_steps:
            print(f"  autotune: {res['autotune_steps']} steps; final choice "
                  f"(row,trial,pass,setting,fusion_threshold,cycle_time_ms,ring_piece_bytes,"
                  f"hierarchical_allreduce,score,samples): {res['autotune_final']}", flush=True)
    COMM.Free()


if __name__ == "__main__":
    main()
