"""hvdlite.process_sets: the rules on a ``process_set=`` argument that need no core (the set's
size, None for the global set, whether a function takes one)."""

import pytest

from hvdlite import process_sets
from hvdlite.process_sets import (ProcessSet, global_process_set, none_if_global,
                                  process_set_kwargs, set_size)


def test_set_size_asks_the_set_or_the_job(monkeypatch):
    monkeypatch.setattr(process_sets._core, "size", lambda: 6)
    assert set_size() == 6
    monkeypatch.setattr(ProcessSet, "size", lambda self: len(self.ranks))
    assert set_size(ProcessSet([0, 2])) == 2


def test_the_global_set_is_named_by_none():
    assert none_if_global(None) is None
    assert none_if_global(global_process_set) is None
    added = ProcessSet([0, 1])
    added.process_set_id = 3
    assert none_if_global(added) is added
    same_as_global = ProcessSet([0, 1])
    same_as_global.process_set_id = 0
    assert none_if_global(same_as_global) is None


def test_process_set_kwargs_only_where_the_function_takes_one():
    def takes(x, process_set=None):
        return x

    def refuses(x):
        return x
    assert process_set_kwargs(refuses, None) == {}
    added = ProcessSet([0])
    assert process_set_kwargs(takes, added) == {"process_set": added}
    with pytest.raises(NotImplementedError, match="does not take process_set"):
        process_set_kwargs(refuses, added)
