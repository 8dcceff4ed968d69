"""hvdlite.policy.groups: Horovod's ``groups=`` rule (an int, or a list of lists)."""

import pytest

from hvdlite.policy.groups import check_groups, plan_groups, split_list


class T:
    """A stand-in tensor (hashable by identity, as torch tensors are)."""


def is_t(x):
    return isinstance(x, T)


def test_split_list_is_horovods():
    assert split_list(list(range(7)), 3) == [[0, 1, 2], [3, 4], [5, 6]]
    assert split_list([1, 2], 4) == [[1], [2]]          # empty chunks dropped
    assert split_list([], 2) == []


def test_int_groups_split_in_order():
    ps = [T() for _ in range(5)]
    assert plan_groups(ps, 2, is_t, "T") == [ps[:3], ps[3:]]


def test_listed_groups_then_the_rest_alone():
    ps = [T() for _ in range(4)]
    stranger = T()      # named in groups but has no gradient here: left out
    assert plan_groups(ps, [[ps[2], stranger, ps[0]]], is_t, "T") == [[ps[2], ps[0]], [ps[1]],
                                                                        [ps[3]]]


@pytest.mark.parametrize("bad", [0, -1, True, "2", 1.5])
def test_bad_groups_argument(bad):
    with pytest.raises(ValueError, match="positive integer or a list of lists of T"):
        check_groups(bad, "T")
    check_groups(None, "T")


def test_listed_groups_are_tensors_named_once():
    p = T()
    with pytest.raises(ValueError, match="groups must consist of T"):
        plan_groups([p], [[p, 3]], is_t, "T")
    with pytest.raises(ValueError, match="only appear once"):
        plan_groups([p], [[p], [p]], is_t, "T")


def test_num_groups_is_horovods_deprecated_groups():
    from hvdlite.policy.groups import groups_arg
    assert groups_arg(None, 0) is None
    assert groups_arg([[1]], 0) == [[1]]
    with pytest.warns(DeprecationWarning, match="num_groups"):
        assert groups_arg(None, 3) == 3
    with pytest.warns(DeprecationWarning):
        assert groups_arg(2, 3) == 2          # groups given wins


def test_every_rank_orders_the_members_as_rank_0():
    from hvdlite.policy.groups import rank0_positions
    sent = []

    def from_rank0(obj, root_rank, name):
        sent.append((root_rank, name))
        return ["b", "a", "c"]                 # what rank 0 broadcasts
    assert rank0_positions(["a", "b", "c"], from_rank0, "Opt") == {"b": 0, "a": 1, "c": 2}
    assert sent == [(0, "Opt.groups.order")]
    with pytest.raises(ValueError, match=r"Opt\(groups=...\): the parameter names differ"):
        rank0_positions(["a", "b", "x"], from_rank0, "Opt")


def test_members_apart_go_alone_first_then_the_rest_together():
    from hvdlite.policy.groups import apart_and_together
    calls = []

    def alone(i):
        calls.append(("alone", i))
        return f"a{i}"

    def together(indices):
        calls.append(("together", indices))
        return [f"t{i}" for i in indices]
    assert apart_and_together([False, True, False, True], alone, together) == \
        ["t0", "a1", "t2", "a3"]
    assert calls == [("alone", 1), ("alone", 3), ("together", [0, 2])]
    assert apart_and_together([True], alone, lambda idx: []) == ["a0"]  # an empty group too
