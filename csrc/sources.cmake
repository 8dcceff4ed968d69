# The core's sources that need neither Python nor a particular backend: the extension module
# (CMakeLists.txt) adds the bindings and the MPI backend, the in-process unit tests
# (csrc/tests) the loopback transport.
set(HVDLITE_CORE_SOURCES
  autotune.cc
  collectives.cc
  config.cc
  controller.cc
  engine.cc
  exchange_allreduce.cc
  fusion.cc
  group.cc
  half_convert.cc
  handle.cc
  hierarchical.cc
  late_ranks.cc
  message.cc
  names.cc
  reduce.cc
  response_cache.cc
  ring_allreduce.cc
  ring_pass.cc
  shm_allreduce.cc
  stall_inspector.cc
  timeline.cc
  validate.cc
  transport/shm_swap.cc)
