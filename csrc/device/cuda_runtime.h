// The CUDA runtime, loaded at run time with dlopen: the build never sees a CUDA header or
// toolkit. Only the entry points hvdlite uses are declared, with opaque handles, as in the
// runtime's C API (cudaStream_t / cudaEvent_t are pointers; errors are ints, 0 = success).
// Where no libcudart loads, cuda_runtime() returns null and cuda_runtime_info() says why:
// CUDA tensors are then refused with that reason (the MLX no_X way, decided at run time).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace hvdlite {
namespace device {

using Stream = void*;  // cudaStream_t; 0 is the legacy default stream
using Event = void*;   // cudaEvent_t

// cudaMemcpyKind
enum class CopyKind : int { HostToHost = 0, HostToDevice = 1, DeviceToHost = 2, DeviceToDevice = 3 };

struct CudaRuntime {
  int (*Malloc)(void**, size_t);
  int (*Free)(void*);
  int (*HostAlloc)(void**, size_t, unsigned int);
  int (*FreeHost)(void*);
  int (*MemcpyAsync)(void*, const void*, size_t, int, Stream);
  int (*MemsetAsync)(void*, int, size_t, Stream);
  int (*StreamCreateWithFlags)(Stream*, unsigned int);
  int (*StreamDestroy)(Stream);
  int (*StreamWaitEvent)(Stream, Event, unsigned int);
  int (*StreamSynchronize)(Stream);
  int (*EventCreateWithFlags)(Event*, unsigned int);
  int (*EventDestroy)(Event);
  int (*EventRecord)(Event, Stream);
  int (*EventSynchronize)(Event);
  int (*EventQuery)(Event);
  int (*SetDevice)(int);
  int (*GetDevice)(int*);
  int (*GetDeviceCount)(int*);
  int (*RuntimeGetVersion)(int*);
  const char* (*GetErrorString)(int);
};

constexpr int kSuccess = 0;
constexpr int kErrorNotReady = 600;        // cudaErrorNotReady (cudaEventQuery)
constexpr unsigned kStreamNonBlocking = 1;  // cudaStreamNonBlocking
constexpr unsigned kEventDisableTiming = 2; // cudaEventDisableTiming
constexpr unsigned kHostAllocPortable = 1;  // cudaHostAllocPortable

// What was found: for cuda_built() and --check-build.
struct LibraryInfo {
  bool loaded = false;
  std::string path;     // the file loaded (as the dynamic loader resolved it)
  int version = 0;      // the library's own version number (e.g. 12080, 22809)
  std::string error;    // why nothing loaded (every place tried)
};

// Directories to try (after HVDLITE_CUDA_RUNTIME_LIBRARY and a copy already mapped into the
// process, e.g. torch's): Python passes the nvidia-* wheels' library folders. Takes effect
// for the first load only; call before any CUDA tensor is used.
void set_library_dirs(const std::vector<std::string>& cudart_dirs,
                      const std::vector<std::string>& nccl_dirs);
const std::vector<std::string>& nccl_library_dirs();

// The runtime, loaded on first use; null where none loads.
const CudaRuntime* cuda_runtime();
LibraryInfo cuda_runtime_info();

// Throws Error(Internal) naming `what` and the runtime's message unless rc is success.
void check(int rc, const char* what);
// The runtime or an InvalidArgument error naming why CUDA tensors cannot be used.
const CudaRuntime& require_cuda(const std::string& subject);

// Shared by the CUDA and NCCL loaders: dlopen the first of `names` (absolute paths, or
// sonames looked up in `dirs` then by the loader), after a copy already mapped into the
// process whose file name starts with `mapped_prefix`. Returns the handle or null with
// `tried` listing every attempt.
void* open_library(const char* env_var, const char* mapped_prefix,
                   const std::vector<std::string>& dirs, const std::vector<std::string>& names,
                   std::string* path, std::string* tried);

}  // namespace device
}  // namespace hvdlite
