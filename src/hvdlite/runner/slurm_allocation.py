"""The hosts and slots of the Slurm allocation ``hvdlite-run`` runs in (``salloc``, ``sbatch``).

Pure functions of the environment Slurm gives a job's shell or batch script::

    SLURM_JOB_NODELIST=node[01-03,07]      the allocation's nodes, in Slurm's hostlist syntax
    SLURM_TASKS_PER_NODE=2(x3),1           tasks per node, in that order ("2(x3)": 2, 2, 2)
    SLURM_NTASKS=7                         tasks asked for (-n); absent with only -N

Each node becomes a host with its tasks as slots, and ``-np`` defaults to SLURM_NTASKS (else
the slots' sum). Every inconsistency is an :class:`AllocationError` naming the variables.

Note [inside an srun step]
srun rewrites SLURM_NTASKS and SLURM_TASKS_PER_NODE for its step: ``srun -n 1 hvdlite-run``
in a 4-task allocation sees SLURM_NTASKS=1. In a step (SLURM_STEP_ID set, which a batch
script's own shell does not have) the slots come from the job's SLURM_JOB_CPUS_PER_NODE
over SLURM_CPUS_PER_TASK instead. A step of several tasks would run one hvdlite-run per
task, each starting its own job: that is refused.
"""

import re
from typing import List, Mapping, NamedTuple, Optional, Tuple

Hosts = List[Tuple[str, int]]


class AllocationError(Exception):
    pass


class Allocation(NamedTuple):
    job_id: str
    hosts: Hosts          # (node, slots), slots >= 1, in the allocation's order
    ntasks: int           # the default -np
    ntasks_from: str      # which variable gave ntasks, for messages
    described: str        # the variables it was read from, for messages and --dry-run

    @property
    def slots(self) -> int:
        return sum(n for _, n in self.hosts)


def _split_top_level(text: str, what: str) -> List[str]:
    """Split at the commas outside brackets."""
    items, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c == "[":
            depth += 1
            if depth > 1:
                raise AllocationError(f"{what}: nested '[' in {text!r}")
        elif c == "]":
            depth -= 1
            if depth < 0:
                raise AllocationError(f"{what}: ']' without '[' in {text!r}")
        elif c == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    if depth:
        raise AllocationError(f"{what}: '[' without ']' in {text!r}")
    items.append(text[start:])
    return [item.strip() for item in items if item.strip()]


def _expand_range(spec: str, text: str, what: str) -> List[str]:
    """'01-03,07' -> ['01', '02', '03', '07'] (a leading zero keeps the width)."""
    out = []
    for part in spec.split(","):
        lo, sep, hi = part.strip().partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise AllocationError(f"{what}: bad range {part!r} in {text!r}")
        if not sep:
            out.append(lo)
            continue
        if int(hi) < int(lo):
            raise AllocationError(f"{what}: range {part!r} runs backwards in {text!r}")
        width = len(lo) if lo.startswith("0") else 0
        out += [str(n).zfill(width) for n in range(int(lo), int(hi) + 1)]
    return out


def expand_hostlist(text: str, what: str = "SLURM_JOB_NODELIST") -> List[str]:
    """Slurm's hostlist syntax: ``node[01-03,07],login1`` -> node01, node02, node03, node07,
    login1; several bracket groups in one name multiply (``r[1-2]n[1-2]``: r1n1, r1n2, r2n1,
    r2n2)."""
    hosts = []
    for item in _split_top_level(text, what):
        names = [""]
        for literal, spec in re.findall(r"([^\[]*)(?:\[([^\]]*)\])?", item):
            names = [n + literal for n in names]
            if spec:
                names = [n + v for n in names for v in _expand_range(spec, item, what)]
        hosts += names
    return hosts


def expand_counts(text: str, what: str = "SLURM_TASKS_PER_NODE") -> List[int]:
    """Slurm's per-node counts: ``2(x3),1`` -> [2, 2, 2, 1]."""
    counts = []
    for item in text.split(","):
        m = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", item)
        if not m:
            raise AllocationError(f"{what}={text!r}: expected counts like '2(x3),1', "
                                  f"not {item!r}")
        counts += [int(m.group(1))] * int(m.group(2) or 1)
    return counts


def _positive(environ: Mapping[str, str], name: str) -> Optional[int]:
    value = environ.get(name, "").strip()
    if not value:
        return None
    if not value.isdigit() or int(value) < 1:
        raise AllocationError(f"{name}={value!r} is not a positive whole number")
    return int(value)


def from_environment(environ: Mapping[str, str]) -> Optional[Allocation]:
    """The allocation this process runs in, or None outside one (no SLURM_JOB_ID)."""
    job_id = environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID")
    if not job_id:
        return None
    nodes_var = "SLURM_JOB_NODELIST" if "SLURM_JOB_NODELIST" in environ else "SLURM_NODELIST"
    nodelist = environ.get(nodes_var, "").strip()
    if not nodelist or nodelist == "(null)":
        raise AllocationError(f"Slurm job {job_id} has no usable hosts: {nodes_var} is "
                              f"{'empty' if not nodelist else repr(nodelist)}; run inside "
                              f"the allocation's shell (salloc) or batch script (sbatch), or "
                              f"give the hosts with -H / --hostfile")
    hosts = expand_hostlist(nodelist, nodes_var)
    step = environ.get("SLURM_STEP_ID", "")
    if step:   # Note [inside an srun step]
        step_tasks = _positive(environ, "SLURM_STEP_NUM_TASKS") or _positive(environ, "SLURM_NTASKS")
        if step_tasks and step_tasks > 1:
            rank = environ.get("SLURM_PROCID", "?")
            raise AllocationError(
                f"hvdlite-run runs as task {rank} of {step_tasks} of srun step {job_id}.{step}: "
                f"each task would start a job of its own. Run hvdlite-run once: in the batch "
                f"script or salloc's shell (or with srun -n 1), or use srun alone, without "
                f"hvdlite-run")
        counts_var, counts_text = "SLURM_JOB_CPUS_PER_NODE", environ.get("SLURM_JOB_CPUS_PER_NODE", "")
        per_task = _positive(environ, "SLURM_CPUS_PER_TASK") or 1
    else:
        counts_var = "SLURM_TASKS_PER_NODE"
        counts_text = environ.get("SLURM_TASKS_PER_NODE", "")
        per_task = 1
        if not counts_text.strip():
            counts_var, counts_text = "SLURM_JOB_CPUS_PER_NODE", environ.get("SLURM_JOB_CPUS_PER_NODE", "")
            per_task = _positive(environ, "SLURM_CPUS_PER_TASK") or 1
    if not counts_text.strip():
        raise AllocationError(f"Slurm job {job_id} sets {nodes_var}={nodelist} but neither "
                              f"SLURM_TASKS_PER_NODE nor SLURM_JOB_CPUS_PER_NODE: cannot tell "
                              f"how many ranks each host takes; give -H host:slots,...")
    counts = [n // per_task for n in expand_counts(counts_text, counts_var)]
    if len(counts) != len(hosts):
        raise AllocationError(f"Slurm job {job_id}: {nodes_var}={nodelist} names {len(hosts)} "
                              f"host(s) but {counts_var}={counts_text} gives {len(counts)} "
                              f"count(s)")
    described = f"{nodes_var}={nodelist}, {counts_var}={counts_text}" + (
        f", SLURM_CPUS_PER_TASK={per_task}" if per_task > 1 else "")
    usable = [(h, n) for h, n in zip(hosts, counts) if n > 0]
    if not usable:
        raise AllocationError(f"Slurm job {job_id} has no usable hosts: {described} leaves no "
                              f"host a slot; ask for tasks (salloc -n N / #SBATCH --ntasks=N)")
    ntasks, ntasks_from = None, "the slots' sum"
    if not step:
        for name in ("SLURM_NTASKS", "SLURM_NPROCS"):
            ntasks = _positive(environ, name)
            if ntasks is not None:
                ntasks_from = f"{name}={ntasks}"
                break
    total = sum(n for _, n in usable)
    if ntasks is None:
        ntasks = total
    elif ntasks > total:
        raise AllocationError(f"Slurm job {job_id}: {ntasks_from} but {described} gives "
                              f"only {total} slot(s)")
    return Allocation(job_id, usable, ntasks, ntasks_from, described)
