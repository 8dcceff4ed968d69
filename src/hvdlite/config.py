"""Every setting hvdlite reads from the environment, documented once.

The table lives in the C++ core (csrc/engine/config.cc), which parses the values at ``init()``: each
``HVDLITE_*`` variable, the ``HOROVOD_*`` alias an existing Horovod job script may set (the
``HVDLITE_*`` name wins when both are set), its default and its meaning. A value that cannot
be parsed makes ``init()`` raise ``HvdliteInvalidArgumentError`` naming the variable.

``python -m hvdlite --settings`` prints the table as Markdown; docs/settings.md's table is that
output, written at build time (docs/hooks/settings_table.py; tests/test_docs.py builds it).
``hvdlite-run`` forwards every ``HVDLITE_*`` variable to all ranks.
"""
from typing import NamedTuple

from . import _core


class Setting(NamedTuple):
    name: str       # HVDLITE_*
    alias: str      # HOROVOD_* equivalent, "" when Horovod has none
    default: str
    meaning: str


def settings():
    """Every setting, in the order docs/settings.md documents them."""
    return [Setting(*row) for row in _core.settings_table()]


def read():
    """Parses the environment (raising ``HvdliteInvalidArgumentError`` naming a bad variable)
    and returns the values the Python layer acts on."""
    return _core.read_settings()


def markdown_table():
    lines = ["| variable | Horovod alias | default | |", "|---|---|---|---|"]
    for s in settings():
        alias = f"`{s.alias}`" if s.alias else ""
        default = s.default if s.default else "(unset)"
        lines.append(f"| `{s.name}` | {alias} | {default} | {s.meaning} |")
    return "\n".join(lines) + "\n"

