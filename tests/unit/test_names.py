"""hvdlite.policy.names: generated request names in call order, per process set."""

import pytest

from hvdlite.policy.names import (auto_name, call_number, forget_process_set, group_names,
                                  kept_counters, parameter_names, reset_name_counters,
                                  restart_numbering)


def test_generated_names_count_per_kind_and_set():
    reset_name_counters()
    assert auto_name("allreduce") == "allreduce.noname.0"
    assert auto_name("allreduce") == "allreduce.noname.1"
    assert auto_name("allreduce", process_set=2) == "allreduce.noname.0"
    assert auto_name("broadcast") == "broadcast.noname.0"
    assert auto_name("allreduce", "given") == "given"
    reset_name_counters()
    assert auto_name("allreduce") == "allreduce.noname.0"


def test_numbering_starts_over_after_an_agreed_failure():
    """Note [unnamed names after a failure]: after restart_numbering(set, round) every kind
    of the set counts from 0 again, with the round in the name; other sets keep counting."""
    reset_name_counters()
    assert auto_name("allreduce") == "allreduce.noname.0"
    assert auto_name("allreduce") == "allreduce.noname.1"      # this rank: one ahead
    assert auto_name("broadcast") == "broadcast.noname.0"
    assert auto_name("allreduce", process_set=1) == "allreduce.noname.0"
    restart_numbering(0, 57)
    assert auto_name("allreduce") == "allreduce.noname.r57.0"
    assert auto_name("broadcast") == "broadcast.noname.r57.0"
    assert auto_name("allreduce", process_set=1) == "allreduce.noname.1"   # not that set
    restart_numbering(0, 57)    # the same failure met again (another waited request)
    restart_numbering(0, 12)    # an older one
    assert auto_name("allreduce") == "allreduce.noname.r57.1"
    restart_numbering(0, 80)
    assert auto_name("allreduce") == "allreduce.noname.r80.0"
    reset_name_counters()       # a new job: Horovod's names again
    assert auto_name("allreduce") == "allreduce.noname.0"


def test_counters_kept_elsewhere_start_over_too():
    reset_name_counters()
    graph = kept_counters()     # a TensorFlow graph's, a c10d group's
    assert call_number("c10d.0", 0, graph) == "0"
    assert call_number("c10d.0", 0, graph) == "1"
    assert call_number("c10d.0", 3, graph) == "0"
    restart_numbering(0, 9)
    assert call_number("c10d.0", 0, graph) == "r9.0"
    assert call_number("c10d.0", 3, graph) == "1"
    reset_name_counters()


def test_a_new_process_set_counts_from_zero_whatever_its_id_counted_before():
    reset_name_counters()
    assert auto_name("allreduce", process_set=2) == "allreduce.noname.0"
    restart_numbering(2, 500)   # a removed set's failure; the id comes back for a new set
    assert auto_name("allreduce", process_set=2) == "allreduce.noname.r500.0"
    forget_process_set(2)
    assert auto_name("allreduce", process_set=2) == "allreduce.noname.0"
    restart_numbering(2, 3)     # the new set's own rounds count from 0
    assert auto_name("allreduce", process_set=2) == "allreduce.noname.r3.0"
    reset_name_counters()


def test_own_counters_and_group_names():
    counters = {}
    assert auto_name("x", counters=counters) == "x.noname.0"
    assert auto_name("x", counters=counters) == "x.noname.1"
    assert group_names("grads", 3) == ["grads.0", "grads.1", "grads.2"]
    assert group_names(None, 3) is None


def test_errors_say_what_a_request_name_stands_for():
    from hvdlite.policy.names import with_labels
    e = with_labels(ValueError("request 'opt.1' has mismatched shapes"),
                    {"opt.0": "gradient of dense/bias", "opt.1": "gradient of dense/kernel"})
    assert str(e) == ("request 'opt.1' has mismatched shapes ('opt.1' is the gradient of "
                      "dense/kernel)")
    plain = KeyError("x")
    assert with_labels(plain, {"opt.1": "y"}) is plain


class _Param:
    def __init__(self, *shape):
        self.shape = shape


def test_parameter_names_generated_or_named_once_each():
    a, b, c = _Param(2), _Param(3, 1), _Param(4)
    assert parameter_names([[a, b], [c]], None, "allreduce") == {
        id(a): "allreduce.noname.0.0", id(b): "allreduce.noname.0.1",
        id(c): "allreduce.noname.1.0"}
    assert parameter_names([[a], [c]], [("w", a), ("v", c)], "x") == {id(a): "w", id(c): "v"}
    with pytest.raises(ValueError, match="sequence of tuples"):
        parameter_names([[a]], [a], "x")
    with pytest.raises(ValueError, match="unique. Found duplicates: w"):
        parameter_names([[a, c]], [("w", a), ("w", c)], "x")
    with pytest.raises(ValueError, match=r"not named \(shapes: \[3, 1\]\)"):
        parameter_names([[a, b]], [("w", a)], "x")


def test_named_entries_of_a_dict_are_sorted_by_key():
    from hvdlite.policy.names import named_entries
    assert named_entries({"b": 2, "a": 1}) == [("a", 1), ("b", 2)]
    assert named_entries({"b": 2, "a": 1}, prefix="m.") == [("m.a", 1), ("m.b", 2)]


def test_named_entries_of_an_iterable_keep_their_order():
    from hvdlite.policy.names import named_entries
    assert named_entries(iter([("w", 1), ("b", 2)])) == [("w", 1), ("b", 2)]
    assert named_entries([5, 6], prefix="p.") == [(None, 5), (None, 6)]   # unnamed stay so
    with pytest.raises(ValueError, match="invalid params of type"):
        named_entries(3)


def test_member_names_name_each_member_or_none():
    from hvdlite.policy.names import member_names
    assert member_names("g", 2) == ["g.0", "g.1"]
    assert member_names(None, 3) == [None, None, None]
    assert member_names(None, 0) == []


def test_variables_are_named_by_path_then_name_then_position():
    from types import SimpleNamespace
    from hvdlite.policy.names import variable_label
    assert variable_label(SimpleNamespace(path="dense/kernel", name="kernel"), 0) == "dense/kernel"
    assert variable_label(SimpleNamespace(name="kernel:0"), 1) == "kernel:0"
    assert variable_label(object(), 2) == "variable 2"
