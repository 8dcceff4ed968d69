// Loading an MPI at run time (Note [one wheel, any MPI]): the libmpi that
// src/hvdlite/mpi_library.py chose, then the plugin of its ABI family, whose table the transport
// calls through (mpi/calls.h).
#pragma once

#include <string>

namespace hvdlite {
namespace mpi {

struct LoadedMpi {
  std::string requested;  // the libmpi as load() was given it (a path or a library name)
  std::string library;    // the file the dynamic loader opened
  std::string abi;      // "openmpi", "mpich" or "mpiabi"
  std::string plugin;   // the plugin's path
};

// The ABI family of a loaded libmpi, from the symbols it defines (Open MPI's predefined
// objects, the standard ABI's MPI_Abi_get_version), or "" when it defines no MPI at all.
std::string abi_of(void* library_handle);

// Loads `library` (a path, or a file name the dynamic loader searches for) into the process's
// global namespace, and the plugin for its family from `plugin_dir`. Once one MPI is loaded,
// loading it again returns it, and loading another throws: a process holds one MPI. Throws
// Error(InvalidArgument) naming the library and what is wrong with it.
const LoadedMpi& load(const std::string& library, const std::string& plugin_dir);

// The MPI loaded, or null before load().
const LoadedMpi* loaded();

}  // namespace mpi
}  // namespace hvdlite
