#include "device/cuda_runtime.h"

#include <dlfcn.h>
#include <link.h>

#include <cstdlib>
#include <fstream>
#include <mutex>

#include "hvdlite.h"

namespace hvdlite {
namespace device {
namespace {

std::mutex g_mu;
std::vector<std::string> g_cudart_dirs, g_nccl_dirs;
bool g_tried = false;
CudaRuntime g_runtime;
LibraryInfo g_info;

std::string basename_of(const std::string& p) {
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

// A copy of the library that is already in the process (torch loads its own at import):
// using that one keeps a single runtime, whatever the search path says.
std::string mapped_library(const char* prefix) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    const size_t at = line.find('/');
    if (at == std::string::npos) continue;
    const std::string path = line.substr(at);
    if (basename_of(path).rfind(prefix, 0) == 0) return path;
  }
  return "";
}

std::string resolved_path(void* handle, const std::string& fallback) {
  struct link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && *map->l_name) {
    return map->l_name;
  }
  return fallback;
}

template <typename F>
bool bind(void* lib, const char* name, F* slot, std::string* missing) {
  *slot = reinterpret_cast<F>(dlsym(lib, name));
  if (!*slot) *missing += (missing->empty() ? "" : ", ") + std::string(name);
  return *slot != nullptr;
}

void load_locked() {
  g_tried = true;
  std::string path, tried;
  void* lib = open_library("HVDLITE_CUDA_RUNTIME_LIBRARY", "libcudart.so", g_cudart_dirs,
                           {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", "libcudart.so"},
                           &path, &tried);
  if (!lib) {
    g_info.error = "no CUDA runtime (libcudart) could be loaded; tried " + tried +
                   ". Install CUDA torch (its nvidia-cuda-runtime wheel), or set "
                   "HVDLITE_CUDA_RUNTIME_LIBRARY to a libcudart.so";
    return;
  }
  CudaRuntime r{};
  std::string missing;
  bind(lib, "cudaMalloc", &r.Malloc, &missing);
  bind(lib, "cudaFree", &r.Free, &missing);
  bind(lib, "cudaHostAlloc", &r.HostAlloc, &missing);
  bind(lib, "cudaFreeHost", &r.FreeHost, &missing);
  bind(lib, "cudaMemcpyAsync", &r.MemcpyAsync, &missing);
  bind(lib, "cudaMemsetAsync", &r.MemsetAsync, &missing);
  bind(lib, "cudaStreamCreateWithFlags", &r.StreamCreateWithFlags, &missing);
  bind(lib, "cudaStreamDestroy", &r.StreamDestroy, &missing);
  bind(lib, "cudaStreamWaitEvent", &r.StreamWaitEvent, &missing);
  bind(lib, "cudaStreamSynchronize", &r.StreamSynchronize, &missing);
  bind(lib, "cudaEventCreateWithFlags", &r.EventCreateWithFlags, &missing);
  bind(lib, "cudaEventDestroy", &r.EventDestroy, &missing);
  bind(lib, "cudaEventRecord", &r.EventRecord, &missing);
  bind(lib, "cudaEventSynchronize", &r.EventSynchronize, &missing);
  bind(lib, "cudaEventQuery", &r.EventQuery, &missing);
  bind(lib, "cudaSetDevice", &r.SetDevice, &missing);
  bind(lib, "cudaGetDevice", &r.GetDevice, &missing);
  bind(lib, "cudaGetDeviceCount", &r.GetDeviceCount, &missing);
  bind(lib, "cudaRuntimeGetVersion", &r.RuntimeGetVersion, &missing);
  bind(lib, "cudaGetErrorString", &r.GetErrorString, &missing);
  g_info.path = resolved_path(lib, path);
  if (!missing.empty()) {
    g_info.error = g_info.path + " lacks " + missing + " (not a CUDA runtime?)";
    return;
  }
  r.RuntimeGetVersion(&g_info.version);
  g_runtime = r;
  g_info.loaded = true;
}

}  // namespace

void* open_library(const char* env_var, const char* mapped_prefix,
                   const std::vector<std::string>& dirs, const std::vector<std::string>& names,
                   std::string* path, std::string* tried) {
  auto attempt = [&](const std::string& candidate) -> void* {
    void* h = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (h) {
      *path = candidate;
      return h;
    }
    const char* why = dlerror();
    *tried += (tried->empty() ? "" : "; ") + candidate + (why ? std::string(" (") + why + ")" : "");
    return nullptr;
  };
  // An explicit setting is the only place tried: a wrong path must not pass silently.
  if (const char* forced = std::getenv(env_var); forced && *forced) return attempt(forced);
  const std::string mapped = mapped_library(mapped_prefix);
  if (!mapped.empty()) {
    if (void* h = attempt(mapped)) return h;
  }
  for (const std::string& dir : dirs) {
    for (const std::string& name : names) {
      void* h = dlopen((dir + "/" + name).c_str(), RTLD_NOW | RTLD_LOCAL);
      if (h) {
        *path = dir + "/" + name;
        return h;
      }
      dlerror();
    }
    *tried += (tried->empty() ? "" : "; ") + dir + "/" + names.front() + "...";
  }
  for (const std::string& name : names) {
    if (void* h = attempt(name)) return h;
  }
  return nullptr;
}

void set_library_dirs(const std::vector<std::string>& cudart_dirs,
                      const std::vector<std::string>& nccl_dirs) {
  std::lock_guard<std::mutex> lk(g_mu);
  g_cudart_dirs = cudart_dirs;
  g_nccl_dirs = nccl_dirs;
}

const std::vector<std::string>& nccl_library_dirs() {
  std::lock_guard<std::mutex> lk(g_mu);
  return g_nccl_dirs;
}

const CudaRuntime* cuda_runtime() {
  std::lock_guard<std::mutex> lk(g_mu);
  if (!g_tried) load_locked();
  return g_info.loaded ? &g_runtime : nullptr;
}

LibraryInfo cuda_runtime_info() {
  cuda_runtime();
  std::lock_guard<std::mutex> lk(g_mu);
  return g_info;
}

void check(int rc, const char* what) {
  if (rc == kSuccess) return;
  const CudaRuntime* r = cuda_runtime();
  const char* message = r ? r->GetErrorString(rc) : nullptr;
  throw Error(Status::Internal, std::string("CUDA runtime: ") + what + " failed with error " +
              std::to_string(rc) + (message ? std::string(" (") + message + ")" : ""));
}

const CudaRuntime& require_cuda(const std::string& subject) {
  const CudaRuntime* r = cuda_runtime();
  if (!r) throw Error(Status::InvalidArgument, subject + " is a CUDA tensor, but " + cuda_runtime_info().error);
  return *r;
}

}  // namespace device
}  // namespace hvdlite
