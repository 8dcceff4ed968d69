"""hvdlite.c10d.startup: the engine is started once, stopped only by the default group of
the module that started it, a failing rank's traceback stays visible; ``hvdlite://`` URLs,
the store's address shared through the engine (ranks as threads), and when
init_process_group gets ``hvdlite://``."""

import io
import sys

import pytest

import hvdlite
from hvdlite.c10d import group_sets, startup
from hvdlite.exceptions import HvdliteInvalidArgumentError


@pytest.fixture
def engine(monkeypatch):
    """A fake engine: ``calls`` logs init/shutdown."""
    calls, state = [], {"up": False}

    def init(process_sets=None):
        calls.append(("init", process_sets))
        state["up"] = True

    def shutdown():
        calls.append(("shutdown",))
        state["up"] = False

    monkeypatch.setattr(hvdlite, "init", init)
    monkeypatch.setattr(hvdlite, "shutdown", shutdown)
    monkeypatch.setattr(hvdlite, "is_initialized", lambda: state["up"])
    monkeypatch.setattr(hvdlite, "rank", lambda: 1)
    monkeypatch.setattr(hvdlite, "size", lambda: 2)
    monkeypatch.setattr(startup, "_started_engine", False)
    monkeypatch.setattr(startup, "_default_group", None)
    return calls, state


def test_the_engine_started_here_is_stopped_by_the_default_group_only(engine, monkeypatch):
    calls, _ = engine
    monkeypatch.setattr(group_sets, "_sets_by_ranks", {(0,): "set"})
    startup.start_engine()
    startup.start_engine()
    assert calls == [("init", "dynamic")]
    default, other = object(), object()
    startup.adopt_default_group(default, 1, 2)
    startup.shutdown_if_default(other)
    assert calls == [("init", "dynamic")]
    startup.shutdown_if_default(default)
    assert calls == [("init", "dynamic"), ("shutdown",)] and group_sets._sets_by_ranks == {}
    startup.shutdown_if_default(default)   # once
    assert len(calls) == 2


def test_an_engine_started_by_hvdlite_init_is_joined_and_left_running(engine):
    calls, state = engine
    state["up"] = True
    startup.start_engine()
    group = object()
    startup.adopt_default_group(group, 1, 2)
    startup.shutdown_if_default(group)
    assert calls == [] and state["up"]


def test_the_default_groups_launch_must_be_the_engines(engine):
    with pytest.raises(HvdliteInvalidArgumentError,
                       match=r"init_process_group\('hvdlite'\): torch.distributed was given "
                             r"rank 0 of 4, but hvdlite's engine runs rank 1 of 2"):
        startup.adopt_default_group(object(), 0, 4)
    assert startup._default_group is None


def test_a_failing_ranks_traceback_goes_to_the_real_stderr(monkeypatch):
    seen = []
    monkeypatch.setattr(sys, "excepthook", lambda *args: seen.append(sys.stderr))
    startup.show_errors_before_abort()
    hook = sys.excepthook
    startup.show_errors_before_abort()      # wrapped once
    assert sys.excepthook is hook
    buffer = io.StringIO()
    monkeypatch.setattr(sys, "stderr", buffer)
    hook(ValueError, ValueError("x"), None)
    assert seen == [sys.__stderr__] and sys.stderr is buffer


def test_a_url_may_repeat_the_engines_rank_and_size_only(monkeypatch):
    monkeypatch.setattr(hvdlite, "rank", lambda: 1)
    monkeypatch.setattr(hvdlite, "size", lambda: 2)
    startup.check_url("hvdlite://")
    startup.check_url("hvdlite://?rank=1&world_size=2")
    startup.check_url("hvdlite://?rank=-1")
    with pytest.raises(HvdliteInvalidArgumentError,
                       match=r"world_size=3 was given but hvdlite's engine runs world_size 2; "
                             r"leave world_size out"):
        startup.check_url("hvdlite://?world_size=3")


def test_the_store_listens_on_loopback_where_every_rank_is_local(monkeypatch):
    monkeypatch.setattr(hvdlite, "size", lambda: 2)
    monkeypatch.setattr(hvdlite, "local_size", lambda: 2)
    assert startup.store_host() == "127.0.0.1"
    monkeypatch.setattr(hvdlite, "local_size", lambda: 1)
    assert startup.store_host() != "127.0.0.1"


def test_rank_0s_address_reaches_every_rank(ranks, monkeypatch):
    fake = ranks(3)
    monkeypatch.setattr(startup, "ops", fake)
    monkeypatch.setattr(hvdlite, "rank", fake.rank)
    got = fake.run_ranks(lambda r: startup.share_address("node-7:29500" if r == 0 else ""))
    assert got == [("node-7", 29500)] * 3
    assert [c[2] for c in fake.calls] == [["c10d.rendezvous"]] * 3


def test_which_backend_strings_put_cpu_tensors_on_hvdlite():
    on = ["hvdlite", "HVDLITE", "cpu:hvdlite", "cpu:hvdlite,cuda:nccl", "cuda:nccl, cpu:hvdlite"]
    off = [None, "gloo", "cuda:hvdlite", "cpu:gloo,cuda:hvdlite"]
    assert [startup.hvdlite_on_cpu(b) for b in on] == [True] * len(on)
    assert [startup.hvdlite_on_cpu(b) for b in off] == [False] * len(off)


def test_init_process_group_gets_hvdlite_rendezvous_without_torchrun_variables():
    needs = startup.needs_hvdlite_rendezvous
    assert needs({"backend": "hvdlite"}, {})
    assert needs({"backend": "hvdlite", "init_method": None}, {"MASTER_ADDR": "h"})
    # An sbatch script written for torchrun: MASTER_ADDR / MASTER_PORT without RANK /
    # WORLD_SIZE (torch's env:// would stop at "environment variable RANK expected").
    assert needs({"backend": "hvdlite"}, {"MASTER_ADDR": "h", "MASTER_PORT": "1"})
    assert needs({"backend": "hvdlite"}, {"MASTER_ADDR": "h", "MASTER_PORT": "1", "RANK": "0"})
    assert not needs({"backend": "hvdlite"}, {"MASTER_ADDR": "h", "MASTER_PORT": "1",
                                              "RANK": "0", "WORLD_SIZE": "2"})
    assert not needs({"backend": "hvdlite", "init_method": "env://"}, {})
    assert not needs({"backend": "hvdlite", "store": object()}, {})
    assert not needs({"backend": "gloo"}, {})


def test_the_rendezvous_url_carries_the_store_address_rank_and_size_that_are_set():
    assert startup.rendezvous_url({}) == "hvdlite://"
    assert startup.rendezvous_url({"RANK": "1", "MASTER_ADDR": "h"}) == "hvdlite://?rank=1"
    assert startup.rendezvous_url({"WORLD_SIZE": "2"}) == "hvdlite://?world_size=2"
    assert startup.rendezvous_url({"MASTER_ADDR": "node1", "MASTER_PORT": "29500",
                                   "RANK": "0"}) == "hvdlite://node1:29500?rank=0"
    assert startup.rendezvous_url({"MASTER_ADDR": "::1", "MASTER_PORT": "29500"}) == \
        "hvdlite://[::1]:29500"


def test_only_the_url_places_the_store():
    # A plain hvdlite:// ignores MASTER_ADDR / MASTER_PORT (c10d_bench sets them for gloo).
    assert startup.store_address("hvdlite://") is None
    assert startup.store_address("hvdlite://?rank=1") is None
    assert startup.store_address("hvdlite://node1:29500?rank=1") == ("node1", 29500)
    assert startup.store_address("hvdlite://[::1]:29500") == ("::1", 29500)
    for url in ("hvdlite://node1", "hvdlite://node1:99999", "hvdlite://node1:x"):
        with pytest.raises(HvdliteInvalidArgumentError, match="expected hvdlite://HOST:PORT"):
            startup.store_address(url)


def test_master_addr_and_port_place_the_store():
    assert startup.master_address({}) is None
    assert startup.master_address({"MASTER_ADDR": "node1"}) is None
    assert startup.master_address({"MASTER_ADDR": "node1", "MASTER_PORT": "29500"}) == \
        ("node1", 29500)
    for port in ("", "x", "0", "70000"):
        with pytest.raises(HvdliteInvalidArgumentError,
                           match=r"MASTER_ADDR='node1' / MASTER_PORT=.* do not make an address "
                                 r"for rank 0's store"):
            startup.master_address({"MASTER_ADDR": "node1", "MASTER_PORT": port})


def test_this_hosts_names_are_told_from_others():
    import socket
    assert startup.is_this_host("127.0.0.1") and startup.is_this_host("localhost")
    assert startup.is_this_host(socket.gethostname())
    assert not startup.is_this_host("192.0.2.1")           # TEST-NET-1: nobody's
    assert not startup.is_this_host("no-such-host.invalid")


def test_a_master_addr_that_is_not_rank_0s_host_fails_every_rank(ranks, monkeypatch):
    fake = ranks(2)
    monkeypatch.setattr(startup, "ops", fake)
    monkeypatch.setattr(hvdlite, "rank", fake.rank)

    def rank(r):
        shared = f"{startup.NOT_RANK_0S_HOST}node9:node1" if r == 0 else ""
        with pytest.raises(HvdliteInvalidArgumentError,
                           match=r"MASTER_ADDR=node9 \(the store's host\) is not the host "
                                 r"of rank 0 \(node1\)"):
            startup.share_address(shared)
        return "raised"
    assert fake.run_ranks(rank) == ["raised", "raised"]
