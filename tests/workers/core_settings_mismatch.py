"""Ranks started with different protocol settings fail init() on every rank, naming the
setting, instead of corrupting data or hanging later."""
import os

import hvdlite as hvd

rank = int(os.environ.get("OMPI_COMM_WORLD_RANK") or os.environ.get("PMI_RANK", "0"))  # Open MPI, MPICH
os.environ["HVDLITE_FUSION_THRESHOLD"] = str(1000 + rank)
try:
    hvd.init()
except hvd.HvdliteInvalidArgumentError as e:
    assert "HVDLITE_FUSION_THRESHOLD differs across ranks" in str(e), e
    print("refused", flush=True)
else:
    raise AssertionError("init() accepted different fusion thresholds")
