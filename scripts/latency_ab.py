"""The 1-float all-reduce's latency of two or more builds, compared in interleaved batches.

    python scripts/latency_ab.py old=/tmp/inst/old new=installed [--rounds 300] [--calls 5000]

Each build (LABEL=DIR: a ``pip install --target DIR`` directory, or ``installed`` for the
hvdlite of this interpreter) runs as one job of ``--np`` ranks for the whole comparison. The
jobs take turns: each round, every build in turn runs one batch of ``--calls`` calls of
``hvd.allreduce_`` on one float32 while the others sleep on a pipe, and rank 0 reports the
batch's median call (of blocks of 100 calls). Consecutive batches of two builds are a few
milliseconds apart, so they meet the same state of the machine: on a shared VM a launch's
latency can change by 2x within seconds, which makes launches taken in turn a coarse
comparison. The table gives each build's batch medians and the median of its per-round
ratios to the first build.
"""
import argparse
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time


def worker(label: str, calls: int, pipes: str) -> None:
    import numpy as np
    import hvdlite as hvd
    hvd.init()
    r = hvd.rank()
    x = np.ones(1, np.float32)
    for _ in range(5000):  # warm: the name is cached and the data rides in the round
        hvd.allreduce_(x, op=hvd.Sum, name="lat")
    go = open(os.path.join(pipes, f"{label}-{r}.go"), "rb", buffering=0)
    done = open(os.path.join(pipes, f"{label}-{r}.done"), "wb", buffering=0)
    clock = time.perf_counter
    while go.read(1):
        for _ in range(200):  # the peers wake from their pipes
            hvd.allreduce_(x, op=hvd.Sum, name="lat")
        blocks = []
        for _ in range(max(1, calls // 100)):
            t = clock()
            for _ in range(100):
                hvd.allreduce_(x, op=hvd.Sum, name="lat")
            blocks.append((clock() - t) / 100 * 1e6)
        done.write(f"{statistics.median(blocks):.4f}\n".encode())
    hvd.shutdown()


def open_writer(path: str, deadline: float) -> int:
    # A FIFO opens for writing once its reader has: wait for the worker, not forever.
    while True:
        try:
            return os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            if time.monotonic() > deadline:
                raise SystemExit(f"latency_ab: no worker opened {path} in time (did hvdlite start?)")
            time.sleep(0.05)


def read_line(fd: int, timeout: float, what: str) -> str:
    text = b""
    end = time.monotonic() + timeout
    while not text.endswith(b"\n"):
        ready, _, _ = select.select([fd], [], [], max(0.0, end - time.monotonic()))
        if not ready:
            raise SystemExit(f"latency_ab: {what} sent no result within {timeout:.0f} s")
        chunk = os.read(fd, 64)
        if not chunk:
            raise SystemExit(f"latency_ab: {what} ended early")
        text += chunk
    return text.decode().strip()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("builds", nargs="*", help="LABEL=DIR (a pip --target directory) or LABEL=installed")
    p.add_argument("--rounds", type=int, default=300)
    p.add_argument("--calls", type=int, default=5000)
    p.add_argument("--np", type=int, default=2)
    p.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        return worker(a.worker[0], int(a.worker[1]), a.worker[2])
    if not a.builds or any("=" not in b for b in a.builds):
        p.error("give at least one build as LABEL=DIR or LABEL=installed")
    pipes = tempfile.mkdtemp(prefix="hvdlite-ab-")
    builds = [b.split("=", 1) for b in a.builds]
    labels = [label for label, _ in builds]
    jobs = []
    for label, where in builds:
        for r in range(a.np):
            for kind in ("go", "done"):
                os.mkfifo(os.path.join(pipes, f"{label}-{r}.{kind}"))
        env = dict(os.environ)
        if where == "installed":
            run = [os.path.join(os.path.dirname(sys.executable), "hvdlite-run")]
        else:
            env["PYTHONPATH"] = where
            run = [os.path.join(where, "bin", "hvdlite-run"), "-x", "PYTHONPATH"]
        jobs.append(subprocess.Popen(run + ["-np", str(a.np), sys.executable, os.path.abspath(__file__),
                                            "--worker", label, str(a.calls), pipes], env=env))
    try:
        deadline = time.monotonic() + 120
        done = {l: [os.open(os.path.join(pipes, f"{l}-{r}.done"), os.O_RDONLY | os.O_NONBLOCK)
                    for r in range(a.np)] for l in labels}
        go = {l: [open_writer(os.path.join(pipes, f"{l}-{r}.go"), deadline) for r in range(a.np)]
              for l in labels}
        results = {l: [] for l in labels}
        for i in range(a.rounds):
            for l in (labels if i % 2 == 0 else labels[::-1]):
                for fd in go[l]:
                    os.write(fd, b"x")
                lines = [read_line(fd, 120, f"build {l}") for fd in done[l]]
                results[l].append(float(lines[0]))
        for l in labels:
            for fd in go[l]:
                os.close(fd)
        for j in jobs:
            j.wait(timeout=120)
    finally:
        for j in jobs:
            if j.poll() is None:
                j.kill()
    base = labels[0]
    print(f"{a.np} ranks, {a.rounds} rounds of {a.calls} calls per build")
    print(f"{'build':12s} {'median':>7s} {'p10':>6s} {'p90':>6s}   per-round ratio to {base}: median [p10, p90]")
    for l in labels:
        v = sorted(results[l])
        ratios = sorted(x / y for x, y in zip(results[l], results[base]))
        print(f"{l:12s} {statistics.median(v):7.3f} {v[len(v) // 10]:6.3f} {v[len(v) * 9 // 10]:6.3f}   "
              f"{statistics.median(ratios):.3f} [{ratios[len(ratios) // 10]:.3f}, {ratios[len(ratios) * 9 // 10]:.3f}]")


if __name__ == "__main__":
    main()
