"""Where the CUDA runtime and NCCL libraries of the nvidia-* wheels are (CUDA torch installs
them), for the core's loader (csrc/device/cuda_runtime.h), which also looks at a copy already
in the process, HVDLITE_CUDA_RUNTIME_LIBRARY / HVDLITE_NCCL_LIBRARY and the system's."""
import glob
import os

from . import _core


def nvidia_library_dirs():
    """(libcudart folders, libnccl folders) of the importable nvidia-* wheels."""
    try:
        import nvidia  # the wheels' namespace package
    except ImportError:
        return [], []
    cudart, nccl = [], []
    for root in list(getattr(nvidia, "__path__", [])):
        # CUDA 12 wheels: nvidia/cuda_runtime/lib, nvidia/nccl/lib; CUDA 13: nvidia/cu13/lib
        for sub in ("cuda_runtime/lib", "cu13/lib", "cu12/lib", "nccl/lib"):
            d = os.path.join(root, sub)
            if glob.glob(os.path.join(d, "libcudart.so*")):
                cudart.append(d)
            if glob.glob(os.path.join(d, "libnccl.so*")):
                nccl.append(d)
    return cudart, nccl


def tell_core():
    """Hands the folders to the core (once, before the first CUDA tensor)."""
    _core.set_device_library_dirs(*nvidia_library_dirs())


def libraries():
    """What the core found: {"cuda_runtime": {...}, "nccl": {...}}, each with loaded, path,
    version and error."""
    tell_core()
    return _core.device_libraries()
