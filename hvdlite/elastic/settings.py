"""How hvdlite-run tells the ranks that a job is elastic (environment, read at use)."""

import os

ELASTIC_ENV = "HVDLITE_ELASTIC"          # "1" in a job launched with --min-np/--max-np
MIN_NP_ENV = "HVDLITE_ELASTIC_MIN_NP"    # fewest ranks the job may go on with


def is_elastic_job() -> bool:
    return os.environ.get(ELASTIC_ENV, "0") == "1"


def min_np() -> int:
    return int(os.environ.get(MIN_NP_ENV, "1"))
