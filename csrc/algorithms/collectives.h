// The collectives other than all-reduce, run once negotiation agreed on them.
// Each returns the Outcome for the local request (outputs allocated here when needed).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "engine/handle.h"
#include "engine/message.h"
#include "engine/tensor_entry.h"
#include "transport/transport.h"
#include "engine/validate.h"

namespace hvdlite {

// shared_memory: through shm_collectives_nranks.h instead of the transport's collectives or the
// ring (the same on every rank: Config::shm_collectives and shm_collectives_available).
Outcome run_broadcast(Transport& t, const Response& r, TensorEntry& e, bool shared_memory);
// members names the ranks in the error when some rank cannot allocate its output (or the
// reduce-scatter's work buffer): see Note [agreed allocations] in collectives.cc.
Outcome run_allgather(Transport& t, const Response& r, TensorEntry& e, const Membership& members,
                      bool shared_memory);
Outcome run_alltoall(Transport& t, const Response& r, TensorEntry& e, const Membership& members);
Outcome run_reducescatter(Transport& t, const Response& r, TensorEntry& e,
                          std::vector<uint8_t>& work, std::vector<uint8_t>& scratch,
                          size_t piece_bytes, const Membership& members, bool shared_memory);

// Note [agreed allocations]
// An all-gather's or all-to-all's output, and a reduce-scatter's work buffer, are the
// allocations one rank may fail while its peers succeed. When they are large the ranks agree
// on them before any data moves (one small control AND): if any rank could not allocate,
// every rank fails the request naming them, and the job goes on. Whether to agree must be
// decided the same way on every rank (from sizes every rank knows). Small allocations skip
// the extra round; a process that cannot find 1 MiB is not going to continue anyway.
// The same on the device path (device/nccl_collectives.cc), for its device outputs.
constexpr size_t kAgreedAllocationBytes = size_t(1) << 20;

// Runs `allocate` (which throws Error or std::bad_alloc when memory runs out). Where `agree`,
// returns the (global) ranks on which it failed, the same list on every rank; else a failure
// is thrown on as before. Collective where `agree`.
std::vector<int> allocate_agreed(Transport& t, bool agree, const Membership& members,
                                 const std::function<void()>& allocate);
// The request's failure on every rank: `failed` could not allocate `what`.
Outcome out_of_memory(const std::vector<int>& failed, const std::string& what,
                      const Request& request, const Membership& members);

// Rows of dimension 0 that reducescatter gives each rank (Horovod's split: the first
// n % size ranks get one extra row).
std::vector<int64_t> reducescatter_rows(int64_t rows, int size);

}  // namespace hvdlite
