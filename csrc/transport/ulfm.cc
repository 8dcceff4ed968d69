// Fault tolerance with ULFM (MPIX_* from mpi-ext.h): see fault_tolerance.h.
#include <mpi.h>
#include <mpi-ext.h>

#include <string>

#include "hvdlite.h"
#include "transport/fault_tolerance.h"

namespace hvdlite {
namespace fault_tolerance {

bool available() { return true; }

bool is_process_failure(int rc) {
  if (rc == MPI_SUCCESS) return false;
  int cls = rc;
  MPI_Error_class(rc, &cls);
  return cls == MPIX_ERR_PROC_FAILED || cls == MPIX_ERR_PROC_FAILED_PENDING ||
         cls == MPIX_ERR_REVOKED;
}

void revoke(MPI_Comm comm) {
  if (comm != MPI_COMM_NULL) MPIX_Comm_revoke(comm);
}

MPI_Comm shrink(MPI_Comm comm) {
  // Shrink can itself meet a further failure; it is retried until it succeeds on a set of
  // survivors that all agree the result is complete (agree returns the AND of the flags and
  // fails where some member of the new communicator died meanwhile).
  for (int attempt = 0; attempt < 16; ++attempt) {
    MPIX_Comm_failure_ack(comm);
    MPI_Comm shrunk = MPI_COMM_NULL;
    int rc = MPIX_Comm_shrink(comm, &shrunk);
    if (rc != MPI_SUCCESS) continue;
    MPI_Comm_set_errhandler(shrunk, MPI_ERRORS_RETURN);
    int flag = 1;
    rc = MPIX_Comm_agree(shrunk, &flag);
    if (rc == MPI_SUCCESS && flag) return shrunk;
    MPIX_Comm_revoke(shrunk);
    comm = shrunk;  // shrink again from what is left
  }
  throw Error(Status::Internal, "MPIX_Comm_shrink: the survivors could not agree on a new "
                                "communicator after 16 attempts (processes keep failing)");
}

}  // namespace fault_tolerance
}  // namespace hvdlite
