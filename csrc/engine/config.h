// Every setting hvdlite reads from the environment, in one table (settings_table()): its
// HVDLITE_* name, the HOROVOD_* alias an existing job script may use, its default and what it
// means. Config::from_env() reads them once at init(); src/hvdlite/config.py and the settings
// table of docs/settings.md are generated from the same table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace hvdlite {

struct Config {
  size_t fusion_threshold = size_t(64) << 20;   // bytes of all-reduce data per fusion batch (0: off)
  double cycle_time_ms = 0.25;                  // longest sleep while waiting for peers
  size_t cache_capacity = 1024;                 // responses cached (0 disables)
  size_t ring_piece_bytes = size_t(256) << 10;  // ring steps travel in pieces of this size
  size_t exchange_max_bytes = size_t(64) << 10; // batches up to this size: exchange all-reduce
  // All ranks on one host: batches at least this large go through shared memory
  // (shm_allreduce.h) instead of the exchange or the ring (0: never).
  size_t shm_allreduce_min_bytes = 1;
  // At 2 ranks, all-reduce batches of at least twice this are reduced in pieces of this
  // size, so that staged CUDA tensors copy one piece while the host reduces another
  // (Note [pipelined staging] in device/staging.h; 0: one piece).
  size_t pipeline_piece_bytes = size_t(4) << 20;
  // 3 to 8 ranks on one host: cached all-reduces of up to this many bytes ride in the
  // negotiation round through the shared board (controller.h) (0: never).
  // Default 512: on the 16-core host a 4 KiB ride cost more than the data path at 8 and 16
  // ranks (each rank reads every rank's packet), while a 1-float ride saved a fifth.
  size_t board_allreduce_max_bytes = 512;
  // More than 2 ranks on one host: all-gather, broadcast and reduce-scatter go through the
  // shared area (shm_collectives_nranks.h) instead of MPI and the ring.
  bool shm_collectives = true;
  // Lanes of a large shared-memory all-reduce: threads per rank, each moving a part of the
  // buffer through an area of its own (Note [lanes] in shm_lanes.h). 0: half the
  // host's cores per rank, at most 4; 1: none.
  int shm_lanes = 0;
  // Lanes but the calling thread's run at the scheduler's idle priority (Note [idle lanes] in
  // lane_threads.h), and the default lane count is then the host's cores per rank.
  bool shm_idle_lanes = false;
  // A wait on peers through shared memory spins and yields this long, then sleeps until a peer
  // rings (Note [doorbell] in transport/shm_doorbell.h). 0: never sleeps.
  uint64_t shm_sleep_after_us = 50;
  double stall_check_s = 60.0;                  // warn about stalled tensors after this (0: off)
  double stall_shutdown_s = 0.0;                // end the job after a stall this long (0: never)
  double deadlock_s = 30.0;                     // fail a deadlock after this long (0: never)
  std::string timeline;                         // Chrome trace file ("" disables)
  bool timeline_mark_cycles = false;
  bool timeline_all_ranks = false;              // one file per rank instead of rank 0 only
  bool autotune = false;
  std::string autotune_log;                     // CSV of every autotune trial ("" disables)
  bool debug = false;                           // log level debug/trace: print each collective
  bool abort_on_error = true;                   // read by the Python layer (excepthook)
  bool dynamic_process_sets = false;            // read by the Python layer (add_process_set)
  bool horovod_names = false;                   // read by the Python layer at start-up
  // Hierarchical all-reduce: 1 asks for it where the topology allows it (several hosts, the
  // same number of ranks on each, more than one), 0 forbids it; unset (kHierarchicalAuto),
  // it is used wherever the topology allows it.
  static constexpr int kHierarchicalAuto = 2;
  int hierarchical_allreduce = kHierarchicalAuto;
  // Its pipeline's chunk: each chunk costs a few steps of waiting on peers, each chunk more
  // lets more of the stages overlap. At 2 hosts x 2 ranks (64 MiB, 1 and 10 Gbit links) 8 MiB
  // did best; 1 MiB was 2-3x slower, one unpipelined chunk gained nothing from the smaller
  // cross-host traffic (docs/benchmarks.md, examples/hierarchical_bench.py).
  size_t hierarchical_chunk_bytes = size_t(8) << 20;
  // Largest byte count handed to one MPI collective call; bigger allgathers, alltoalls and
  // broadcasts go in pieces. MPI's int count limit by default; lowering it is for tests only.
  size_t max_transfer_bytes = 2147483647;
  // How CUDA tensors travel (HVDLITE_GPU_OPERATIONS): through NCCL on the device, or staged
  // through pinned host memory into the host algorithms (MPI). Auto: NCCL when it loads.
  enum class GpuOperations : uint8_t { Auto, Nccl, Mpi };
  GpuOperations gpu_operations = GpuOperations::Auto;

  // Throws InvalidArgument naming the variable when a value cannot be parsed.
  static Config from_env();
};

struct SettingInfo {
  const char* name;          // HVDLITE_*
  const char* alias;         // HOROVOD_* equivalent, or "" when Horovod has none
  const char* default_text;  // as documented
  const char* meaning;
};

// Every setting, in the order docs/settings.md documents them.
const std::vector<SettingInfo>& settings_table();

}  // namespace hvdlite
