"""Plain-python worker for tests/test_launcher.py: reports rank, size and forwarded env."""
import os
import sys

rank = int(os.environ.get("OMPI_COMM_WORLD_RANK") or os.environ["PMI_RANK"])
size = int(os.environ.get("OMPI_COMM_WORLD_SIZE") or os.environ["PMI_SIZE"])
print(f"hello rank={rank} size={size} args={sys.argv[1:]}")
for name in sorted(os.environ):
    if name.startswith("HVDLITE_"):
        print(f"env {name}={os.environ[name]}")
print(f"to-stderr rank={rank}", file=sys.stderr)
