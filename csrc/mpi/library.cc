// Note [one wheel, any MPI]
// The core is built once and runs with whichever MPI the machine has, as mpi4py 4.1's binary
// wheels do. MPI fixes no ABI of its own before the 5.0 standard's, but the libraries fall into
// a few families that share one: Open MPI 4 and 5 (libmpi.so.40); MPICH, Intel MPI, MVAPICH and
// Cray MPICH (libmpi.so.12); and libraries offering the standard ABI (libmpi_abi.so.1, MPICH 5,
// Intel MPI 2021.17 on). A plugin per family (plugin.c, compiled against that family's header
// when the wheel is built) turns the family's handles and calls into one table (api.h), and
// the core calls MPI only through that table (calls.h). So at init():
//   1. src/hvdlite/mpi_library.py picks the libmpi (HVDLITE_MPI_LIBRARY; one already in the
//      process; the launcher's family; an MPI wheel in the environment; the system's);
//   2. load() opens it RTLD_GLOBAL (its MCA components, Open MPI's for instance, resolve
//      libmpi's symbols from the global namespace), reads its family from its symbols, and
//      opens that family's plugin, whose MPI_* references resolve against it;
//   3. the transport is made, and calls MPI through the plugin's table.
// Everything that crosses the seam is C (api.h): the wheel's core carries its own C++
// runtime, so no C++ object or exception may pass between the core and a plugin.
#include "mpi/library.h"

#include <dlfcn.h>
#include <link.h>

#include <mutex>

#include "hvdlite.h"
#include "mpi/api.h"

namespace hvdlite {
namespace mpi {

const HvdliteMpiApi* g_api = nullptr;

namespace {

std::mutex g_mutex;
LoadedMpi g_loaded;
bool g_is_loaded = false;

std::string dl_error() {
  const char* e = dlerror();
  return e ? e : "unknown error";
}

}  // namespace

std::string abi_of(void* handle) {
  if (!dlsym(handle, "MPI_Init_thread")) return "";
  if (dlsym(handle, "ompi_mpi_comm_world")) return "openmpi";
  using AbiVersion = int (*)(int*, int*);
  if (auto abi_version = reinterpret_cast<AbiVersion>(dlsym(handle, "MPI_Abi_get_version"))) {
    int major = 0, minor = 0;
    if (abi_version(&major, &minor) == 0 && major > 0) return "mpiabi";
  }
  return "mpich";
}

const LoadedMpi& load(const std::string& library, const std::string& plugin_dir) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_is_loaded) {
    if (library == g_loaded.requested || library == g_loaded.library) return g_loaded;
    throw Error(Status::InvalidArgument,
                "this process already uses the MPI library " + g_loaded.library + " (" +
                    g_loaded.abi + " ABI); it cannot load a second one, " + library);
  }
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (!handle) {
    throw Error(Status::InvalidArgument,
                "cannot load the MPI library " + library + ": " + dl_error());
  }
  const std::string abi = abi_of(handle);
  if (abi.empty()) {
    throw Error(Status::InvalidArgument,
                library + " is not an MPI library (it defines no MPI_Init_thread); set "
                "HVDLITE_MPI_LIBRARY to a libmpi, or unset it to let hvdlite search");
  }
  const std::string plugin = plugin_dir + "/libhvdlite_mpi_" + abi + ".so";
  void* plugin_handle = dlopen(plugin.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!plugin_handle) {
    throw Error(Status::InvalidArgument,
                "the MPI library " + library + " has the " + abi + " ABI, but hvdlite's plugin "
                "for it cannot be loaded (" + dl_error() + "); this hvdlite was built without "
                "it: reinstall the wheel, or build from source against this MPI");
  }
  auto entry = reinterpret_cast<HvdliteMpiPluginEntry>(dlsym(plugin_handle, HVDLITE_MPI_PLUGIN_ENTRY));
  const HvdliteMpiApi* api = entry ? entry(HVDLITE_MPI_API_VERSION) : nullptr;
  if (!api) {
    throw Error(Status::InvalidArgument,
                "hvdlite's MPI plugin " + plugin + " is not of this hvdlite (it has no table of "
                "version " + std::to_string(HVDLITE_MPI_API_VERSION) + "): reinstall hvdlite");
  }
  // A library found by name: the file the loader chose, for --check-build and the tests.
  std::string path = library;
  struct link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map && map->l_name && map->l_name[0]) {
    path = map->l_name;
  }
  g_api = api;
  g_loaded = LoadedMpi{library, path, abi, plugin};
  g_is_loaded = true;
  return g_loaded;
}

const LoadedMpi* loaded() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_is_loaded ? &g_loaded : nullptr;
}

}  // namespace mpi
}  // namespace hvdlite
