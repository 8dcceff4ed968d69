"""PyTorch's generic distributed test suite (``torch.testing._internal.distributed``,
``DistributedTest._DistTestBase``, what ``test/distributed/test_distributed_spawn.py`` runs
per backend), run against a backend under MPI instead of PyTorch's spawning harness:

    hvdlite-run -np 2 python scripts/torch_distributed_suite.py --backend hvdlite --out hvdlite.jsonl
    hvdlite-run -np 2 python scripts/torch_distributed_suite.py --backend gloo --out gloo.jsonl
    python scripts/torch_distributed_suite.py --compare gloo.jsonl hvdlite.jsonl

PyTorch's harness spawns its ranks with multiprocessing; hvdlite's engine needs MPI ranks, so
here every MPI rank runs each test as PyTorch's ``TestDistBackend._run`` does (a fresh
process group from a fresh ``file://`` rendezvous, the suite's file barrier before and
after, then ``destroy_process_group()``), the ranks agreeing on each outcome through mpi4py.
A test passes when it passes on every rank; it is skipped when a rank skipped it (the
suite's ``unittest.SkipTest`` or its skip exit codes), else it failed. Each test has a time
limit (SIGALRM; hvdlite's waits are interruptible). Rank 0 appends one JSON line per test to
--out, so a launch that dies can be resumed with ``--resume``. Needs ``expecttest`` and
``hypothesis`` (the suite's own imports) and mpi4py.
"""
import argparse
import json
import os
import signal
import sys
import tempfile
import time
import traceback
import unittest


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default="hvdlite")
    ap.add_argument("--out", help="JSON lines, one per test (rank 0)")
    ap.add_argument("-k", dest="pattern", default="", help="only tests whose name contains this")
    ap.add_argument("--limit", type=float, default=90.0, help="seconds per test")
    ap.add_argument("--resume", action="store_true", help="skip the tests already in --out")
    ap.add_argument("--compare", nargs=2, metavar=("BASELINE", "OTHER"),
                    help="compare two result files and exit (no MPI)")
    return ap.parse_args()


def compare(baseline_path, other_path):
    def load(path):
        with open(path) as f:
            return {r["test"]: r for r in map(json.loads, f)}
    base, other = load(baseline_path), load(other_path)
    names = sorted(set(base) | set(other))
    counts = {}
    for name in names:
        key = (base.get(name, {}).get("outcome", "absent"), other.get(name, {}).get("outcome", "absent"))
        counts.setdefault(key, []).append(name)
    for side, path in (("baseline", baseline_path), ("other", other_path)):
        rows = base if side == "baseline" else other
        tally = {}
        for r in rows.values():
            tally[r["outcome"]] = tally.get(r["outcome"], 0) + 1
        print(f"{path}: " + ", ".join(f"{k} {v}" for k, v in sorted(tally.items())))
    for (b, o), tests in sorted(counts.items()):
        print(f"\n{b} on baseline, {o} on other: {len(tests)}")
        if b != o:
            for t in tests:
                why = other.get(t, {}).get("why", "")
                print(f"    {t}: {why[:300]}")


def main():
    args = parse()
    if args.compare:
        compare(*args.compare)
        return
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    os.environ["BACKEND"] = args.backend
    os.environ["WORLD_SIZE"] = str(size)
    # The suite's temp directory (barrier files, init files) is shared by the ranks.
    tmp = tempfile.mkdtemp(prefix="torch-dist-suite-") if rank == 0 else None
    tmp = comm.bcast(tmp, root=0)

    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    if args.backend == "hvdlite":
        import hvdlite.torch.distributed  # noqa: F401  (registers the backend)
    from torch.testing._internal import common_utils
    from torch.testing._internal.common_distributed import TEST_SKIPS
    import torch.testing._internal.distributed.distributed_test as suite

    os.environ["TEMP_DIR"] = tmp
    if rank == 0:
        for sub in ("barrier", "test_dir", "init_dir"):
            os.makedirs(os.path.join(tmp, sub), exist_ok=True)
    comm.Barrier()
    skip_codes = {v.exit_code: v.message for v in TEST_SKIPS.values()}

    class Suite(suite.TestDistBackend, suite.DistributedTest._DistTestBase):
        pass

    names = sorted(n for n in dir(Suite) if n.startswith("test_") and args.pattern in n)
    done = set()
    if args.resume and args.out and os.path.exists(args.out) and rank == 0:
        with open(args.out) as f:
            done = {json.loads(line)["test"] for line in f if line.strip()}
    done = comm.bcast(done, root=0)

    def on_alarm(signum, frame):
        raise TimeoutError(f"over the {args.limit:.0f} s limit")
    signal.signal(signal.SIGALRM, on_alarm)

    for name in names:
        if name in done:
            continue
        init_file = os.path.join(tmp, "init_dir", f"{name}.init") if rank == 0 else None
        init_file = comm.bcast(init_file, root=0)
        if rank == 0:
            for f in os.listdir(os.path.join(tmp, "barrier")):
                os.unlink(os.path.join(tmp, "barrier", f))
        comm.Barrier()
        suite.Barrier.barrier_id = 0
        t0 = time.perf_counter()
        outcome, why = "passed", ""
        signal.setitimer(signal.ITIMER_REAL, args.limit)
        common_utils.set_rng_seed()   # as PyTorch's harness does before each test (run_test)
        try:
            test = Suite(name)
            test.rank, test.file_name = rank, init_file
            dist.init_process_group(init_method=f"file://{init_file}", backend=args.backend,
                                    world_size=size, rank=rank)
            test._barrier()
            getattr(test, name)()
            test._barrier()
        except unittest.SkipTest as e:
            outcome, why = "skipped", str(e)
        except SystemExit as e:  # the suite's decorators exit with a skip code
            if e.code in skip_codes:
                outcome, why = "skipped", skip_codes[e.code]
            else:
                outcome, why = "failed", f"exit {e.code}"
        except BaseException as e:  # noqa: BLE001 - reported per test
            outcome = "failed"
            why = f"{type(e).__name__}: {e}"[:2000] + "\n" + "".join(traceback.format_exc().splitlines(True)[-6:])
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        try:
            if dist.is_initialized():
                dist.destroy_process_group()
        except BaseException as e:  # noqa: BLE001
            if outcome == "passed":
                outcome, why = "failed", f"destroy_process_group: {type(e).__name__}: {e}"
        seconds = time.perf_counter() - t0
        results = comm.allgather((outcome, why))
        outcomes = [o for o, _ in results]
        if all(o == "passed" for o in outcomes):
            final, reason = "passed", ""
        elif "failed" in outcomes:
            r = outcomes.index("failed")
            final, reason = "failed", f"rank {r}: {results[r][1]}"
        else:
            r = outcomes.index("skipped")
            final, reason = "skipped", results[r][1]
        if rank == 0:
            print(f"{final:8s} {seconds:6.1f} s  {name}" + (f"  ({reason.splitlines()[0][:150]})" if reason else ""),
                  flush=True)
            if args.out:
                with open(args.out, "a") as f:
                    f.write(json.dumps({"test": name, "outcome": final, "why": reason,
                                        "seconds": round(seconds, 2)}) + "\n")
    comm.Barrier()
    if rank == 0:
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
