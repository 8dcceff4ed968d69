// Built when NCCL is not available (the default build): CUDA tensors are staged through host
// memory by the framework adapters. A transport/nccl.cc would define the same function.
namespace hvdlite {
bool nccl_built() { return false; }
}  // namespace hvdlite
