"""CUDA all-reduce and a CUDA training step: hvdlite against torch's gloo and the copy floor,
in one run (issue 18's table).

    hvdlite-run -np 2 python examples/gpu_bench.py     # two ranks may share one GPU

Rows: a CUDA all-reduce (Sum, float32) of 4 KiB, 1 MiB and 64 MiB; the training step of an
MLP (25.2 M parameters by default: --mlp-width 2048 --mlp-layers 7), batch 64 per rank, SGD
with momentum. Columns: hvdlite (CUDA tensors given to the core), torch.distributed over gloo
(CUDA tensors), the D2H + H2D copy of the same bytes through pinned memory alone, hvdlite on a
CPU tensor of the same size (the host reduction alone), and for the step: no communication at
all, and DDP over gloo. A second table times the same all-reduces after a fresh ``hvd.init()``
with HVDLITE_PIPELINE_PIECE_BYTES=0 (staging, reduction and copy back in one piece each):
what the pipelined staging gains on CUDA tensors, and what reducing in pieces costs CPU ones.

Honest baselines: every baseline is timed before ``hvd.init()`` (hvdlite's thread would slow
them) and gloo's group is destroyed before hvdlite starts. The ranks meet through mpi4py. Each
figure is the slowest rank's median over --iters timed repetitions, each one ended by
``torch.cuda.synchronize()`` (the result is on the device and usable).
"""
import argparse
import json
import os
import socket
import statistics
import time

os.environ.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")
from mpi4py import MPI  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import hvdlite.torch as hvd  # noqa: E402

COMM = MPI.COMM_WORLD.Dup()
RANK, SIZE = COMM.Get_rank(), COMM.Get_size()
SIZES = (("4 KiB", 4 << 10), ("1 MiB", 1 << 20), ("64 MiB", 64 << 20))


def timed(fn, iters, warmup=3):
    """The slowest rank's median seconds of fn() + torch.cuda.synchronize()."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        COMM.Barrier()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return COMM.allreduce(statistics.median(times), op=MPI.MAX)


def start_gloo():
    port = None
    if RANK == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(COMM.bcast(port, root=0))
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", rank=RANK, world_size=SIZE)


def make_mlp(width, layers, device):
    dims = [1024] + [width] * (layers - 1) + [1024]
    body = []
    for d_in, d_out in zip(dims, dims[1:]):
        body += [nn.Linear(d_in, d_out), nn.ReLU()]
    torch.manual_seed(0)
    return nn.Sequential(*body, nn.Linear(1024, 10)).to(device)


def step_fn(model, opt, batch):
    x, y = batch

    def step():
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    return step


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--step-iters", type=int, default=20)
    ap.add_argument("--mlp-width", type=int, default=2048)
    ap.add_argument("--mlp-layers", type=int, default=7)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--json", help="also write the figures (seconds) as JSON to this file (rank 0)")
    args = ap.parse_args()
    device = torch.device("cuda", int(os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", RANK))
                          % torch.cuda.device_count())
    torch.cuda.set_device(device)
    g = torch.Generator(device="cpu").manual_seed(RANK)
    batch = (torch.randn(args.batch, 1024, generator=g).to(device),
             torch.randint(0, 10, (args.batch,), generator=g).to(device))
    rows = {}

    # -- baselines, hvdlite not initialised ------------------------------------------------
    for label, nbytes in SIZES:
        t = torch.ones(nbytes // 4, device=device)
        pinned = torch.empty(t.shape, pin_memory=True)

        def copies():
            pinned.copy_(t, non_blocking=True)
            t.copy_(pinned, non_blocking=True)
        rows[label] = {"copy floor": timed(copies, args.iters)}
    model = make_mlp(args.mlp_width, args.mlp_layers, device)
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    rows["step"] = {"no-comm": timed(step_fn(model, opt, batch), args.step_iters)}
    start_gloo()
    for label, nbytes in SIZES:
        t = torch.ones(nbytes // 4, device=device)
        rows[label]["gloo"] = timed(lambda: dist.all_reduce(t), args.iters)
    ddp_model = nn.parallel.DistributedDataParallel(make_mlp(args.mlp_width, args.mlp_layers, device))
    ddp_opt = torch.optim.SGD(ddp_model.parameters(), lr=0.01, momentum=0.9)
    rows["step"]["gloo"] = timed(step_fn(ddp_model, ddp_opt, batch), args.step_iters)
    del ddp_model, ddp_opt
    dist.destroy_process_group()

    # -- hvdlite -----------------------------------------------------------------------------
    hvd.init()
    for label, nbytes in SIZES:
        t = torch.ones(nbytes // 4, device=device)
        rows[label]["hvdlite"] = timed(lambda: hvd.allreduce_(t, op=hvd.Sum), args.iters)
        host = torch.ones(nbytes // 4)
        rows[label]["hvdlite cpu"] = timed(lambda: hvd.allreduce_(host, op=hvd.Sum), args.iters)
    model = make_mlp(args.mlp_width, args.mlp_layers, device)
    opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9),
                                   named_parameters=model.named_parameters())
    rows["step"]["hvdlite"] = timed(step_fn(model, opt, batch), args.step_iters)
    hvd.shutdown()
    # The same all-reduces reduced in one piece (no pipelined staging), read at init().
    piece = os.environ.get("HVDLITE_PIPELINE_PIECE_BYTES")
    os.environ["HVDLITE_PIPELINE_PIECE_BYTES"] = "0"
    hvd.init()
    for label, nbytes in SIZES:
        t = torch.ones(nbytes // 4, device=device)
        rows[label]["hvdlite one piece"] = timed(lambda: hvd.allreduce_(t, op=hvd.Sum), args.iters)
        host = torch.ones(nbytes // 4)
        rows[label]["hvdlite cpu one piece"] = timed(lambda: hvd.allreduce_(host, op=hvd.Sum), args.iters)
    hvd.shutdown()
    if piece is None:
        del os.environ["HVDLITE_PIPELINE_PIECE_BYTES"]
    else:
        os.environ["HVDLITE_PIPELINE_PIECE_BYTES"] = piece

    if RANK == 0:
        us = lambda s: f"{s * 1e6:.0f} us" if s < 1e-3 else f"{s * 1e3:.1f} ms"  # noqa: E731
        print(f"\n{SIZE} ranks, {torch.cuda.get_device_name(device)}, "
              f"{torch.cuda.device_count()} GPU(s); torch {torch.__version__}; medians, "
              f"baselines timed before hvd.init()\n")
        print("| CUDA all-reduce | hvdlite | torch gloo | D2H + H2D copy alone "
              "| hvdlite, CPU tensor | hvdlite / gloo |")
        print("|---|---|---|---|---|---|")
        for label, _ in SIZES:
            r = rows[label]
            print(f"| {label} | {us(r['hvdlite'])} | {us(r['gloo'])} | {us(r['copy floor'])} "
                  f"| {us(r['hvdlite cpu'])} | {r['hvdlite'] / r['gloo']:.2f} |")
        print(f"\nPipelined staging (HVDLITE_PIPELINE_PIECE_BYTES={piece or 'default'}) against "
              f"one piece (=0), same run:\n")
        print("| all-reduce | CUDA, pieces | CUDA, one piece | CPU, pieces | CPU, one piece |")
        print("|---|---|---|---|---|")
        for label, _ in SIZES:
            r = rows[label]
            print(f"| {label} | {us(r['hvdlite'])} | {us(r['hvdlite one piece'])} "
                  f"| {us(r['hvdlite cpu'])} | {us(r['hvdlite cpu one piece'])} |")
        r = rows["step"]
        print(f"\nTraining step, MLP of {params / 1e6:.1f} M parameters, batch {args.batch} per "
              f"rank, SGD with momentum:\n")
        print("| | step |\n|---|---|")
        print(f"| no communication | {us(r['no-comm'])} |")
        print(f"| hvdlite | {us(r['hvdlite'])} |")
        print(f"| DDP over gloo | {us(r['gloo'])} |")
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"ranks": SIZE, "gpu": torch.cuda.get_device_name(device),
                           "torch": torch.__version__, "mlp_parameters": params,
                           "seconds": rows}, f, indent=1)


if __name__ == "__main__":
    main()
