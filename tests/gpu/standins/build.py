"""Build the stand-in CUDA runtime (cudart_standin.cc) once per source version, into a cache
folder under the build tree's temp space; returns the library's path."""
import hashlib
import os
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def cudart_standin():
    src = os.path.join(HERE, "cudart_standin.cc")
    with open(src, "rb") as f:
        digest = hashlib.sha1(f.read()).hexdigest()[:12]
    out_dir = os.path.join(tempfile.gettempdir(), f"hvdlite-standins-{os.getuid()}")
    os.makedirs(out_dir, exist_ok=True)
    lib = os.path.join(out_dir, f"libcudart_standin-{digest}.so")
    if not os.path.exists(lib):
        cxx = os.environ.get("HVDLITE_STANDIN_CXX", "g++")
        tmp = f"{lib}.{os.getpid()}.tmp"
        subprocess.run([cxx, "-std=c++17", "-O1", "-g", "-shared", "-fPIC", "-pthread",
                        src, "-o", tmp], check=True)
        os.replace(tmp, lib)
    return lib
