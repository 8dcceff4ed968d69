"""All-reduce benchmark: hvdlite against raw MPI (mpi4py) and torch.distributed gloo.

    hvdlite-run -np 2 python examples/allreduce_bench.py [--json out.json] [--sizes 4K 1M 64M] [--quick]

Honest baselines: a library's background thread slows every other library in its process,
so the baselines are timed while hvdlite is NOT initialised. mpi4py initialises MPI first;
each of --rounds rounds has a baseline phase (before ``hvd.init()`` or after
``hvd.shutdown()``: MPI, gloo and the memory copy) and an hvdlite phase (``init()`` ...
``shutdown()``), their order alternating from round to round so that load from elsewhere on
a shared machine hits both alike. Every library all-reduces in place
(``comm.Allreduce(MPI.IN_PLACE, buf)``, ``dist.all_reduce(t)``, ``hvd.allreduce_``).

Three parts, all at the job's N ranks:

1. a sweep of float32 all-reduces (Sum) from 4 KiB to 256 MiB: the median time per call, the
   bus bandwidth busbw = bytes * 2*(n-1)/n / time (as in nccl-tests; GB/s = 1e9 bytes/s)
   and the speedups baseline_time / hvdlite_time (> 1 means hvdlite is faster). The same run
   measures this machine's copy bandwidth (all ranks copying 64 MiB at once) and, at 2
   ranks, prints the achieved fraction of the memory-traffic bound for 64 and 256 MiB: an
   in-place all-reduce of N bytes moves about 2.5 N bytes per rank (read both halves, write
   the result, fetch the peer's reduced half), and a copy of N bytes moves 2 N;
2. the latency of a 1-element float32 all-reduce (median and p90 in microseconds);
3. the ResNet-50 gradient set: 161 float32 tensors with ResNet-50's parameter shapes
   (25,557,032 parameters), each submitted with ``hvd.allreduce_async_`` in backward order
   (last layer first, distinct names) and then all synchronized, against ONE in-place mpi4py
   Allreduce of a single buffer of the same total size (target: at most 0.7x).

Across hosts (``--two-hosts [--rate 10gbit]``, as root: two hosts made of network namespaces
on this machine): raw MPI against hvdlite's flat ring, hierarchical all-reduce and automatic
choice per size, with the bytes sent across hosts; examples/hierarchical_bench.py, which also
runs across real hosts.

``--op adasum`` adds Adasum (``op=hvd.Adasum``) to part 1: at each size hvdlite's Adasum is
timed right after its Sum, in the same phases, and a table gives Adasum time / Sum time.

A fourth part, ``--parts timeline``, measures what the timeline costs: the latency call and
the ResNet-50 step with the timeline off and on (``hvd.start_timeline``, rank 0 writing), the
two alternating --rounds times in the last hvdlite phase; ratio = on / off (1.0: no cost).

Rank 0 chooses the iteration counts (so that each size takes about --target-time seconds per
library, split over the rounds) and broadcasts them. A time is the median over all of a
rank's timed calls, then the largest of the ranks' medians. Rank 0 prints the table;
``--json`` writes the results. mpi4py and torch are optional: without mpi4py there are no
baselines (hvdlite runs alone, in one phase), without torch no gloo column; each is skipped
with a note.
"""

import argparse
import datetime
import json
import os
import socket
import sys
import time

import numpy as np

# Keep the baselines honest on small machines: one compute thread per rank.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import hvdlite as hvd  # noqa: E402

try:
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    _TORCH_ERROR = None
except Exception as e:   # torch missing or broken: the gloo columns are skipped
    torch = dist = None
    _TORCH_ERROR = f"{type(e).__name__}: {e}"

KiB, MiB = 1024, 1024 * 1024
FULL_SIZES = [4 * KiB * 4 ** i for i in range(9)]          # 4 KiB, 16 KiB, ..., 256 MiB
QUICK_SIZES = [4 * KiB, 256 * KiB, 4 * MiB]
RESNET50_PARAMS = 25_557_032
RESNET50_TENSORS = 161


# ----------------------------------------------------------------------------------------
# ResNet-50's parameter shapes (torchvision layout, without torchvision)

def resnet50_shapes():
    """Shapes of ResNet-50's 161 parameter tensors, in forward (registration) order."""
    shapes = [(64, 3, 7, 7), (64,), (64,)]                 # conv1, bn1 weight and bias
    inplanes = 64
    for planes, blocks in ((64, 3), (128, 4), (256, 6), (512, 3)):
        for b in range(blocks):
            shapes += [(planes, inplanes, 1, 1), (planes,), (planes,),          # conv1, bn1
                       (planes, planes, 3, 3), (planes,), (planes,),            # conv2, bn2
                       (planes * 4, planes, 1, 1), (planes * 4,), (planes * 4,)]  # conv3, bn3
            if b == 0:                                                          # downsample
                shapes += [(planes * 4, inplanes, 1, 1), (planes * 4,), (planes * 4,)]
            inplanes = planes * 4
    shapes += [(1000, 2048), (1000,)]                      # fc weight and bias
    return shapes


def _check_resnet50_shapes(shapes):
    params = sum(int(np.prod(s)) for s in shapes)
    assert len(shapes) == RESNET50_TENSORS, len(shapes)
    assert params == RESNET50_PARAMS, params
    return params


# ----------------------------------------------------------------------------------------
# coordination between ranks (mpi4py when present, else hvdlite itself)

class Coordinator:
    """Barriers and small reductions between the ranks: through mpi4py (usable whether or not
    hvdlite is initialised), or through hvdlite itself when mpi4py is missing."""

    def __init__(self, comm):
        self.comm = comm
        if comm is not None:
            from mpi4py import MPI
            self.rank, self.size = comm.Get_rank(), comm.Get_size()
            local = comm.Split_type(MPI.COMM_TYPE_SHARED)
            self.local_size = local.Get_size()
            local.Free()
        else:
            self.rank, self.size, self.local_size = hvd.rank(), hvd.size(), hvd.local_size()

    def barrier(self):
        if self.comm is not None:
            self.comm.Barrier()
        else:
            hvd.barrier()

    def bcast(self, values):
        """Rank 0's list of floats, on every rank."""
        arr = np.asarray(values, dtype=np.float64)
        if self.comm is not None:
            self.comm.Bcast(arr, root=0)
            return arr.tolist()
        return hvd.broadcast(arr, root_rank=0, name="bench.bcast").tolist()

    def max(self, value):
        return self._reduce(value, "MAX")

    def sum(self, value):
        return self._reduce(value, "SUM")

    def _reduce(self, value, op):
        arr = np.asarray([value], dtype=np.float64)
        if self.comm is not None:
            out = np.empty_like(arr)
            from mpi4py import MPI
            self.comm.Allreduce(arr, out, op=getattr(MPI, op))
            return float(out[0])
        return float(hvd.allreduce(arr, op=hvd.Max if op == "MAX" else hvd.Sum,
                                   name=f"bench.{op.lower()}")[0])


def _machine_busy_seconds():
    """CPU seconds this machine has spent busy since boot (all processes), or None."""
    try:
        with open("/proc/stat") as f:
            fields = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)   # idle + iowait
    return (sum(fields[:8]) - idle) / hz


class LoadMeter:
    """How busy the machine was with OTHER work during a measurement (single-host jobs only).

    other = machine-wide busy CPU time - the CPU time of this job's ranks, as a fraction of
    the machine's capacity over the interval. Spinning MPI collectives slow down many-fold
    when other processes want the same cores, so rows measured under load are flagged.
    """

    def __init__(self, coord):
        self.coord = coord
        self.enabled = coord.local_size == coord.size and _machine_busy_seconds() is not None

    def start(self):
        self.t = time.perf_counter()
        self.cpu = time.process_time()
        self.busy = _machine_busy_seconds() if self.enabled else None

    def stop(self):
        """Fraction (0..1) of the machine's CPU used by other processes since start()."""
        ours = self.coord.sum(time.process_time() - self.cpu)
        if not self.enabled:
            return None
        wall = time.perf_counter() - self.t
        busy = _machine_busy_seconds() - self.busy
        other = max(0.0, busy - ours) / (wall * (os.cpu_count() or 1))
        return float(self.coord.bcast([other])[0])   # rank 0's reading for everyone


def plan_iters(coord, calls, warmup, target_time, min_iters, max_iters, fixed_iters=None):
    """{library: timed calls in all}: rank 0 runs ``warmup`` calls of each and sizes its run
    (about ``target_time`` seconds, within [min_iters, max_iters], or ``fixed_iters``), and
    every rank takes rank 0's counts."""
    libs = list(calls)
    plan = []
    for lib in libs:
        coord.barrier()
        t0 = time.perf_counter()
        for _ in range(warmup):
            calls[lib]()
        per_call = (time.perf_counter() - t0) / max(warmup, 1)
        if fixed_iters is None:
            plan.append(int(np.clip(target_time / max(per_call, 1e-7), min_iters, max_iters)))
        else:
            plan.append(int(fixed_iters))
    return dict(zip(libs, (int(v) for v in coord.bcast(plan))))


def time_calls(coord, calls, iters, warmup):
    """{library: per-call seconds on this rank}, plus "other_load": ``warmup`` untimed calls,
    then ``iters[library]`` timed calls of each library in turn (barrier before each)."""
    meter = LoadMeter(coord)
    meter.start()
    times = {}
    for lib, call in calls.items():
        coord.barrier()
        for _ in range(warmup):
            call()
        ts = np.empty(iters[lib])
        coord.barrier()
        for i in range(len(ts)):
            t = time.perf_counter()
            call()
            ts[i] = time.perf_counter() - t
        times[lib] = ts
    times["other_load"] = meter.stop()
    return times


class Recorder:
    """Per-call times of each measurement, gathered over the phases.

    A measurement (a key such as ("sweep", bytes)) is sized once, in the first phase that
    times it, and each of the ``phases`` phases then times its share of the calls.
    """

    def __init__(self, coord, phases):
        self.coord, self.phases = coord, phases
        self.plans, self.times, self.loads = {}, {}, {}

    def run(self, key, calls, warmup, target_time=0, min_iters=0, max_iters=0, fixed_iters=None):
        plans = self.plans.setdefault(key, {})
        new = {lib: c for lib, c in calls.items() if lib not in plans}
        if new:
            plans.update(plan_iters(self.coord, new, warmup, target_time, min_iters, max_iters,
                                    fixed_iters))
        share = {lib: max(1, -(-plans[lib] // self.phases)) for lib in calls}
        got = time_calls(self.coord, calls, share, 0 if new else warmup)
        self.loads.setdefault(key, []).append(got.pop("other_load"))
        for lib, ts in got.items():
            self.times.setdefault(key, {}).setdefault(lib, []).append(ts)

    def stats(self, key):
        """{library: {median_s, p90_s, iters}} (a rank's median over all its calls, then the
        largest over the ranks), plus "other_load" (the median over the phases)."""
        out = {}
        for lib, parts in sorted(self.times.get(key, {}).items()):
            ts = np.concatenate(parts)
            out[lib] = {"median_s": self.coord.max(float(np.median(ts))),
                        "p90_s": self.coord.max(float(np.percentile(ts, 90))),
                        "iters": int(ts.size)}
        loads = [v for v in self.loads.get(key, []) if v is not None]
        out["other_load"] = float(np.median(loads)) if loads else None
        return out


def busbw(nbytes, seconds, n):
    return nbytes * 2 * (n - 1) / n / seconds / 1e9 if n > 1 else nbytes / seconds / 1e9


def parse_size(text):
    text = text.strip().upper().rstrip("B").rstrip("I")
    mult = {"K": KiB, "M": MiB, "G": 1024 * MiB}.get(text[-1:], 1)
    number = text[:-1] if text[-1:] in "KMG" else text
    nbytes = int(float(number) * mult)
    if nbytes < 4:
        raise argparse.ArgumentTypeError(f"size {text!r} is less than one float32")
    return nbytes - nbytes % 4


def fmt_size(nbytes):
    for unit, div in (("GiB", 1024 * MiB), ("MiB", MiB), ("KiB", KiB)):
        if nbytes >= div and nbytes % div == 0:
            return f"{nbytes // div} {unit}"
    return f"{nbytes} B"


LOAD_WARN = 0.10   # other processes using >10% of the machine make a row suspect


def fmt_load(fraction):
    """'  3%' or ' 45%*' (* = measured while other processes used the CPU)."""
    if fraction is None:
        return "    ?"
    return f"{fraction * 100:3.0f}%" + ("*" if fraction > LOAD_WARN else " ")


def fmt_time(seconds):
    if seconds is None:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.3f} s"


# ----------------------------------------------------------------------------------------
# the three libraries

def setup_mpi(notes):
    """mpi4py's MPI and a communicator of its own, initialised BEFORE hvdlite (hvdlite then
    reuses that MPI and leaves it running at shutdown(), so it can be started and stopped
    between the baseline phases), or (None, None) with a note."""
    # The MPI setting hvdlite's init() would make (yield while waiting), made here because
    # mpi4py now initialises MPI: both libraries run on the same MPI configuration.
    os.environ.setdefault("OMPI_MCA_mpi_yield_when_idle", "1")
    try:
        from mpi4py import MPI
    except Exception as e:
        notes.append(f"mpi4py is not importable ({type(e).__name__}: {e}): MPI and gloo "
                     "baselines skipped (pip install mpi4py)")
        return None, None
    if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
        notes.append("MPI was not initialised with MPI_THREAD_MULTIPLE: the benchmark's "
                     "barriers could race with hvdlite's background thread, baselines skipped")
        return None, None
    return MPI, MPI.COMM_WORLD.Dup()   # its own communicator, apart from hvdlite's


def start_gloo(coord, notes):
    """Join a gloo process group (rank 0 picks the port and, for multi-host jobs, its
    address); False with a note when torch.distributed or gloo is unavailable."""
    if torch is None:
        notes.append(f"torch is not importable ({_TORCH_ERROR}): gloo baseline skipped")
        return False
    if not dist.is_available() or not dist.is_gloo_available():
        notes.append("torch.distributed with gloo is not available: gloo baseline skipped")
        return False
    port, addr = 0, "127.0.0.1"
    ip_as_int = 0
    if coord.rank == 0:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        if coord.local_size != coord.size:
            try:
                ip_as_int = int.from_bytes(socket.inet_aton(socket.gethostbyname(socket.gethostname())), "big")
            except OSError:
                pass
    port, ip_as_int = (int(v) for v in coord.bcast([port, ip_as_int]))
    if ip_as_int:
        addr = socket.inet_ntoa(int(ip_as_int).to_bytes(4, "big"))
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = addr, str(port)
    try:
        dist.init_process_group("gloo", rank=coord.rank, world_size=coord.size,
                                timeout=datetime.timedelta(seconds=120))
    except Exception as e:
        notes.append(f"torch.distributed gloo init failed ({type(e).__name__}: {e}): gloo skipped")
        return False
    return True


def filled(nelem):
    """A float32 buffer with its pages touched (zeros: repeated in-place sums stay finite)."""
    a = np.empty(nelem, dtype=np.float32)
    a.fill(0.0)
    return a


# ----------------------------------------------------------------------------------------

def timeline_overhead(coord, rounds, quick, args, log):
    """Median time of the latency call and of the ResNet-50 step with the timeline off and on.

    Off and on alternate ``rounds`` times (each a full measurement with its own warm-up), so
    that load from elsewhere on the machine hits both alike. Rank 0 writes the timeline.
    """
    import tempfile
    path = args.timeline_file or os.path.join(tempfile.gettempdir(), "hvdlite_bench_timeline.json")
    one = filled(1)
    shapes = resnet50_shapes()
    grads = [filled(int(np.prod(s))).reshape(s) for s in shapes]

    def latency():
        hvd.allreduce_(one, op=hvd.Sum, name="bench.tl.latency")

    def resnet_step():
        handles = [hvd.allreduce_async_(grads[i], op=hvd.Sum, name=f"bench.tl.grad.{i}")
                   for i in reversed(range(len(grads)))]
        for h in handles:
            hvd.synchronize(h)

    cases = {"latency_1_float": (latency, 100 if quick else 2000),
             "resnet50_161_tensors": (resnet_step, 2 if quick else 10)}
    log(f"\n4. timeline overhead: median time per call, timeline off vs on (rank 0 writes "
        f"{path}), {rounds} alternations")
    out = {}
    for case, (call, iters) in cases.items():
        times = {"off": [], "on": []}
        for _ in range(rounds):
            for state in ("off", "on"):
                if state == "on":
                    hvd.start_timeline(path)
                got = time_calls(coord, {state: call}, {state: iters}, 5)
                if state == "on":
                    hvd.stop_timeline()
                times[state].append(coord.max(float(np.median(got[state]))))
        off, on = float(np.median(times["off"])), float(np.median(times["on"]))
        out[case] = {"off_s": off, "on_s": on, "ratio_on_over_off": on / off,
                     "off_rounds_s": times["off"], "on_rounds_s": times["on"]}
        log(f"  {case:<22}: off {fmt_time(off)}  on {fmt_time(on)}  on/off = {on / off:.2f}")
    if hvd.rank() == 0 and os.path.exists(path):
        out["timeline_bytes"] = os.path.getsize(path)
    return out


def copy_bandwidth(coord, nbytes, iters):
    """Per-call seconds of np.copyto of ``nbytes`` on this rank, all ranks copying at once
    (they share the machine's memory bus, as they do in an all-reduce)."""
    src, dst = filled(nbytes // 4), filled(nbytes // 4)
    np.copyto(dst, src)
    return time_calls(coord, {"copy": lambda: np.copyto(dst, src)}, {"copy": iters}, 2)["copy"]


def memory_bound_s(nbytes, copy_GBps):
    """Time a 2-rank in-place all-reduce of ``nbytes`` needs at the measured copy bandwidth:
    about 2.5 N bytes of memory traffic per rank (read both halves once, write the result
    once, fetch the peer's reduced half), where a copy of N bytes moves 2 N."""
    return 2.5 * nbytes / (copy_GBps * 1e9)


def run(args):
    notes = []
    MPI, comm = (None, None) if args.no_mpi else setup_mpi(notes)
    if args.no_mpi:
        notes.append("MPI and gloo baselines skipped (--no-mpi; the baselines need mpi4py to "
                     "meet while hvdlite is not initialised)")
    if comm is None:
        hvd.init()   # no baselines: hvdlite also coordinates, and stays up for the whole run
    coord = Coordinator(comm)
    n, rank = coord.size, coord.rank
    have_torch_baseline = comm is not None and not args.no_gloo
    if args.no_gloo:
        notes.append("gloo baseline skipped (--no-gloo)")
    elif comm is None:
        notes.append(f"torch is not importable ({_TORCH_ERROR}): gloo baseline skipped"
                     if torch is None else
                     "gloo baseline skipped: it meets through mpi4py before hvdlite starts")

    quick = args.quick
    sizes = args.sizes or (QUICK_SIZES if quick else FULL_SIZES)
    target = args.target_time if args.target_time else (0.05 if quick else 0.3)
    min_iters, max_iters = (3, 200) if quick else (5, 20000)
    warmup = 2 if quick else 5
    phases = args.rounds or (1 if quick else 3)
    if comm is None:
        phases = 1
    lat_iters = args.latency_iters or (100 if quick else 2000)
    rn_iters = args.resnet_iters or (2 if quick else 10)
    copy_bytes = 64 * MiB

    def log(msg):
        if rank == 0:
            print(msg, flush=True)

    from hvdlite import _core, mpi_library
    info = mpi_library.load()
    results = {
        "config": {
            "ranks": n, "local_size": coord.local_size, "quick": quick, "target_time_s": target,
            "rounds": phases,
            "torch_threads": torch.get_num_threads() if torch is not None else None,
            "torch_version": torch.__version__ if torch is not None else None,
            "mpi_library_version": str(info.get("version", "")).strip().splitlines()[0]
                                   if info.get("version") else "",
            "mpi_library": info.get("library", ""),
            "hvdlite_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("HVDLITE_")},
            "hostname": socket.gethostname(), "cpus": os.cpu_count(),
            "date": datetime.datetime.now().isoformat(timespec="seconds"),
            "baselines": {"mpi": comm is not None, "gloo": False},
            "method": "baselines (MPI, gloo, copy) are timed while hvdlite is not initialised "
                      "(before init() and after shutdown()), in phases that alternate with "
                      "hvdlite's; every library all-reduces in place",
            "busbw_definition": "bytes * 2*(n-1)/n / time, GB/s = 1e9 bytes/s",
            "speedup_definition": "baseline_time / hvdlite_time (> 1: hvdlite faster)",
            "bound_definition": "2.5 * bytes / copy bandwidth (copy of N bytes = 2N of traffic, "
                                "all ranks copying at once); fraction = bound time / time",
        },
        "notes": notes, "sizes": [], "latency": {}, "resnet50": {}, "timeline": {},
        "copy_bandwidth": None,
    }
    log(f"hvdlite all-reduce benchmark: {n} ranks, {results['config']['mpi_library_version']}")
    log(f"{phases} baseline phase(s) (hvdlite not initialised) alternating with {phases} "
        f"hvdlite phase(s); all in place")

    shapes = resnet50_shapes()
    params = _check_resnet50_shapes(shapes)
    rec = Recorder(coord, phases)
    copy_times = []

    def baseline_phase():
        use_gloo = have_torch_baseline and start_gloo(coord, notes)
        results["config"]["baselines"]["gloo"] = use_gloo
        copy_times.append(copy_bandwidth(coord, copy_bytes, 5 if quick else 20))
        if "sweep" in args.parts:
            for nbytes in sizes:
                nelem = nbytes // 4
                buf = filled(nelem)
                calls = {"mpi": lambda: comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)}
                if use_gloo:
                    t = torch.from_numpy(buf)
                    calls["gloo"] = lambda: dist.all_reduce(t, op=dist.ReduceOp.SUM)
                rec.run(("sweep", nbytes), calls, warmup, target, min_iters, max_iters)
                calls = buf = t = None
        if "latency" in args.parts:
            one = filled(1)
            calls = {"mpi": lambda: comm.Allreduce(MPI.IN_PLACE, one, op=MPI.SUM)}
            if use_gloo:
                t1 = torch.from_numpy(one)
                calls["gloo"] = lambda: dist.all_reduce(t1, op=dist.ReduceOp.SUM)
            rec.run("latency", calls, warmup * 10, fixed_iters=lat_iters)
        if "resnet50" in args.parts:
            flat = filled(params)
            rec.run("resnet50", {"mpi_flat": lambda: comm.Allreduce(MPI.IN_PLACE, flat, op=MPI.SUM)},
                    2, fixed_iters=rn_iters)
            flat = None
        if use_gloo:
            dist.destroy_process_group()

    checked = set()
    paths = {}

    def count_paths(label, call, calls=50):
        """Per call, after the timing: negotiation rounds through shared memory, all-reduces
        that rode in the round (HVDLITE_BOARD_ALLREDUCE_MAX_BYTES), data-path shared-memory
        all-reduces and the bytes this rank copied for them (what the 2-core machine's tests
        check; the timings say what they cost here)."""
        _core.transport_stats(reset=True)
        for _ in range(calls):
            call()
        s = _core.transport_stats(reset=True)
        paths[label] = {k: s[k] / calls for k in ("shared_memory_swaps", "board_allreduces",
                                                     "shared_memory_allreduces",
                                                     "shared_memory_copied_bytes",
                                                     "shared_memory_extra_lanes")}

    def hvdlite_phase(last):
        hvd.init()
        if "sweep" in args.parts:
            for nbytes in sizes:
                nelem = nbytes // 4
                buf = filled(nelem)
                name = f"bench.sweep.{nelem}"
                if nbytes not in checked:   # the answer once per size (zeros would hide a wrong one)
                    buf.fill(rank + 1)
                    hvd.allreduce_(buf, op=hvd.Sum, name=name)
                    bad = np.flatnonzero(buf != n * (n + 1) / 2)
                    if bad.size:
                        raise AssertionError(
                            f"hvdlite all-reduce of {nelem} floats is wrong at {bad.size} "
                            f"elements, first at {bad[0]}: {buf[bad[0]]} != {n * (n + 1) / 2}")
                    if args.op == "adasum":   # parallel vectors: Adasum averages them
                        buf.fill(rank + 1)
                        hvd.allreduce_(buf, op=hvd.Adasum, name=name + ".adasum")
                        bad = np.flatnonzero(buf != (n + 1) / 2)
                        if bad.size:
                            raise AssertionError(
                                f"hvdlite Adasum of {nelem} floats is wrong at {bad.size} "
                                f"elements, first at {bad[0]}: {buf[bad[0]]} != {(n + 1) / 2}")
                    buf.fill(0.0)
                    checked.add(nbytes)
                calls = {"hvdlite": lambda: hvd.allreduce_(buf, op=hvd.Sum, name=name)}
                if args.op == "adasum":   # timed right after Sum, in the same phase
                    calls["hvdlite_adasum"] = lambda: hvd.allreduce_(buf, op=hvd.Adasum,
                                                                     name=name + ".adasum")
                rec.run(("sweep", nbytes), calls, warmup, target, min_iters, max_iters)
                if last:
                    count_paths(fmt_size(nbytes), lambda: hvd.allreduce_(buf, op=hvd.Sum, name=name), 10)
                buf = None
        if "latency" in args.parts:
            one = filled(1)
            rec.run("latency", {"hvdlite": lambda: hvd.allreduce_(one, op=hvd.Sum, name="bench.latency")},
                    warmup * 10, fixed_iters=lat_iters)
            if last:
                count_paths("1 float", lambda: hvd.allreduce_(one, op=hvd.Sum, name="bench.latency"))
        if "resnet50" in args.parts:
            grads = [filled(int(np.prod(s))).reshape(s) for s in shapes]
            backward_order = list(reversed(range(len(grads))))   # the last layer's is ready first

            def resnet_step():
                handles = [hvd.allreduce_async_(grads[i], op=hvd.Sum, name=f"resnet50.grad.{i}")
                           for i in backward_order]
                for h in handles:
                    hvd.synchronize(h)

            flat = filled(params)
            rec.run("resnet50", {"hvdlite_161": resnet_step,
                                 "hvdlite_flat": lambda: hvd.allreduce_(flat, op=hvd.Sum,
                                                                        name="resnet50.flat")},
                    2, fixed_iters=rn_iters)
            grads = flat = None
        if last and "timeline" in args.parts:
            results["timeline"] = timeline_overhead(coord, phases, quick, args, log)
        if comm is not None:
            hvd.shutdown()

    # Correctness first (a benchmark of wrong answers is worthless).
    if comm is None:
        check = np.full(1000, rank + 1, dtype=np.float32)
        got = hvd.allreduce(check, op=hvd.Sum, name="bench.check")
        assert np.all(got == n * (n + 1) / 2), got[:4]

    for r in range(phases):
        order = ("base", "hvd") if r % 2 == 0 else ("hvd", "base")
        for which in order:
            if which == "hvd":
                hvdlite_phase(last=(r == phases - 1))
            elif comm is not None:
                baseline_phase()
    for note in notes:
        log(f"note: {note}")
    if paths:
        results["paths_per_call"] = paths
        log("\npaths per hvdlite call (rank 0): board rounds / rode the round / shm all-reduces "
            "/ bytes copied / extra lanes")
        for label, p in paths.items():
            log(f"  {label:>8}: {p['shared_memory_swaps']:.2f} / {p['board_allreduces']:.2f} / "
                f"{p['shared_memory_allreduces']:.2f} / {p['shared_memory_copied_bytes']:.0f} / "
                f"{p['shared_memory_extra_lanes']:.2f}")

    copy_GBps = None
    if copy_times:
        t_copy = coord.max(float(np.median(np.concatenate(copy_times))))
        copy_GBps = 2 * copy_bytes / t_copy / 1e9
        results["copy_bandwidth"] = {"bytes": copy_bytes, "median_s": t_copy,
                                     "GBps_read_plus_write": copy_GBps}
        log(f"\nmemory copy bandwidth, all {n} ranks copying {fmt_size(copy_bytes)} at once: "
            f"{copy_GBps:.2f} GB/s per rank (read + write)")

    # -- 1. size sweep ---------------------------------------------------------------------
    if "sweep" in args.parts:
        log("\n1. float32 all-reduce (Sum, in place), median time per call; busbw in GB/s; "
            "speedup = baseline time / hvdlite time (> 1: hvdlite faster)")
        header = (f"{'size':>9} | {'hvdlite':>10} {'busbw':>6} | {'MPI':>10} {'busbw':>6} | "
                  f"{'gloo':>10} {'busbw':>6} | {'vs MPI':>6} {'vs gloo':>7} | {'other':>5} | iters h/m/g")
        log(header)
        log("-" * len(header))
        for nbytes in sizes:
            stats = rec.stats(("sweep", nbytes))
            row = {"bytes": nbytes, "elements": nbytes // 4}
            for lib in ("hvdlite", "mpi", "gloo"):
                row[lib] = stats.get(lib)
                if row[lib]:
                    row[lib]["busbw_GBps"] = busbw(nbytes, row[lib]["median_s"], n)
            h = row["hvdlite"]["median_s"]
            row["speedup_vs_mpi"] = row["mpi"]["median_s"] / h if row["mpi"] else None
            row["speedup_vs_gloo"] = row["gloo"]["median_s"] / h if row["gloo"] else None
            row["other_load"] = stats["other_load"]
            if stats.get("hvdlite_adasum"):
                row["hvdlite_adasum"] = stats["hvdlite_adasum"]
                row["adasum_over_sum"] = stats["hvdlite_adasum"]["median_s"] / h
            if copy_GBps and n == 2 and nbytes >= copy_bytes:   # smaller ones fit in caches
                bound = memory_bound_s(nbytes, copy_GBps)
                row["memory_bound_s"] = bound
                for lib in ("hvdlite", "mpi"):
                    if row[lib]:
                        row[lib]["fraction_of_memory_bound"] = bound / row[lib]["median_s"]
            results["sizes"].append(row)

            def cell(r):
                return (f"{fmt_time(r['median_s']):>10} {r['busbw_GBps']:6.2f}" if r
                        else f"{'-':>10} {'-':>6}")
            sp = lambda v: f"{v:6.2f}x" if v else "      -"   # noqa: E731
            its = "/".join(str(row[k]["iters"]) if row[k] else "-" for k in ("hvdlite", "mpi", "gloo"))
            log(f"{fmt_size(row['bytes']):>9} | {cell(row['hvdlite'])} | {cell(row['mpi'])} | "
                f"{cell(row['gloo'])} | {sp(row['speedup_vs_mpi'])} {sp(row['speedup_vs_gloo'])} | "
                f"{fmt_load(row['other_load'])} | {its}")
        if args.op == "adasum":
            log("\n   Adasum (op=hvd.Adasum, in place; hvdlite's CPU algorithm over the transport) "
                "against hvdlite's Sum, timed back to back in the same phases: ratio = Adasum "
                "time / Sum time (target at 64 MiB, 2 ranks: <= 2)")
            for row in results["sizes"]:
                if "hvdlite_adasum" in row:
                    log(f"  {fmt_size(row['bytes']):>8}: Sum {fmt_time(row['hvdlite']['median_s'])}, "
                        f"Adasum {fmt_time(row['hvdlite_adasum']['median_s'])}, ratio "
                        f"{row['adasum_over_sum']:.2f}")
        bound_rows = [r for r in results["sizes"] if "memory_bound_s" in r and r["bytes"] >= 64 * MiB]
        if bound_rows:
            log("\n   memory-traffic bound (2.5 N bytes per rank at the copy bandwidth): "
                "achieved fraction (target >= 70%)")
            for row in bound_rows:
                mpi_part = (f", MPI {row['mpi']['fraction_of_memory_bound']:.0%}"
                            if row["mpi"] else "")
                log(f"  {fmt_size(row['bytes']):>8}: bound {fmt_time(row['memory_bound_s'])}; "
                    f"hvdlite {row['hvdlite']['fraction_of_memory_bound']:.0%}{mpi_part}")
        elif copy_GBps and n != 2:
            log("   (the 2.5 N memory-traffic bound is worked out for 2 ranks only)")

    # -- 2. latency ------------------------------------------------------------------------
    if "latency" in args.parts:
        stats = rec.stats("latency")
        log(f"\n2. latency of a 1-element float32 all-reduce ({lat_iters} calls after warm-up)")
        lat = {}
        for lib in ("hvdlite", "mpi", "gloo"):
            st = stats.get(lib)
            lat[lib] = ({"median_us": st["median_s"] * 1e6, "p90_us": st["p90_s"] * 1e6,
                         "iters": st["iters"]} if st else None)
        lat["other_load"] = stats["other_load"]
        results["latency"] = lat
        log(f"{'':>9} | {'median':>10} {'p90':>10}   (other load {fmt_load(stats['other_load']).strip()})")
        for lib in ("hvdlite", "mpi", "gloo"):
            if lat[lib]:
                log(f"{lib:>9} | {lat[lib]['median_us']:7.1f} us {lat[lib]['p90_us']:7.1f} us")
            else:
                log(f"{lib:>9} | {'-':>10} {'-':>10}")
        if lat["mpi"]:
            log(f"  hvdlite / MPI = {lat['hvdlite']['median_us'] / lat['mpi']['median_us']:.1f}x")

    # -- 3. ResNet-50 gradients ------------------------------------------------------------
    if "resnet50" in args.parts:
        stats = rec.stats("resnet50")
        total_bytes = params * 4
        log(f"\n3. ResNet-50 gradients: {len(shapes)} float32 tensors, {params:,} parameters "
            f"({total_bytes / MiB:.1f} MiB), {rn_iters} iterations, median per step")
        rn = {"tensors": len(shapes), "params": params, "bytes": total_bytes, "iters": rn_iters,
              "hvdlite_161_async_s": stats["hvdlite_161"]["median_s"],
              "hvdlite_single_buffer_s": stats["hvdlite_flat"]["median_s"],
              "mpi_single_buffer_s": stats["mpi_flat"]["median_s"] if "mpi_flat" in stats else None,
              "ratio_hvdlite_161_over_mpi_single": None, "other_load": stats["other_load"]}
        if rn["mpi_single_buffer_s"]:
            rn["ratio_hvdlite_161_over_mpi_single"] = rn["hvdlite_161_async_s"] / rn["mpi_single_buffer_s"]
            rn["target_ratio"] = 0.7
            rn["within_target"] = rn["ratio_hvdlite_161_over_mpi_single"] <= 0.7
        rn["ratio_hvdlite_161_over_hvdlite_single"] = (rn["hvdlite_161_async_s"]
                                                      / rn["hvdlite_single_buffer_s"])
        results["resnet50"] = rn
        log(f"  hvdlite, 161 tensors via allreduce_async_ : {fmt_time(rn['hvdlite_161_async_s'])}")
        log(f"  hvdlite, one flat buffer                  : {fmt_time(rn['hvdlite_single_buffer_s'])}")
        if rn["mpi_single_buffer_s"] is not None:
            r = rn["ratio_hvdlite_161_over_mpi_single"]
            log(f"  MPI, one in-place Allreduce of one buffer : {fmt_time(rn['mpi_single_buffer_s'])}")
            log(f"  ratio hvdlite(161 tensors) / MPI(one buffer) = {r:.2f}x "
                f"(target <= 0.7x: {'met' if r <= 0.7 else 'NOT met'})")
        else:
            log("  MPI single-buffer baseline skipped (no mpi4py)")
        log(f"  other load during this part: {fmt_load(rn['other_load']).strip()}")
        log(f"  ratio hvdlite(161 tensors) / hvdlite(one buffer) = "
            f"{rn['ratio_hvdlite_161_over_hvdlite_single']:.2f}x (cost of per-tensor submission "
            f"and fusion; fusion threshold {os.environ.get('HVDLITE_FUSION_THRESHOLD', 'default')})")

    loads = ([r["other_load"] for r in results["sizes"]]
             + [results[k].get("other_load") for k in ("latency", "resnet50") if results[k]])
    if any(v is not None and v > LOAD_WARN for v in loads):
        note = ("measurements marked * ran while other processes used more than "
                f"{LOAD_WARN:.0%} of this machine's CPU ('other' column); spinning MPI "
                "collectives slow down many-fold then, so rerun those on a quiet machine")
        notes.append(note)
        log(f"\nnote: {note}")
    results["config"]["other_load_definition"] = (
        "share of the machine's CPU used by processes outside this job during a measurement")

    if rank == 0 and args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
        log(f"\nresults written to {args.json}")

    if comm is not None:
        comm.Free()
    else:
        hvd.shutdown()
    return results


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--two-hosts" in argv:   # the two-host mode lives in its own script
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import hierarchical_bench
        return hierarchical_bench.main(argv)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--json", help="write the results as JSON to this file (rank 0)")
    p.add_argument("--sizes", nargs="+", type=parse_size, metavar="SIZE",
                   help="message sizes in bytes (suffixes K, M, G = KiB, MiB, GiB); "
                        "default 4K 16K ... 256M (--quick: 4K 256K 4M)")
    p.add_argument("--quick", action="store_true", help="few sizes and iterations (smoke test)")
    p.add_argument("--target-time", type=float,
                   help="seconds of timed calls per size and library (default 0.3, --quick 0.05)")
    p.add_argument("--rounds", type=int,
                   help="rounds, each a baseline phase and an hvdlite phase (default 3, --quick 1)")
    p.add_argument("--latency-iters", type=int, help="calls for the latency test (default 2000)")
    p.add_argument("--resnet-iters", type=int, help="iterations of the ResNet-50 test (default 10)")
    p.add_argument("--parts", default="sweep,latency,resnet50",
                   help="comma-separated parts to run: sweep, latency, resnet50, timeline "
                        "(default: the first three)")
    p.add_argument("--timeline-file", help="where the timeline part's trace goes (default: in "
                   "the temporary directory)")
    p.add_argument("--no-mpi", action="store_true", help="skip the mpi4py baseline (and gloo, which meets through it)")
    p.add_argument("--no-gloo", action="store_true", help="skip the torch gloo baseline")
    p.add_argument("--op", choices=("sum", "adasum"), default="sum",
                   help="adasum: the sweep also times hvdlite's Adasum (op=hvd.Adasum) right "
                        "after its Sum at each size, and prints their ratio (a power-of-two "
                        "number of ranks)")
    args = p.parse_args(argv)
    if args.sizes:
        args.sizes = [int(s) for s in args.sizes]
    args.parts = {x.strip() for x in args.parts.split(",") if x.strip()}
    unknown = args.parts - {"sweep", "latency", "resnet50", "timeline"}
    if unknown:
        p.error(f"unknown --parts {sorted(unknown)}; choose from sweep, latency, resnet50, timeline")
    run(args)


if __name__ == "__main__":
    main()
