"""hvdlite.c10d.group_sets: the hvdlite process set behind a c10d group, added once per job
or found among the engine's, and a group's ranks."""

import pytest

import hvdlite
from hvdlite.c10d import group_sets
from hvdlite.exceptions import HvdliteInvalidArgumentError, HvdliteUnsupportedError


@pytest.fixture
def engine(monkeypatch):
    """A 4-rank engine holding set 1 = [0, 1]; ``added``: the sets added through it."""
    added = []


    def add(process_set):
        process_set.process_set_id = 2 + len(added)
        added.append(process_set.ranks)
        return process_set

    monkeypatch.setattr(hvdlite, "size", lambda: 4)
    monkeypatch.setattr(hvdlite._core, "process_set_ids", lambda: [0, 1])
    monkeypatch.setattr(hvdlite._core, "process_set_ranks",
                        lambda set_id: [[0, 1, 2, 3], [0, 1]][set_id])
    monkeypatch.setattr(group_sets, "add_process_set", add)
    group_sets.forget_sets()
    yield added
    group_sets.forget_sets()


def test_every_rank_is_the_global_set(engine):
    assert group_sets.process_set_for([0, 1, 2, 3]) is None and engine == []


def test_a_set_is_found_or_added_once(engine):
    found = group_sets.process_set_for([0, 1])
    assert found.process_set_id == 1 and engine == []
    added = group_sets.process_set_for([2, 3])
    assert added.process_set_id == 2 and engine == [[2, 3]]
    assert group_sets.process_set_for([2, 3]) is added and engine == [[2, 3]]
    assert group_sets.known_set_for([2, 3], "hvdlite") is added
    group_sets.forget_sets()
    assert group_sets.process_set_for([2, 3]) is not added and len(engine) == 2


def test_a_group_the_creator_never_saw_added_is_refused(engine):
    assert group_sets.known_set_for([0, 1, 2, 3], "hvdlite") is None
    with pytest.raises(HvdliteUnsupportedError,
                       match=r"new_group\(ranks=\[1, 2\], backend='hvdlite'\): hvdlite adds a "
                             r"process set on every rank, which needs the default group on "
                             r"hvdlite too"):
        group_sets.known_set_for([1, 2], "hvdlite")


def test_groups_made_by_their_members_only_are_refused():
    group_sets.check_every_rank_adds("3", "hvdlite")
    group_sets.check_every_rank_adds(None, "hvdlite")
    with pytest.raises(HvdliteUnsupportedError,
                       match=r"use_local_synchronization=True\) is not supported by the "
                             r"hvdlite backend"):
        group_sets.check_every_rank_adds("9f8e2a", "hvdlite")


def test_a_group_rank_as_the_jobs():
    assert group_sets.global_rank([1, 3], 1, "broadcast") == 3
    for bad in (-1, 2):
        with pytest.raises(HvdliteInvalidArgumentError,
                           match=f"broadcast: root rank {bad} is out of range for a group of 2"):
            group_sets.global_rank([1, 3], bad, "broadcast")
