// Hierarchical all-reduce: reduce-scatter among the ranks of each host, a ring across hosts
// among the ranks with the same local rank (each carrying only its 1/local_size share), then
// all-gather within each host. Across hosts it sends 2 (H - 1) / H of the data per rank pair
// instead of the flat ring's 2 (N - 1) / N through every link, in 2 (H - 1) slow steps
// instead of 2 (N - 1). The result follows the flat ring's rules: the same kernels, the
// postscale applied once per element by its owner, bitwise identical on every rank.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/config.h"
#include "algorithms/ring_allreduce.h"
#include "transport/transport.h"

namespace hvdlite {

// The two stages of a group: its ranks on this host, and its ranks with this local rank on
// every host.
struct Hierarchy {
  std::unique_ptr<Transport> intra, cross;
  // The data goes through the stages in chunks of this many bytes, so that one chunk's
  // cross-host ring overlaps the next chunk's reduce-scatter and the previous one's all-gather
  // within the host (Config::hierarchical_chunk_bytes).
  size_t chunk_bytes = 0;
  // A cross-host share up to this size, between two hosts, is swapped whole in one step
  // (Config::exchange_max_bytes).
  size_t exchange_max_bytes = 0;
  std::vector<uint8_t> cross_scratch;  // the cross-host ring's, in flight beside the intra one's
  // Batches of at least this many bytes take the host's shared memory for the stages within
  // it (shm_allreduce_nranks.h) instead of the ring; 0: never (no shared area, or
  // Config::shm_allreduce_min_bytes is 0). The intra transport's area serves only this.
  size_t shm_min_bytes = 0;
};

// Collective over `t`. The stages when config allows hierarchical all-reduce and the topology
// calls for it (more than one host, the same number of ranks on each, more than one), else
// null. Every rank decides alike: the shape of hosts is agreed over `t` first.
std::unique_ptr<Hierarchy> make_hierarchy(Transport& t, const Config& config);

// When each stage ended, for the timeline. The stages of a pipeline overlap: each time is
// when that stage finished its last chunk.
struct HierarchyTimes {
  std::chrono::steady_clock::time_point scattered;  // reduce-scatter within the host
  std::chrono::steady_clock::time_point crossed;    // all-reduce across hosts
};

// The chunks are cut alike on every rank, and each element is reduced by one owner, so the
// result is bitwise identical on every rank. Through shared memory the stages within the host
// run one after the other per chunk (they are memory copies, the cross-host ring is the slow
// part), with the ring's segments and operand order: the same bits as through the ring. times, when given, receives when the first two
// stages ended (the third ends on return).
void hierarchical_allreduce(Hierarchy& h, const SpanBuffer& buf, DataType dtype, ReduceOp op,
                            double postscale, std::vector<uint8_t>& scratch, size_t piece_bytes,
                            HierarchyTimes* times = nullptr);

}  // namespace hvdlite
