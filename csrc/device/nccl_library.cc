#include "device/nccl_library.h"

#include <dlfcn.h>
#include <link.h>

#include <mutex>

#include "hvdlite.h"

namespace hvdlite {
namespace device {
namespace {

std::mutex g_mu;
bool g_tried = false;
NcclApi g_api;
LibraryInfo g_info;

template <typename F>
void bind(void* lib, const char* name, F* slot, std::string* missing) {
  *slot = reinterpret_cast<F>(dlsym(lib, name));
  if (!*slot) *missing += (missing->empty() ? "" : ", ") + std::string(name);
}

void load_locked() {
  g_tried = true;
  std::string path, attempts;
  void* lib = open_library("HVDLITE_NCCL_LIBRARY", "libnccl.so", nccl_library_dirs(),
                           {"libnccl.so.2", "libnccl.so"}, &path, &attempts);
  if (!lib) {
    g_info.error = "NCCL (libnccl.so.2) could not be loaded; tried " + attempts +
                   ". Install the nvidia-nccl-cu* wheel (CUDA torch brings it), or set "
                   "HVDLITE_NCCL_LIBRARY";
    return;
  }
  struct link_map* map = nullptr;
  g_info.path = (dlinfo(lib, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && *map->l_name)
                    ? map->l_name : path;
  NcclApi a{};
  std::string missing;
  bind(lib, "ncclGetVersion", &a.GetVersion, &missing);
  bind(lib, "ncclGetUniqueId", &a.GetUniqueId, &missing);
  bind(lib, "ncclCommInitRank", &a.CommInitRank, &missing);
  bind(lib, "ncclCommDestroy", &a.CommDestroy, &missing);
  bind(lib, "ncclCommAbort", &a.CommAbort, &missing);
  bind(lib, "ncclCommGetAsyncError", &a.CommGetAsyncError, &missing);
  bind(lib, "ncclGetErrorString", &a.GetErrorString, &missing);
  bind(lib, "ncclAllReduce", &a.AllReduce, &missing);
  bind(lib, "ncclBroadcast", &a.Broadcast, &missing);
  bind(lib, "ncclReduce", &a.Reduce, &missing);
  bind(lib, "ncclAllGather", &a.AllGather, &missing);
  bind(lib, "ncclReduceScatter", &a.ReduceScatter, &missing);
  bind(lib, "ncclSend", &a.Send, &missing);
  bind(lib, "ncclRecv", &a.Recv, &missing);
  bind(lib, "ncclGroupStart", &a.GroupStart, &missing);
  bind(lib, "ncclGroupEnd", &a.GroupEnd, &missing);
  if (!missing.empty()) {
    g_info.error = g_info.path + " lacks " + missing + " (not NCCL 2.7 or later?)";
    return;
  }
  a.GetVersion(&g_info.version);
  g_api = a;
  g_info.loaded = true;
}

}  // namespace

const NcclApi* nccl() {
  std::lock_guard<std::mutex> lk(g_mu);
  if (!g_tried) load_locked();
  return g_info.loaded ? &g_api : nullptr;
}

LibraryInfo nccl_library_info() {
  nccl();
  std::lock_guard<std::mutex> lk(g_mu);
  return g_info;
}

void nccl_check(int rc, const std::string& what) {
  if (rc == kNcclSuccess) return;
  const NcclApi* api = nccl();
  const char* message = api ? api->GetErrorString(rc) : nullptr;
  throw Error(Status::Internal, "NCCL: " + what + " failed with error " + std::to_string(rc) +
              (message ? std::string(" (") + message + ")" : ""));
}

}  // namespace device
}  // namespace hvdlite
