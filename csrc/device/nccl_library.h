// NCCL, loaded at run time with dlopen (HVDLITE_NCCL_LIBRARY, a copy already in the process
// such as torch's, the nvidia-nccl-cu* wheel's folder, or the system's libnccl.so.2). Only the
// entry points hvdlite calls are declared, with NCCL's C types as opaque handles and ints.
#pragma once

#include "device/cuda_runtime.h"

namespace hvdlite {
namespace device {

using NcclComm = void*;  // ncclComm_t
struct NcclUniqueId {
  char internal[128];
};

// ncclResult_t values hvdlite names.
constexpr int kNcclSuccess = 0, kNcclInProgress = 7;
// ncclDataType_t and ncclRedOp_t as NCCL numbers them.
enum NcclDataType : int {
  kNcclInt8 = 0, kNcclUint8 = 1, kNcclInt32 = 2, kNcclUint32 = 3, kNcclInt64 = 4,
  kNcclUint64 = 5, kNcclFloat16 = 6, kNcclFloat32 = 7, kNcclFloat64 = 8, kNcclBfloat16 = 9,
};
enum NcclRedOp : int { kNcclSum = 0, kNcclProd = 1, kNcclMax = 2, kNcclMin = 3, kNcclAvg = 4 };

struct NcclApi {
  int (*GetVersion)(int*);
  int (*GetUniqueId)(NcclUniqueId*);
  int (*CommInitRank)(NcclComm*, int nranks, NcclUniqueId id, int rank);
  int (*CommDestroy)(NcclComm);
  int (*CommAbort)(NcclComm);
  int (*CommGetAsyncError)(NcclComm, int*);
  const char* (*GetErrorString)(int);
  int (*AllReduce)(const void*, void*, size_t, int, int, NcclComm, Stream);
  int (*Broadcast)(const void*, void*, size_t, int, int root, NcclComm, Stream);
  int (*Reduce)(const void*, void*, size_t, int, int, int root, NcclComm, Stream);
  int (*AllGather)(const void*, void*, size_t, int, NcclComm, Stream);
  int (*ReduceScatter)(const void*, void*, size_t, int, int, NcclComm, Stream);
  int (*Send)(const void*, size_t, int, int peer, NcclComm, Stream);
  int (*Recv)(void*, size_t, int, int peer, NcclComm, Stream);
  int (*GroupStart)();
  int (*GroupEnd)();
};

// NCCL, loaded on first use; null where it does not load (nccl_library_info says why).
const NcclApi* nccl();
LibraryInfo nccl_library_info();
// Throws Error(Internal) naming `what` and NCCL's message unless rc is success.
void nccl_check(int rc, const std::string& what);

}  // namespace device
}  // namespace hvdlite
