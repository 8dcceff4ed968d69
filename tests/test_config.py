"""Settings: one table in the core (csrc/engine/config.cc), HOROVOD_* aliases, the HVDLITE_* name
winning, unparsable values failing init() with the variable's name, and the docs' settings page
generated from the code (tests/test_docs.py builds it)."""
import importlib.util
import os
import re

import pytest

import hvdlite as hvd
from hvdlite import config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

HOROVOD_ALIASES = [
    "HOROVOD_FUSION_THRESHOLD", "HOROVOD_CYCLE_TIME", "HOROVOD_CACHE_CAPACITY",
    "HOROVOD_TIMELINE", "HOROVOD_TIMELINE_MARK_CYCLES", "HOROVOD_STALL_CHECK_TIME_SECONDS",
    "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "HOROVOD_AUTOTUNE", "HOROVOD_AUTOTUNE_LOG",
    "HOROVOD_LOG_LEVEL",
]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for s in config.settings():
        monkeypatch.delenv(s.name, raising=False)
        if s.alias:
            monkeypatch.delenv(s.alias, raising=False)


def test_docs_settings_page_is_generated_from_the_code_table():
    # The MkDocs hook that writes the table into docs/settings.md at build time.
    spec = importlib.util.spec_from_file_location(
        "settings_table", os.path.join(ROOT, "docs", "hooks", "settings_table.py"))
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    page = open(os.path.join(ROOT, "docs", "settings.md")).read()
    assert page.count(hook.MARKER) == 1, "docs/settings.md has lost its settings table marker"
    built = hook.with_settings_table(page)
    assert config.markdown_table() in built and hook.MARKER not in built
    assert "| `HVDLITE_" not in page, "docs/settings.md holds a pasted table; the hook writes it"


def test_every_setting_is_documented_once():
    names = [s.name for s in config.settings()]
    assert len(names) == len(set(names)) and all(n.startswith("HVDLITE_") for n in names)
    aliases = [s.alias for s in config.settings() if s.alias]
    assert len(aliases) == len(set(aliases)) and all(a.startswith("HOROVOD_") for a in aliases)
    assert set(HOROVOD_ALIASES) <= set(aliases), set(HOROVOD_ALIASES) - set(aliases)
    assert all(s.meaning for s in config.settings())


def test_defaults():
    v = config.read()
    assert v["fusion_threshold"] == 64 << 20 and v["cycle_time_ms"] == 0.25
    assert v["stall_check_s"] == 60 and v["stall_shutdown_s"] == 0
    assert v["timeline"] == "" and not v["autotune"] and v["abort_on_error"]


@pytest.mark.parametrize("alias,value,key,expected", [
    ("HOROVOD_FUSION_THRESHOLD", "1048576", "fusion_threshold", 1 << 20),
    ("HOROVOD_CYCLE_TIME", "5", "cycle_time_ms", 5.0),
    ("HOROVOD_CACHE_CAPACITY", "0", "cache_capacity", 0),
    ("HOROVOD_TIMELINE", "/tmp/t.json", "timeline", "/tmp/t.json"),
    ("HOROVOD_TIMELINE_MARK_CYCLES", "1", "timeline_mark_cycles", True),
    ("HOROVOD_STALL_CHECK_TIME_SECONDS", "7", "stall_check_s", 7.0),
    ("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "9", "stall_shutdown_s", 9.0),
    ("HOROVOD_AUTOTUNE", "true", "autotune", True),
    ("HOROVOD_AUTOTUNE_LOG", "/tmp/a.csv", "autotune_log", "/tmp/a.csv"),
    ("HOROVOD_LOG_LEVEL", "DEBUG", "debug", True),
])
def test_horovod_alias_is_read(monkeypatch, alias, value, key, expected):
    monkeypatch.setenv(alias, value)
    assert config.read()[key] == expected


def test_hvdlite_name_wins_over_the_alias(monkeypatch):
    monkeypatch.setenv("HOROVOD_FUSION_THRESHOLD", "not a number")  # never parsed
    monkeypatch.setenv("HVDLITE_FUSION_THRESHOLD", "4096")
    assert config.read()["fusion_threshold"] == 4096


def test_unwritable_timeline_fails_init(monkeypatch, tmp_path):
    monkeypatch.setenv("HVDLITE_TIMELINE", str(tmp_path / "missing" / "t.json"))
    with pytest.raises(hvd.HvdliteInvalidArgumentError, match="HVDLITE_TIMELINE=.*cannot write"):
        hvd.init()
    assert not hvd.is_initialized()


@pytest.mark.parametrize("var,value", [
    ("HVDLITE_FUSION_THRESHOLD", "64MB"),
    ("HOROVOD_FUSION_THRESHOLD", "-1"),
    ("HVDLITE_CYCLE_TIME", "fast"),
    ("HVDLITE_TIMELINE_MARK_CYCLES", "maybe"),
    ("HOROVOD_AUTOTUNE", "2"),
    ("HOROVOD_LOG_LEVEL", "verbose"),
    ("HVDLITE_ABORT_ON_ERROR", "no thanks"),
])
def test_unparsable_value_fails_init_naming_the_variable(monkeypatch, var, value):
    monkeypatch.setenv(var, value)
    # init() parses the settings before it starts MPI, so this process stays MPI-free.
    with pytest.raises(hvd.HvdliteInvalidArgumentError, match=f"{var}='{re.escape(value)}'"):
        hvd.init()
    assert not hvd.is_initialized()
