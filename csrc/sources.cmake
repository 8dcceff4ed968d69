# The core's sources that need neither Python nor a particular backend, by role: engine/ (how a
# request becomes a decision), algorithms/ (one collective algorithm per file), observability/
# and transport/. The extension module (CMakeLists.txt) adds the bindings and the MPI backend,
# the in-process unit tests (csrc/tests) the loopback transport.
set(HVDLITE_CORE_SOURCES
  engine/config.cc
  engine/controller.cc
  engine/cross_set_deadlock.cc
  engine/deadlock.cc
  engine/device_collectives.cc
  engine/engine.cc
  engine/fusion.cc
  engine/group.cc
  engine/handle.cc
  engine/late_ranks.cc
  engine/message.cc
  engine/names.cc
  engine/rank_computing.cc
  engine/response_cache.cc
  engine/validate.cc
  algorithms/adasum.cc
  algorithms/collectives.cc
  algorithms/cpu_features.cc
  algorithms/exchange_allreduce.cc
  algorithms/half_convert.cc
  algorithms/hierarchical.cc
  algorithms/lane_threads.cc
  algorithms/reduce.cc
  algorithms/ring_allreduce.cc
  algorithms/ring_pass.cc
  algorithms/shm_allreduce.cc
  algorithms/shm_allreduce_nranks.cc
  algorithms/shm_collectives_nranks.cc
  algorithms/shm_lanes.cc
  observability/autotune.cc
  observability/stall_inspector.cc
  observability/timeline.cc
  transport/peer_channel.cc
  transport/shm_board.cc
  transport/shm_doorbell.cc
  transport/shm_swap.cc)
