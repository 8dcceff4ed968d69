"""Build the stand-in CUDA runtime and NCCL (cudart_standin.cc, nccl_standin.cc) once per
source version, into a cache folder in the temp space; each function returns a path."""
import hashlib
import os
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def cudart_standin():
    return _build("cudart_standin")


def nccl_standin():
    return _build("nccl_standin")


def _build(stem):
    src = os.path.join(HERE, f"{stem}.cc")
    with open(src, "rb") as f:
        digest = hashlib.sha1(f.read()).hexdigest()[:12]
    out_dir = os.path.join(tempfile.gettempdir(), f"hvdlite-standins-{os.getuid()}")
    os.makedirs(out_dir, exist_ok=True)
    lib = os.path.join(out_dir, f"lib{stem}-{digest}.so")
    if not os.path.exists(lib):
        cxx = os.environ.get("HVDLITE_STANDIN_CXX", "g++")
        tmp = f"{lib}.{os.getpid()}.tmp"
        subprocess.run([cxx, "-std=c++17", "-O1", "-g", "-shared", "-fPIC", "-pthread",
                        src, "-o", tmp, "-lrt", "-ldl"], check=True)
        os.replace(tmp, lib)
    return lib
