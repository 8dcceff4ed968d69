// What the MPI backend needs from MPI's fault-tolerance extension (ULFM): classifying a
// failed call as a lost process, revoking a communicator so every member's pending and future
// calls on it fail, and shrinking it to the survivors. Available where the loaded MPI has
// MPIX_Comm_shrink (Open MPI 5); elsewhere (MPICH, Intel MPI, Open MPI 4) a lost process still
// ends the job as MPI itself decides.
#pragma once

#include "mpi/calls.h"

#include <vector>

namespace hvdlite {
namespace fault_tolerance {

// True when the loaded MPI lets the job survive a lost process (it has ULFM).
bool available();
// True when `rc` (an MPI return code) says a process of the communicator died or the
// communicator was revoked because one did.
bool is_process_failure(int rc);
// Makes every member's pending and later calls on `comm` fail (no-op without ULFM).
void revoke(MPI_Comm comm);
// A new communicator over the surviving members of `comm`, same order, after every survivor
// agreed on it. Collective over the survivors. Throws Error(InvalidArgument) without ULFM.
MPI_Comm shrink(MPI_Comm comm);

}  // namespace fault_tolerance
}  // namespace hvdlite
