# Post-build check of the _core module (run with cmake -P): it must export PyInit__core and
# nothing else, whatever the compiler linked into it (Note [one exported symbol] in
# CMakeLists.txt). Arguments: -DNM=<nm> -DMODULE=<path of the built module>.
execute_process(COMMAND "${NM}" -D --defined-only "${MODULE}"
                OUTPUT_VARIABLE _out ERROR_VARIABLE _err RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "hvdlite: cannot list the symbols of ${MODULE} with ${NM}: ${_err}")
endif()
string(REGEX MATCHALL "[^\n]+" _lines "${_out}")
set(_extra "")
set(_has_init OFF)
foreach(_line IN LISTS _lines)
  string(REGEX REPLACE "^[0-9a-fA-F]* *[A-Za-z] +" "" _name "${_line}")
  if(_name STREQUAL "PyInit__core")
    set(_has_init ON)
  else()
    list(APPEND _extra "${_name}")
  endif()
endforeach()
list(LENGTH _extra _n)
if(NOT _has_init)
  message(FATAL_ERROR "hvdlite: ${MODULE} does not export PyInit__core: Python cannot import it.")
endif()
if(_n GREATER 0)
  list(SUBLIST _extra 0 5 _first)
  message(FATAL_ERROR
    "hvdlite: ${MODULE} must export only PyInit__core, but exports ${_n} other symbols "
    "(${_first} ...). The linker did not apply csrc/exports.map; a module that exports a "
    "statically linked libstdc++ crashes once torch loads the shared one. Build with a compiler "
    "that links libstdc++ dynamically, e.g. CXX=/usr/bin/g++ pip install ...")
endif()
