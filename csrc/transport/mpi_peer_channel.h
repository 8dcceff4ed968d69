// The MPI backend's PeerChannel (peer_channel.h): a duplicate of a transport's communicator
// for user point-to-point alone.
#pragma once

#include "mpi/calls.h"

#include <memory>

#include "transport/peer_channel.h"

namespace hvdlite {

// Duplicates `base` (collective over its members, so called where the transport is made, on
// every member alike). Null when MPI was not initialised with MPI_THREAD_MULTIPLE: user
// point-to-point is called from framework threads next to the group's loop thread.
std::shared_ptr<PeerChannel> make_mpi_peer_channel(MPI_Comm base);

}  // namespace hvdlite
