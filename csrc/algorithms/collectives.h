// The collectives other than all-reduce, run once negotiation agreed on them.
// Each returns the Outcome for the local request (outputs allocated here when needed).
#pragma once

#include <vector>

#include "engine/handle.h"
#include "engine/message.h"
#include "engine/tensor_entry.h"
#include "transport/transport.h"
#include "engine/validate.h"

namespace hvdlite {

// shared_memory: through shm_collectives_nranks.h instead of the transport's collectives or the
// ring (the same on every rank: Config::shm_collectives and shm_collectives_nranks_available).
Outcome run_broadcast(Transport& t, const Response& r, TensorEntry& e, bool shared_memory);
// members names the ranks in the error when some rank cannot allocate its output (or the
// reduce-scatter's work buffer): see Note [agreed allocations] in collectives.cc.
Outcome run_allgather(Transport& t, const Response& r, TensorEntry& e, const Membership& members,
                      bool shared_memory);
Outcome run_alltoall(Transport& t, const Response& r, TensorEntry& e, const Membership& members);
Outcome run_reducescatter(Transport& t, const Response& r, TensorEntry& e,
                          std::vector<uint8_t>& work, std::vector<uint8_t>& scratch,
                          size_t piece_bytes, const Membership& members, bool shared_memory);

// Rows of dimension 0 that reducescatter gives each rank (Horovod's split: the first
// n % size ranks get one extra row).
std::vector<int64_t> reducescatter_rows(int64_t rows, int size);

}  // namespace hvdlite
