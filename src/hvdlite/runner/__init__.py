"""The ``hvdlite-run`` launcher (also ``python -m hvdlite.runner``); see :mod:`.launch`."""

from .launch import main

__all__ = ["main"]
