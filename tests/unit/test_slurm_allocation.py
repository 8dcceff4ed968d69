"""hvdlite.runner.slurm_allocation: Slurm's hostlist and per-node counts, the allocation a
job's shell describes, and each inconsistent environment's error."""

import pytest

from hvdlite.runner.slurm_allocation import (Allocation, AllocationError, expand_counts,
                                             expand_hostlist, from_environment)


@pytest.mark.parametrize("text,hosts", [
    ("vm", ["vm"]),
    ("node[01-03,07]", ["node01", "node02", "node03", "node07"]),
    ("node[8-11]", ["node8", "node9", "node10", "node11"]),
    ("node[098-101]", ["node098", "node099", "node100", "node101"]),
    ("a[1-2],login1,b[3]", ["a1", "a2", "login1", "b3"]),
    ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
    ("gpu[1-2]-ib", ["gpu1-ib", "gpu2-ib"]),
    ("host-1.example.com,host-2.example.com", ["host-1.example.com", "host-2.example.com"]),
])
def test_hostlists_expand_as_slurm_writes_them(text, hosts):
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize("text,message", [
    ("node[01-03", r"'\[' without '\]'"),
    ("node01-03]", r"'\]' without '\['"),
    ("node[[1-2]]", r"nested '\['"),
    ("node[a-c]", r"bad range 'a-c'"),
    ("node[5-3]", r"range '5-3' runs backwards"),
])
def test_a_malformed_hostlist_is_named(text, message):
    with pytest.raises(AllocationError, match=r"SLURM_JOB_NODELIST: " + message):
        expand_hostlist(text)


@pytest.mark.parametrize("text,counts", [
    ("4", [4]),
    ("2(x3),1", [2, 2, 2, 1]),
    ("1,2(x2)", [1, 2, 2]),
])
def test_per_node_counts_expand(text, counts):
    assert expand_counts(text) == counts


def test_malformed_counts_are_named():
    with pytest.raises(AllocationError, match=r"SLURM_TASKS_PER_NODE='2\(3\)': expected counts"):
        expand_counts("2(3)")


def _job(**variables):
    env = {"SLURM_JOB_ID": "42"}
    env.update(variables)
    return env


def test_outside_an_allocation_there_is_none():
    assert from_environment({"PATH": "/bin"}) is None


def test_salloc_n_gives_hosts_slots_and_np():
    alloc = from_environment(_job(SLURM_JOB_NODELIST="node[01-03,07]",
                                  SLURM_TASKS_PER_NODE="2(x3),1", SLURM_NTASKS="7"))
    assert alloc == Allocation("42", [("node01", 2), ("node02", 2), ("node03", 2), ("node07", 1)],
                               7, "SLURM_NTASKS=7",
                               "SLURM_JOB_NODELIST=node[01-03,07], SLURM_TASKS_PER_NODE=2(x3),1")
    assert alloc.slots == 7


def test_without_ntasks_np_is_the_slots_sum():
    alloc = from_environment(_job(SLURM_JOB_NODELIST="a[1-2]", SLURM_TASKS_PER_NODE="3(x2)"))
    assert (alloc.ntasks, alloc.ntasks_from) == (6, "the slots' sum")


def test_older_slurm_names_are_read():
    alloc = from_environment({"SLURM_JOBID": "7", "SLURM_NODELIST": "h1",
                              "SLURM_TASKS_PER_NODE": "2", "SLURM_NPROCS": "2"})
    assert (alloc.job_id, alloc.hosts, alloc.ntasks) == ("7", [("h1", 2)], 2)


def test_without_tasks_per_node_the_cpus_per_task_divide_the_cpus():
    alloc = from_environment(_job(SLURM_JOB_NODELIST="a[1-2]", SLURM_JOB_CPUS_PER_NODE="8(x2)",
                                  SLURM_CPUS_PER_TASK="4"))
    assert alloc.hosts == [("a1", 2), ("a2", 2)] and alloc.ntasks == 4


def test_inside_a_one_task_step_the_jobs_cpus_count():
    # Note [inside an srun step]: srun -n 1 rewrote SLURM_NTASKS and SLURM_TASKS_PER_NODE.
    alloc = from_environment(_job(SLURM_JOB_NODELIST="vm", SLURM_JOB_CPUS_PER_NODE="4",
                                  SLURM_TASKS_PER_NODE="1", SLURM_NTASKS="1",
                                  SLURM_STEP_ID="0", SLURM_STEP_NUM_TASKS="1"))
    assert alloc.hosts == [("vm", 4)] and alloc.ntasks == 4


def test_a_step_of_several_tasks_is_refused():
    with pytest.raises(AllocationError, match=r"hvdlite-run runs as task 1 of 4 of srun step "
                                              r"42.0: each task would start a job of its own"):
        from_environment(_job(SLURM_JOB_NODELIST="vm", SLURM_JOB_CPUS_PER_NODE="4",
                              SLURM_STEP_ID="0", SLURM_STEP_NUM_TASKS="4", SLURM_PROCID="1"))


@pytest.mark.parametrize("nodelist", ["", "(null)"])
def test_an_allocation_without_hosts_is_named(nodelist):
    with pytest.raises(AllocationError, match=r"Slurm job 42 has no usable hosts: "
                                              r"SLURM_JOB_NODELIST is "):
        from_environment(_job(SLURM_JOB_NODELIST=nodelist, SLURM_TASKS_PER_NODE="2"))


def test_an_allocation_whose_hosts_have_no_slots_is_named():
    with pytest.raises(AllocationError, match=r"no usable hosts: SLURM_JOB_NODELIST=a\[1-2\], "
                                              r"SLURM_JOB_CPUS_PER_NODE=2\(x2\), "
                                              r"SLURM_CPUS_PER_TASK=4 leaves no host a slot"):
        from_environment(_job(SLURM_JOB_NODELIST="a[1-2]", SLURM_JOB_CPUS_PER_NODE="2(x2)",
                              SLURM_CPUS_PER_TASK="4"))


def test_counts_that_do_not_match_the_hosts_are_named():
    with pytest.raises(AllocationError, match=r"SLURM_JOB_NODELIST=a\[1-3\] names 3 host\(s\) "
                                              r"but SLURM_TASKS_PER_NODE=2\(x2\) gives 2"):
        from_environment(_job(SLURM_JOB_NODELIST="a[1-3]", SLURM_TASKS_PER_NODE="2(x2)"))


def test_no_counts_at_all_is_named():
    with pytest.raises(AllocationError, match="neither SLURM_TASKS_PER_NODE nor "
                                              "SLURM_JOB_CPUS_PER_NODE"):
        from_environment(_job(SLURM_JOB_NODELIST="a1"))


def test_more_tasks_than_slots_is_named():
    with pytest.raises(AllocationError, match=r"SLURM_NTASKS=5 but .* gives only 4 slot"):
        from_environment(_job(SLURM_JOB_NODELIST="a1", SLURM_TASKS_PER_NODE="4",
                              SLURM_NTASKS="5"))


def test_a_bad_number_is_named():
    with pytest.raises(AllocationError, match=r"SLURM_NTASKS='x' is not a positive whole number"):
        from_environment(_job(SLURM_JOB_NODELIST="a1", SLURM_TASKS_PER_NODE="4",
                              SLURM_NTASKS="x"))
