"""Horovod's import names, served by hvdlite when asked: an unmodified Horovod program runs.

    hvdlite-run --horovod -np 2 python train.py            # train.py: import horovod.torch as hvd
    mpirun -x HVDLITE_HOROVOD_NAMES=1 -np 2 python train.py

With the names installed, ``import horovod.torch as hvd`` gives the module ``hvdlite.torch``
itself (``horovod.torch is hvdlite.torch``), and so on for every module of :data:`MODULES`.
Nothing happens unless asked: without ``HVDLITE_HOROVOD_NAMES`` (or a call to
:func:`install`) ``import horovod`` finds whatever is installed, a real Horovod included. When
asked, hvdlite's names win over an installed Horovod, and a Horovod module hvdlite does not
serve fails to import with a message naming it (never half from one, half from the other).

This package holds names only: every module it serves is an existing hvdlite module.

Note [horovod names]
~~~~~~~~~~~~~~~~~~~~
How a plain ``mpirun -x HVDLITE_HOROVOD_NAMES=1 python train.py`` gets the names with no
other setting: the wheel (and an editable install) puts ``hvdlite_horovod_names.pth`` and
its hook ``_hvdlite_horovod_names.py`` (both in src/) at the top of site-packages. Python's
``site`` runs the .pth's one line at every start; the line reads ``os.environ`` and nothing
else unless the variable is set. When it is set, the hook puts a small finder first on
``sys.meta_path`` that imports nothing yet (site has not finished sys.path: importing hvdlite
there fails in a virtualenv whose numpy is in the system site-packages). At the first
``import horovod...`` that finder calls :func:`install_if_asked`, which reads the setting
with every other (so ``0`` and ``false`` mean no, a bad value is an error naming it) and
puts :data:`FINDER` first on ``sys.meta_path``; a program that never imports horovod pays
nothing.

A directory of ``horovod/...`` shim files on PYTHONPATH, set by hvdlite-run, would be the
other way; it needs the launcher (or a hand-made PYTHONPATH, which a job script may already
set for itself) on every route, where a variable travels through any ``mpirun -x``, srun or
batch script. A finder also serves each Horovod name as the hvdlite module itself, not a
copy that re-exports it: identity, monkeypatching and private names behave as in hvdlite.

The finder answers every ``horovod`` and ``horovod.*`` import. It never returns "not mine"
for such a name (which would let the next finder load a real Horovod module under hvdlite's
``horovod`` package, or a second copy of an hvdlite file under a Horovod name); a name it
does not serve raises ModuleNotFoundError saying so. Packages of Horovod that have no hvdlite
module of their own (``horovod``, ``horovod.common``, ``horovod.runner``...) are served as
empty packages, so that importing ``horovod.common.util`` never sets a stray ``util``
attribute on an hvdlite module; where a served module's parent is itself served by an
hvdlite module, the child is that module's own submodule of the same name (checked by
tests/unit/test_horovod_names.py).
"""

import importlib
import importlib.abc
import importlib.machinery
import sys

from hvdlite import config
from hvdlite.exceptions import HvdliteError, HvdliteInvalidArgumentError

VARIABLE = "HVDLITE_HOROVOD_NAMES"

# Horovod's module -> the hvdlite module that serves it (the same module object).
MODULES = {
    "horovod.torch": "hvdlite.torch",
    "horovod.torch.compression": "hvdlite.torch.compression",
    "horovod.torch.elastic": "hvdlite.torch.elastic",
    "horovod.torch.functions": "hvdlite.torch.functions",
    "horovod.torch.mpi_ops": "hvdlite.torch.mpi_ops",
    "horovod.torch.optimizer": "hvdlite.torch.optimizer",
    "horovod.torch.sync_batch_norm": "hvdlite.torch.sync_batch_norm",
    "horovod.tensorflow": "hvdlite.tensorflow",
    "horovod.tensorflow.compression": "hvdlite.tensorflow.compression",
    "horovod.tensorflow.elastic": "hvdlite.tensorflow.elastic",
    "horovod.tensorflow.functions": "hvdlite.tensorflow.functions",
    "horovod.tensorflow.mpi_ops": "hvdlite.tensorflow.mpi_ops",
    "horovod.tensorflow.sync_batch_norm": "hvdlite.tensorflow.sync_batch_norm",
    "horovod.tensorflow.util": "hvdlite.tensorflow.util",
    "horovod.tensorflow.keras": "hvdlite.tensorflow.keras",
    "horovod.tensorflow.keras.callbacks": "hvdlite.tensorflow.keras.callbacks",
    "horovod.tensorflow.keras.elastic": "hvdlite.tensorflow.keras.elastic",
    "horovod.keras": "hvdlite.keras",
    "horovod.keras.callbacks": "hvdlite.keras.callbacks",
    # Horovod's framework-free core lives in horovod.common; hvdlite's at the package's top.
    "horovod.common.basics": "hvdlite.basics",
    "horovod.common.elastic": "hvdlite.elastic",
    "horovod.common.exceptions": "hvdlite.exceptions",
    "horovod.common.process_sets": "hvdlite.process_sets",
    # horovod.common.util: the build queries (hvdlite.basics' own functions) and the helpers
    # Horovod's tests import (env, _cache, is_version_greater_equal_than, ...).
    "horovod.common.util": "hvdlite.helpers",
    "horovod.runner.util.threads": "hvdlite.runner.threads",
    "horovod.runner.common.util.env": "hvdlite.runner.env",
}

# Served as empty packages: the parents of MODULES' names that no hvdlite module serves.
PACKAGES = frozenset(name.rsplit(".", i)[0] for name in MODULES
                     for i in range(1, name.count(".") + 1)) - set(MODULES)

# Horovod modules (and their submodules) hvdlite has no counterpart for, and why.
NOT_SERVED = {
    "horovod.mxnet": "hvdlite has no MXNet adapter",
    "horovod.spark": "hvdlite has no Spark integration (start jobs with hvdlite-run or mpirun)",
    "horovod.ray": "hvdlite has no Ray integration (start jobs with hvdlite-run or mpirun)",
    "horovod.tensorflow.data": "hvdlite has no tf.data service",
    "horovod._keras": "this is Horovod's private Keras code; hvdlite.keras serves horovod.keras",
}

# Attributes of the empty packages that Horovod programs use, and what to do instead.
NOT_SERVED_ATTRIBUTES = {
    "horovod.run": "start the job with hvdlite-run -np N python script.py instead "
                   "(horovod.run, which runs a Python function at N ranks, is not served)",
}


def _why_not_served(name: str) -> str:
    for prefix, why in NOT_SERVED.items():
        if name == prefix or name.startswith(prefix + "."):
            return why
    return "hvdlite serves no module by that name"


class HorovodNames(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves ``horovod`` and ``horovod.*`` from hvdlite (first on ``sys.meta_path``)."""

    def __repr__(self):
        return "hvdlite's Horovod names"

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "horovod" and not fullname.startswith("horovod."):
            return None
        if fullname in MODULES:
            return importlib.machinery.ModuleSpec(fullname, self)
        if fullname in PACKAGES:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        raise ModuleNotFoundError(
            f"No module named {fullname!r}: {_why_not_served(fullname)}. hvdlite serves "
            f"Horovod's names ({VARIABLE}=1, hvdlite-run --horovod) for the modules listed in "
            f"hvdlite.horovod_names.MODULES (docs/horovod.md)", name=fullname)

    def create_module(self, spec):
        if spec.name in PACKAGES:
            return None   # the import system makes an empty module
        module = importlib.import_module(MODULES[spec.name])
        # module_from_spec is about to set the Horovod name's spec on the hvdlite module;
        # keep the module's own to give it back in exec_module.
        spec.loader_state = module.__spec__
        return module

    def exec_module(self, module):
        spec = module.__spec__
        if spec.loader_state is not None:
            module.__spec__ = spec.loader_state   # hvdlite's module keeps its own identity
            return
        name = spec.name
        module.__doc__ = (f"Horovod's package {name}, served by hvdlite "
                          f"(hvdlite.horovod_names): it holds only the modules hvdlite serves.")

        def __getattr__(attribute):
            qualified = f"{name}.{attribute}"
            why = NOT_SERVED_ATTRIBUTES.get(qualified, "hvdlite serves only the modules listed "
                                                       "in hvdlite.horovod_names.MODULES")
            raise AttributeError(f"module {name!r} has no attribute {attribute!r}: {why}")
        module.__getattr__ = __getattr__


FINDER = HorovodNames()


def install():
    """Serve Horovod's names from now on (idempotent); what ``HVDLITE_HOROVOD_NAMES=1`` does
    at start-up. Raises :class:`HvdliteError` if a real Horovod was imported already."""
    if FINDER in sys.meta_path:
        return
    loaded = sys.modules.get("horovod")
    if loaded is not None:
        raise HvdliteError(
            f"cannot serve Horovod's names: Horovod was imported already (from "
            f"{getattr(loaded, '__file__', None) or loaded!r}); install them before any "
            f"`import horovod`, e.g. with {VARIABLE}=1 or hvdlite-run --horovod")
    sys.meta_path.insert(0, FINDER)


def installed() -> bool:
    return FINDER in sys.meta_path


def install_if_asked():
    """Install the names when the settings ask (HVDLITE_HOROVOD_NAMES); the start-up hook
    calls it at the first ``import horovod...``."""
    try:
        asked = config.read()["horovod_names"]
    except HvdliteInvalidArgumentError as e:
        # At start-up an exception would only print a traceback and go on: say it in one line.
        # (init() raises the same error later.)
        sys.stderr.write(f"hvdlite: Horovod's names are not served: {e}\n")
        return
    if asked:
        install()
