"""Plain-python worker for tests/test_launcher.py: rank 1 fails at once, the others hang."""
import os
import sys
import time

rank = int(os.environ.get("OMPI_COMM_WORLD_RANK") or os.environ["PMI_RANK"])
print(f"started rank={rank}")
if rank == 1:
    time.sleep(0.5)
    print("DISTINCTIVE-FAILURE-7f3a: rank 1 gives up", file=sys.stderr)
    sys.exit(3)
time.sleep(60)
print(f"rank {rank} should have been killed")
