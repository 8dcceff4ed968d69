"""torch.distributed on hvdlite: DDP and FSDP2 over the "hvdlite" backend against the same over
gloo, and ``dist.all_reduce`` through the backend against ``hvd.allreduce_``, in one run.

    hvdlite-run -np 2 python examples/c10d_bench.py

Models: examples/torch_bench.py's (the digits CNN, batch 32 per rank, and the 6 x 1024 MLP,
batch 32 per rank), trained with SGD with momentum, wrapped in DDP (default settings) and in
FSDP2 (``fully_shard`` on each Linear / Conv2d layer, then on the model); with ``--compile``
also ``torch.compile(DistributedDataParallel(model))`` ("DDP-compiled": compiled once per
backend, the compilation in the first round's warm-up steps), reported beside DDP uncompiled
on the same backend (``ratio_compiled_over_eager``).

Each backend runs in a phase of its own, with the other not running: ``gloo`` with its group
up and hvdlite not initialised, ``hvdlite`` between ``init_process_group("hvdlite")`` (which
starts hvdlite's engine) and ``destroy_process_group()`` (which stops it). Two reference
phases show what bounds the DDP ratio: ``hvd`` (hvdlite's own DistributedOptimizer, no
torch.distributed group), ``DDP-alone`` (DDP on a one-process gloo group per rank: DDP's own
work, with nothing to communicate; no DDP over any backend can beat it) and ``no-comm``
(the same step, no communication at all). The ranks
meet through mpi4py in between. The phases take turns over --rounds rounds (order
rotating); a round's time is the slowest rank's; the median round and the best round are
reported. Ratios: hvdlite / gloo (below 1: the hvdlite backend is faster); the references
as a fraction of DDP over gloo.

The all-reduce part (hvdlite phase only): float32 tensors of several sizes, in place, each
timed as ``dist.all_reduce`` on the hvdlite group and as ``hvd.allreduce_`` on the same
engine; ratio backend / hvd (1.0: the backend adds nothing).
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch_bench as tb  # noqa: E402  (mpi4py first: MPI outlives hvdlite's phases)
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.distributed.device_mesh import init_device_mesh  # noqa: E402
from torch.distributed.fsdp import fully_shard  # noqa: E402

import hvdlite.torch as hvd  # noqa: E402
import hvdlite.torch.distributed as hvd_dist  # noqa: E402

COMM, RANK, SIZE = tb.COMM, tb.RANK, tb.SIZE
BACKENDS = ("gloo", "hvdlite")
REFERENCES = ("hvd", "no-comm", "DDP-alone")
WRAPPERS = ("DDP", "FSDP2", "DDP-compiled")


def start(phase):
    if phase == "gloo":
        tb.start_gloo()
    elif phase == "hvdlite":
        hvd_dist.init_process_group()
    elif phase == "hvd":
        hvd.init()
    elif phase == "DDP-alone":   # each rank a gloo group of its own: DDP with nothing to send
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)


def stop(phase):
    if phase in BACKENDS or phase == "DDP-alone":
        dist.destroy_process_group()
    elif phase == "hvd":
        hvd.shutdown()


def fsdp2(build, reference):
    """A fresh FSDP2 model with the reference's weights on this phase's group."""
    model = build()
    model.load_state_dict(reference.state_dict())
    mesh = init_device_mesh("cpu", (SIZE,))
    for layer in model.modules():
        if isinstance(layer, (nn.Linear, nn.Conv2d)):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


_compiled = {}   # (phase, model name) -> the model whose compiled code is reused


def compiled_ddp(build, reference, phase, name):
    """(``torch.compile(DDP(model))`` on this phase's group, its optimizer), over one model per
    phase and model name, so that later rounds reuse the code compiled in the first (dynamo
    guards on the model)."""
    if (phase, name) not in _compiled:
        model = build()
        model.load_state_dict(reference.state_dict())
        _compiled[(phase, name)] = model, torch.optim.SGD(model.parameters(), lr=0.01,
                                                           momentum=0.9)
    model, opt = _compiled[(phase, name)]
    return torch.compile(nn.parallel.DistributedDataParallel(model)), opt


def allreduce_times(sizes, iters, warmup):
    """{bytes: (backend s, hvd s)} per all-reduce, the slowest rank's, alternating methods."""
    out = {}
    for nbytes in sizes:
        t = torch.ones(nbytes // 4)
        per = {"backend": [], "hvd": []}
        n = max(3, min(iters, int(iters * (1 << 20) / max(nbytes, 1 << 16))))
        for rep in range(3):
            for method in ("backend", "hvd") if rep % 2 == 0 else ("hvd", "backend"):
                op = (lambda: dist.all_reduce(t)) if method == "backend" else \
                     (lambda: hvd.allreduce_(t, op=hvd.Sum))
                for _ in range(warmup):
                    op()
                COMM.Barrier()
                t0 = time.perf_counter()
                for _ in range(n):
                    op()
                per[method].append(COMM.allreduce((time.perf_counter() - t0) / n, op=tb.MPI.MAX))
        out[nbytes] = (min(per["backend"]), min(per["hvd"]))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="cnn,mlp")
    parser.add_argument("--steps", type=int, default=10,
                        help="timed steps per round (x5 for the cnn)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sizes", default=None,
                        help="all-reduce sizes in bytes, comma-separated ('' skips the all-reduce "
                             "part; default 4 KiB to 64 MiB, with --quick 4 KiB and 1 MiB)")
    parser.add_argument("--iters", type=int, default=50, help="all-reduces per timing at 1 MiB")
    parser.add_argument("--wrappers", default="DDP,FSDP2",
                        help="comma-separated: DDP, FSDP2, DDP-compiled")
    parser.add_argument("--compile", action="store_true",
                        help="add DDP-compiled (torch.compile of the DDP model) to --wrappers")
    parser.add_argument("--no-references", dest="references", action="store_false",
                        help="skip the DistributedOptimizer, DDP-alone and no-comm phases")
    parser.add_argument("--quick", action="store_true", help="a few steps (smoke test)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.warmup, args.rounds, args.iters = 2, 1, 1, 5
    if args.sizes is None:
        args.sizes = "4096,1048576" if args.quick else \
            "4096,65536,1048576,4194304,16777216,67108864"
    torch.set_num_threads(1)
    builds = {"cnn": (tb.DigitsCNN, lambda: tb.cnn_batches(32, 8), args.steps * 5),
              "mlp": (lambda: tb.make_mlp(1024, 6), lambda: tb.mlp_batches(32, 4), args.steps)}
    wrappers = [w for w in args.wrappers.split(",") if w]
    if args.compile and "DDP-compiled" not in wrappers:
        wrappers.append("DDP-compiled")
    if set(wrappers) - set(WRAPPERS):
        parser.error(f"--wrappers: {sorted(set(wrappers) - set(WRAPPERS))} (choose from "
                     f"{', '.join(WRAPPERS)})")
    phases = BACKENDS + (REFERENCES if args.references else ())
    models = {}
    for name in args.models.split(","):
        build, batches, steps = builds[name]
        torch.manual_seed(0)
        reference = build()
        per_phase = {}
        for phase in phases:   # each its own copy (the DistributedOptimizer keeps its hooks)
            m = build()
            m.load_state_dict(reference.state_dict())
            per_phase[phase] = [m, torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)]
        models[name] = (build, reference, per_phase, batches(), steps)
    times = {}
    sizes = [int(s) for s in args.sizes.split(",") if s]
    allreduce = None
    for r in range(args.rounds):
        for phase in phases[r % len(phases):] + phases[:r % len(phases)]:
            start(phase)
            for name, (build, reference, per_phase, batches, steps) in models.items():
                model, opt = per_phase[phase]
                if phase == "hvd" and not hasattr(opt, "synchronize"):   # wrapped once
                    opt = per_phase[phase][1] = hvd.DistributedOptimizer(
                        opt, named_parameters=model.named_parameters())
                if phase in REFERENCES:
                    m = nn.parallel.DistributedDataParallel(model) if phase == "DDP-alone" \
                        else model
                    times.setdefault((name, phase), []).append(
                        tb.timed_steps(m, opt, batches, steps, args.warmup))
                    continue
                for wrapper in wrappers:
                    if wrapper == "DDP":
                        m, o = nn.parallel.DistributedDataParallel(model), opt
                    elif wrapper == "DDP-compiled":
                        m, o = compiled_ddp(build, reference, phase, name)
                    else:
                        m, o = fsdp2(build, reference)
                    times.setdefault((name, wrapper, phase), []).append(
                        tb.timed_steps(m, o, batches, steps, args.warmup))
                    del m, o
            if phase == "hvdlite" and r == args.rounds - 1 and sizes:
                allreduce = allreduce_times(sizes, args.iters, 3)
            stop(phase)
    if RANK != 0:
        return
    for name in models:
        for wrapper in wrappers:
            t = {b: times[(name, wrapper, b)] for b in BACKENDS}
            med = {b: statistics.median(v) for b, v in t.items()}
            best = {b: min(v) for b, v in t.items()}
            res = {"model": name, "wrapper": wrapper, "ranks": SIZE, "rounds": args.rounds,
                   "gloo_ms": 1e3 * med["gloo"], "hvdlite_ms": 1e3 * med["hvdlite"],
                   "ratio_hvdlite_over_gloo": med["hvdlite"] / med["gloo"],
                   "best_gloo_ms": 1e3 * best["gloo"], "best_hvdlite_ms": 1e3 * best["hvdlite"],
                   "best_ratio_hvdlite_over_gloo": best["hvdlite"] / best["gloo"]}
            refs = ""
            if wrapper == "DDP-compiled" and "DDP" in wrappers:
                for b in BACKENDS:
                    eager = statistics.median(times[(name, "DDP", b)])
                    res[f"eager_{b}_ms"] = 1e3 * eager
                    res[f"ratio_compiled_over_eager_{b}"] = med[b] / eager
                refs = (f"; DDP uncompiled: gloo {res['eager_gloo_ms']:.2f} ms, hvdlite "
                        f"{res['eager_hvdlite_ms']:.2f} ms (compiled / uncompiled: gloo "
                        f"{res['ratio_compiled_over_eager_gloo']:.2f}, hvdlite "
                        f"{res['ratio_compiled_over_eager_hvdlite']:.2f})")
            if args.references and wrapper == "DDP":
                for ref in REFERENCES:
                    ref_med = statistics.median(times[(name, ref)])
                    res[f"{ref}_ms"] = 1e3 * ref_med
                    res[f"ratio_{ref}_over_gloo"] = ref_med / med["gloo"]
                refs = (f"; references (/ DDP-gloo): DistributedOptimizer {res['hvd_ms']:.2f} ms "
                        f"({res['ratio_hvd_over_gloo']:.2f}), DDP alone "
                        f"{res['DDP-alone_ms']:.2f} ms ({res['ratio_DDP-alone_over_gloo']:.2f}), "
                        f"no-comm {res['no-comm_ms']:.2f} ms ({res['ratio_no-comm_over_gloo']:.2f})")
            if args.json:
                print(json.dumps(res), flush=True)
            else:
                print(f"{wrapper} {name}, {SIZE} ranks, {args.rounds} rounds: median step gloo "
                      f"{res['gloo_ms']:.2f} ms | hvdlite {res['hvdlite_ms']:.2f} ms | "
                      f"hvdlite/gloo {res['ratio_hvdlite_over_gloo']:.2f} (best rounds: "
                      f"{res['best_gloo_ms']:.2f} | {res['best_hvdlite_ms']:.2f} | "
                      f"{res['best_ratio_hvdlite_over_gloo']:.2f}){refs}", flush=True)
    for nbytes, (backend_s, hvd_s) in (allreduce or {}).items():
        if args.json:
            print(json.dumps({"allreduce_bytes": nbytes, "backend_ms": 1e3 * backend_s,
                              "hvd_ms": 1e3 * hvd_s, "ratio": backend_s / hvd_s}), flush=True)
        else:
            print(f"all_reduce {nbytes:>9} B: dist.all_reduce(hvdlite) {1e3 * backend_s:8.3f} ms"
                  f" | hvd.allreduce_ {1e3 * hvd_s:8.3f} ms | ratio {backend_s / hvd_s:.2f}",
                  flush=True)


if __name__ == "__main__":
    main()
    COMM.Free()
