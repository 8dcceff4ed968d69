// Fault tolerance where the MPI has no ULFM (MPICH, Intel MPI, Open MPI 4): nothing survives a
// lost process; MPI's own error handling ends the job. See fault_tolerance.h.
#include <mpi.h>

#include "hvdlite.h"
#include "transport/fault_tolerance.h"

namespace hvdlite {
namespace fault_tolerance {

bool available() { return false; }
bool is_process_failure(int) { return false; }
void revoke(MPI_Comm) {}

MPI_Comm shrink(MPI_Comm) {
  throw Error(Status::InvalidArgument,
              "elastic recovery needs an MPI with the ULFM fault-tolerance extension "
              "(MPIX_Comm_shrink, Open MPI 5 launched with --with-ft ulfm); this hvdlite was "
              "built against an MPI without it");
}

}  // namespace fault_tolerance
}  // namespace hvdlite
