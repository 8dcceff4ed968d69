"""``hvdlite-run --check-build`` / ``python -m hvdlite --check-build``: how hvdlite was built,
and the MPI library and device libraries it finds here.

Framework versions come from package metadata, so the check does not import torch or
TensorFlow (seconds each).
"""

import importlib.metadata
import importlib.util
import os
from typing import List, Optional, Tuple

from hvdlite.convert import tf_op_library

# (shown name, import name, distributions that provide it, hvdlite module for it)
FRAMEWORKS = (
    ("PyTorch", "torch", ("torch",), "hvdlite.torch"),
    ("TensorFlow", "tensorflow", ("tensorflow", "tensorflow-cpu", "tensorflow-macos"),
     "hvdlite.tensorflow"),
    ("Keras", "keras", ("keras",), "hvdlite.tensorflow.keras"),
)


def version() -> str:
    try:
        return importlib.metadata.version("hvdlite")
    except importlib.metadata.PackageNotFoundError:
        from hvdlite import __version__   # a source tree on PYTHONPATH
        return __version__


def _framework_version(module: str, distributions) -> Optional[str]:
    spec = importlib.util.find_spec(module)
    # A folder named like the framework on sys.path (e.g. tests/tensorflow) is found as a
    # namespace package, with no origin: that is not the framework.
    if spec is None or spec.origin is None:
        return None
    for dist in distributions:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "version unknown"


def _mpi() -> Tuple[List[str], bool, str]:
    """(lines about the MPI library hvdlite loads, NCCL loadable, problem or '')."""
    try:
        from hvdlite import _core
        info = dict(_core.build_info())
    except Exception as e:
        return [], False, f"hvdlite's core is not built or cannot load: {type(e).__name__}: {e}"
    from hvdlite import mpi_library
    try:
        mpi = mpi_library.load()
    except Exception as e:  # noqa: BLE001 - reported: what was searched and what to do
        return [f"    C++ runtime:   {_libstdcxx(info)}"], bool(info.get("nccl")), \
            f"{type(e).__name__}: {e}"
    from .dialect import UnknownMPI, from_version_text
    library = " ".join(mpi["version"].split()) or "unknown"
    try:
        flavour = from_version_text(mpi["version"]).describe()
    except UnknownMPI:
        flavour = "an MPI hvdlite-run does not know (use --mpi-args)"
    ulfm = ("yes (elastic jobs survive a lost rank)" if mpi["fault_tolerant"]
            else "no (a lost rank ends the job)")
    lines = [f"    library:       {mpi['library']}",
             f"    found by:      {mpi['reason']}",
             f"    ABI family:    {mpi_library.FAMILY_NAMES[mpi['abi']]} ({mpi['abi']} plugin: "
             f"{mpi['plugin']})",
             f"    version:       {library[:160]}",
             f"    flavour:       {flavour}",
             f"    ULFM:          {ulfm}",
             f"    mpirun:        {mpi_library.launcher_program(mpi['library']) or '(none found)'}",
             f"    C++ runtime:   {_libstdcxx(info)}"]
    return lines, bool(info.get("nccl")), ""


def _libstdcxx(info) -> str:
    """How the core links its C++ runtime (the wheel's: libc++, inside the module; a source
    build's: usually the shared libstdc++). One linked in is safe only while the module
    exports nothing else: CMakeLists.txt, Note [one exported symbol]."""
    linkage, path = info.get("libstdcxx", "unknown"), info.get("libstdcxx_path", "")
    if linkage == "shared":
        return f"shared ({path})"
    if linkage == "static":
        return "static, inside the module (kept local: the module exports only PyInit__core)"
    return "unknown"


def _cuda_version(v: int) -> str:
    return f"{v // 1000}.{v % 1000 // 10}"


def _nccl_ops() -> str:
    """The collectives the core runs on NCCL, as the core lists them."""
    from hvdlite import _core
    names = list(_core.nccl_requests_run())
    return ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else "".join(names)


def _nccl_version(v: int) -> str:
    if v >= 20900:  # NCCL 2.9 on: major * 10000 + minor * 100 + patch
        return f"{v // 10000}.{v % 10000 // 100}.{v % 100}"
    return f"{v // 1000}.{v % 1000 // 100}.{v % 100}"


def _devices() -> List[str]:
    """Lines about the device libraries the core loads at run time (csrc/device/): what is
    used where a CUDA device is visible, else that none is and what would be used."""
    try:
        from hvdlite import _device
        libs = _device.libraries()
    except Exception as e:  # noqa: BLE001 - reported, like a core that does not load
        return [f"    (cannot ask the core: {type(e).__name__}: {e})"]
    cuda, nccl = libs["cuda_runtime"], libs["nccl"]
    devices = libs.get("cuda_devices", 0)
    if devices == 0:
        lines = ["    no CUDA device is visible: tensors stay on the host (CPU)."]
        if cuda["loaded"]:
            lines.append(f"    With one, CUDA tensors would use the CUDA runtime "
                         f"{_cuda_version(cuda['version'])} ({cuda['path']})"
                         + (f" and NCCL {_nccl_version(nccl['version'])} ({nccl['path']})"
                            if nccl["loaded"] else f"; no NCCL ({nccl['error']})"))
        else:
            lines.append(f"    With one, a CUDA runtime would be needed: {cuda['error']}")
        return lines
    lines = [f"    {devices} CUDA device(s) visible",
             f"    [X] CUDA runtime {_cuda_version(cuda['version'])}: {cuda['path']}",
             "        CUDA tensors go to the core (through NCCL, or staged through pinned memory)"]
    if nccl["loaded"]:
        lines += [f"    [X] NCCL {_nccl_version(nccl['version'])}: {nccl['path']}",
                  f"        {_nccl_ops()} of CUDA tensors run on it (HVDLITE_GPU_OPERATIONS)"]
    else:
        lines.append(f"    [ ] NCCL: {nccl['error']}")
    return lines


def _tf_op_library() -> str:
    """Whether the op that keeps hvdlite's error classes in TensorFlow graphs was built
    (src/hvdlite/convert/tf_check_status.py); without it those errors are UnknownError."""
    try:
        found = [p for p in tf_op_library.library_paths() if os.path.exists(p)]
    except Exception as e:  # noqa: BLE001 - reported, like a core that does not load
        return f"graph-mode error op: cannot tell ({type(e).__name__}: {e})"
    if found:
        return f"graph-mode error op: {found[0]}"
    return "graph-mode error op: not built (errors inside tf.function graphs become UnknownError)"


def _cpu_kernels() -> List[str]:
    """Which CPU kernels the core chose at run time (csrc/algorithms/cpu_features.h)."""
    try:
        from hvdlite import _core
        info = dict(_core.build_info())
    except Exception:  # noqa: BLE001 - no core: _mpi() reports it
        return ["    (cannot ask the core)"]
    return [f"    [{'X' if info['adasum_avx2_fma'] else ' '}] AVX2 and FMA: Adasum's dot products "
            "and combination",
            f"    [{'X' if info['fp16_f16c'] else ' '}] F16C: float16 conversions (float16 tensors, "
            "fp16 compression)"]


def _has_device() -> bool:
    try:
        from hvdlite import _device
        return _device.libraries().get("cuda_devices", 0) > 0
    except Exception:  # noqa: BLE001 - no core: _mpi() reports it
        return False


def check_build() -> str:
    out = [f"hvdlite v{version()}:", "", "Available frameworks:"]
    for name, module, dists, adapter in FRAMEWORKS:
        found = _framework_version(module, dists)
        out.append(f"    [{'X' if found else ' '}] {name}" + (f" {found} ({adapter})" if found else ""))
        if found and module == "tensorflow":
            out.append(f"        {_tf_op_library()}")
    mpi_lines, nccl, problem = _mpi()
    out += ["", "Available controllers:", f"    [{' ' if problem else 'X'}] MPI"]
    out += mpi_lines
    if problem:
        out.append(f"    {problem}")
    out += ["", "Available tensor operations:", f"    [{'X' if nccl and _has_device() else ' '}] NCCL",
            f"    [{' ' if problem else 'X'}] MPI"]
    out += ["", "CPU kernels (chosen at run time; [ ]: this CPU lacks it, the portable one runs):"]
    out += _cpu_kernels()
    out += ["", "Device libraries (loaded at run time):"] + _devices()
    return "\n".join(out)
