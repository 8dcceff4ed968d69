#include "device/nccl_library.h"

#include <dlfcn.h>
#include <link.h>

#include <mutex>

namespace hvdlite {
namespace device {

LibraryInfo nccl_library_info() {
  static std::mutex mu;
  static bool tried = false;
  static LibraryInfo info;
  std::lock_guard<std::mutex> lk(mu);
  if (tried) return info;
  tried = true;
  std::string path, attempts;
  void* lib = open_library("HVDLITE_NCCL_LIBRARY", "libnccl.so", nccl_library_dirs(),
                           {"libnccl.so.2", "libnccl.so"}, &path, &attempts);
  if (!lib) {
    info.error = "NCCL (libnccl.so.2) could not be loaded; tried " + attempts +
                 ". Install the nvidia-nccl-cu* wheel (CUDA torch brings it), or set "
                 "HVDLITE_NCCL_LIBRARY";
    return info;
  }
  struct link_map* map = nullptr;
  info.path = (dlinfo(lib, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && *map->l_name)
                  ? map->l_name : path;
  auto get_version = reinterpret_cast<int (*)(int*)>(dlsym(lib, "ncclGetVersion"));
  if (!get_version) {
    info.error = info.path + " lacks ncclGetVersion (not NCCL?)";
    return info;
  }
  get_version(&info.version);
  info.loaded = true;
  return info;
}

}  // namespace device
}  // namespace hvdlite
