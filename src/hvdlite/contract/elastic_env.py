"""How hvdlite-run tells the ranks that a job is elastic (environment, read at use)."""

import json
import os

ELASTIC_ENV = "HVDLITE_ELASTIC"          # "1" in a job launched with --min-np/--max-np
MIN_NP_ENV = "HVDLITE_ELASTIC_MIN_NP"    # fewest ranks the job may go on with
MAX_NP_ENV = "HVDLITE_ELASTIC_MAX_NP"    # most ranks the job may grow to (absent: no limit)
# Written by hvdlite-run from --host-discovery-script: JSON {"version": n, "hosts": [[h, s]]}.
HOSTS_FILE_ENV = "HVDLITE_ELASTIC_HOSTS_FILE"
COMMAND_ENV = "HVDLITE_ELASTIC_COMMAND"  # JSON argv that starts one more rank (guard included)
# Set only in ranks that an elastic job added: the launcher's number for the rank (ranks
# started with the job are numbered 0..np-1 by their first MPI rank) and its host's name as
# the discovery script lists it.
WORKER_ID_ENV = "HVDLITE_ELASTIC_WORKER_ID"
HOST_ENV = "HVDLITE_ELASTIC_HOST"


def is_elastic_job() -> bool:
    return os.environ.get(ELASTIC_ENV, "0") == "1"


def min_np() -> int:
    return int(os.environ.get(MIN_NP_ENV, "1"))


def max_np():
    value = os.environ.get(MAX_NP_ENV, "")
    return int(value) if value else None


def hosts_file():
    return os.environ.get(HOSTS_FILE_ENV) or None


def command():
    value = os.environ.get(COMMAND_ENV, "")
    return json.loads(value) if value else None


def added_worker_id():
    """The launcher's number for this rank if the job added it, else None."""
    value = os.environ.get(WORKER_ID_ENV, "")
    return int(value) if value else None
