// NCCL, loaded at run time with dlopen (HVDLITE_NCCL_LIBRARY, a copy already in the process
// such as torch's, the nvidia-nccl-cu* wheel's folder, or the system's libnccl.so.2). This
// file finds it and reports what was found (nccl_built(), --check-build); the collectives
// over it are not built yet, so CUDA tensors go through the host algorithms (staging.h).
#pragma once

#include "device/cuda_runtime.h"

namespace hvdlite {
namespace device {

LibraryInfo nccl_library_info();

}  // namespace device
}  // namespace hvdlite
