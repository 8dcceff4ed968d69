"""hvdlite.policy.names: generated request names in call order, per process set."""

from hvdlite.policy.names import auto_name, group_names, reset_name_counters


def test_generated_names_count_per_kind_and_set():
    reset_name_counters()
    assert auto_name("allreduce") == "allreduce.noname.0"
    assert auto_name("allreduce") == "allreduce.noname.1"
    assert auto_name("allreduce", process_set=2) == "allreduce.noname.0"
    assert auto_name("broadcast") == "broadcast.noname.0"
    assert auto_name("allreduce", "given") == "given"
    reset_name_counters()
    assert auto_name("allreduce") == "allreduce.noname.0"


def test_own_counters_and_group_names():
    counters = {}
    assert auto_name("x", counters=counters) == "x.noname.0"
    assert auto_name("x", counters=counters) == "x.noname.1"
    assert group_names("grads", 3) == ["grads.0", "grads.1", "grads.2"]
    assert group_names(None, 3) is None
