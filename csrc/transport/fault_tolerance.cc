// Fault tolerance through ULFM (MPIX_Comm_*), where the loaded MPI has it: see
// fault_tolerance.h, and Note [ULFM at run time] in mpi/plugin.c for where it is found.
#include "transport/fault_tolerance.h"

#include <string>

#include "hvdlite.h"

namespace hvdlite {
namespace fault_tolerance {

bool available() { return mpi::api().comm_shrink != nullptr; }

bool is_process_failure(int rc) {
  if (rc == MPI_SUCCESS || !available()) return false;
  int cls = rc;
  MPI_Error_class(rc, &cls);
  const HvdliteMpiApi& api = mpi::api();
  return cls == api.err_proc_failed || cls == api.err_proc_failed_pending || cls == api.err_revoked;
}

void revoke(MPI_Comm comm) {
  if (available() && comm != MPI_COMM_NULL) mpi::api().comm_revoke(comm);
}

MPI_Comm shrink(MPI_Comm comm) {
  const HvdliteMpiApi& api = mpi::api();
  if (!available()) {
    throw Error(Status::InvalidArgument,
                "elastic recovery needs an MPI with the ULFM fault-tolerance extension "
                "(MPIX_Comm_shrink: Open MPI 5, launched with --with-ft ulfm); the MPI loaded "
                "has none (hvdlite-run --check-build names it)");
  }
  // Shrink can itself meet a further failure; it is retried until it succeeds on a set of
  // survivors that all agree the result is complete (agree returns the AND of the flags and
  // fails where some member of the new communicator died meanwhile).
  for (int attempt = 0; attempt < 16; ++attempt) {
    api.comm_failure_ack(comm);
    MPI_Comm shrunk = MPI_COMM_NULL;
    int rc = api.comm_shrink(comm, &shrunk);
    if (rc != MPI_SUCCESS) continue;
    MPI_Comm_set_errhandler(shrunk, MPI_ERRORS_RETURN);
    int flag = 1;
    rc = api.comm_agree(shrunk, &flag);
    if (rc == MPI_SUCCESS && flag) return shrunk;
    api.comm_revoke(shrunk);
    comm = shrunk;  // shrink again from what is left
  }
  throw Error(Status::Internal, "MPIX_Comm_shrink: the survivors could not agree on a new "
                                "communicator after 16 attempts (processes keep failing)");
}

}  // namespace fault_tolerance
}  // namespace hvdlite
