// Engine settings, read once from HVDLITE_* environment variables at init.
// hvdlite/config.py documents each one for users.
#pragma once

#include <cstddef>
#include <string>

namespace hvdlite {

struct Config {
  size_t fusion_threshold = size_t(64) << 20;  // HVDLITE_FUSION_THRESHOLD (bytes, 0 disables)
  double cycle_time_ms = 0.25;      // HVDLITE_CYCLE_TIME: longest sleep while waiting for peers
  size_t cache_capacity = 1024;     // HVDLITE_CACHE_CAPACITY (responses cached; 0 disables)
  size_t ring_piece_bytes = size_t(256) << 10;  // HVDLITE_RING_PIECE_BYTES
  double stall_warning_s = 60.0;    // HVDLITE_STALL_CHECK_TIME_SECONDS (0 disables)
  bool debug = false;               // HVDLITE_LOG_LEVEL=debug
  // HVDLITE_HIERARCHICAL_ALLREDUCE: 1 forces hierarchical all-reduce where the topology allows
  // it (several hosts, the same number of ranks on each, more than one), 0 forbids it; unset
  // (kHierarchicalAuto), it is used wherever the topology allows it.
  static constexpr int kHierarchicalAuto = 2;
  int hierarchical_allreduce = kHierarchicalAuto;
  // Largest byte count handed to one MPI collective call; bigger allgathers, alltoalls and
  // broadcasts go in pieces. MPI's int count limit by default. Lowering it is for tests only
  // (HVDLITE_TEST_MAX_TRANSFER_BYTES), so that the piecewise paths run on small tensors.
  size_t max_transfer_bytes = 2147483647;


  static Config from_env();
};

}  // namespace hvdlite
