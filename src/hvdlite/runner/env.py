"""What Horovod's launcher helpers ``horovod.runner.common.util.env`` offer programs and
Horovod's own tests (served under that name, docs/horovod.md), with Horovod 0.28.1's
behaviour: the rank and size from the launcher's environment, and which variables a launcher
may pass on."""

import os
import re

#: Horovod's log levels, least verbose first (HOROVOD_LOG_LEVEL's values).
LOG_LEVEL_STR = ["FATAL", "ERROR", "WARNING", "INFO", "DEBUG", "TRACE"]

#: The variable Horovod's launcher keeps its job secret in (never passed on).
HOROVOD_SECRET_KEY = "HOROVOD_SECRET_KEY"

#: Variables a launcher must not pass on to the ranks, as regular expressions (whole names).
IGNORE_REGEXES = {"BASH_FUNC_.*", "OLDPWD", ".*CUDA_VISIBLE_DEVICES", HOROVOD_SECRET_KEY}

#: The rsh agent of Kubeflow's MPI operator.
KUBEFLOW_MPI_EXEC = "/etc/mpi/kubexec.sh"

# (rank, size) variable pairs, in the order they are read: Horovod's (Gloo) launcher's,
# Open MPI's, then MPICH's and Intel MPI's (PMI).
_RANK_AND_SIZE = (("HOROVOD_RANK", "HOROVOD_SIZE"),
                  ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
                  ("PMI_RANK", "PMI_SIZE"))


def is_exportable(name):
    """Whether a launcher may pass the variable ``name`` on (none of IGNORE_REGEXES matches
    its beginning, as ``re.match``)."""
    return not any(re.match(pattern, name) for pattern in IGNORE_REGEXES)


def get_env_rank_and_size():
    """(rank, size) of this process, from the first pair of launcher variables that is set;
    (0, 1) when none is. RuntimeError when only one of a pair is set."""
    for rank_name, size_name in _RANK_AND_SIZE:
        rank, size = os.environ.get(rank_name), os.environ.get(size_name)
        if rank is not None and size is not None:
            return int(rank), int(size)
        if rank is not None or size is not None:
            raise RuntimeError(f"Could not determine process rank and size: only one of "
                               f"{rank_name} and {size_name} found in environment")
    return 0, 1


def is_kubeflow_mpi():
    """Whether mpirun's rsh agent is Kubeflow's MPI operator's."""
    return os.environ.get("OMPI_MCA_plm_rsh_agent") == KUBEFLOW_MPI_EXEC
