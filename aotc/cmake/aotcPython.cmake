# Finds the Python interpreter that runs this aotc and records it in the cache as
# AOTC_PYTHON: aotc_add_model runs `${AOTC_PYTHON} -m aotc compile ...` at build time.
#
# The interpreter, not the `aotc` script on PATH: a venv that is not activated has no
# `aotc` on PATH, and a different aotc on PATH would compile with another version than
# the one whose config this is.  A candidate counts only if it imports the aotc package
# this file belongs to (its directory, one up from here), asked without importing it
# (importlib's find_spec: a few milliseconds, where `import aotc` loads the compiler).

get_filename_component(_aotc_package_dir "${CMAKE_CURRENT_LIST_DIR}/.." REALPATH)
set(_aotc_cmake_dir "${CMAKE_CURRENT_LIST_DIR}")
# for aotc_add_model, wherever it is called from (a variable would end at a function)
set_property(GLOBAL PROPERTY AOTC_PACKAGE_DIR "${_aotc_package_dir}")

# Sets ${out} to TRUE where `python` imports the aotc package in _aotc_package_dir.
function(_aotc_python_runs_this_aotc python out)
  set(${out} FALSE PARENT_SCOPE)
  if(NOT python OR NOT EXISTS "${python}" OR IS_DIRECTORY "${python}")
    return()
  endif()
  # run from this directory: `python -c` puts the working directory first on sys.path
  execute_process(
    COMMAND "${python}" -c
      "import importlib.util as u; s = u.find_spec('aotc'); print(next(iter(s.submodule_search_locations or ()), '') if s else '')"
    WORKING_DIRECTORY "${_aotc_cmake_dir}"
    RESULT_VARIABLE status
    OUTPUT_VARIABLE location
    OUTPUT_STRIP_TRAILING_WHITESPACE
    ERROR_QUIET
    TIMEOUT 30)
  if(status EQUAL 0 AND location)
    get_filename_component(location "${location}" REALPATH)
    if(location STREQUAL _aotc_package_dir)
      set(${out} TRUE PARENT_SCOPE)
    endif()
  endif()
endfunction()

# Appends to ${out} the interpreter an `aotc` console script starts (its #! line).
function(_aotc_script_interpreter script out)
  if(EXISTS "${script}" AND NOT IS_DIRECTORY "${script}")
    file(STRINGS "${script}" first LIMIT_COUNT 1)
    if(first MATCHES "^#![ ]*([^ ]+)")
      set(${out} ${${out}} "${CMAKE_MATCH_1}" PARENT_SCOPE)
    endif()
  endif()
endfunction()

function(_aotc_find_python)
  if(AOTC_PYTHON)
    _aotc_python_runs_this_aotc("${AOTC_PYTHON}" ok)
    if(NOT ok)
      message(FATAL_ERROR
        "AOTC_PYTHON=${AOTC_PYTHON} does not import the aotc in ${_aotc_package_dir} "
        "(whose aotcConfig.cmake this is): point AOTC_PYTHON at the interpreter that "
        "installed it, or unset it to search")
    endif()
    return()
  endif()

  # Where installs put the interpreter relative to the package: a venv or prefix
  # (<prefix>/lib/pythonX.Y/site-packages/aotc, <prefix>/bin/python3 and bin/aotc), and
  # an editable install from a checkout with its venv beside it (<checkout>/aotc,
  # <checkout>/.venv/bin/python).  Then an activated venv, then PATH.
  set(candidates)
  set(dir "${_aotc_package_dir}")
  foreach(level RANGE 4)
    get_filename_component(dir "${dir}" DIRECTORY)
    foreach(sub bin .venv/bin venv/bin)
      list(APPEND candidates "${dir}/${sub}/python3" "${dir}/${sub}/python")
      _aotc_script_interpreter("${dir}/${sub}/aotc" candidates)
    endforeach()
  endforeach()
  if(DEFINED ENV{VIRTUAL_ENV})
    list(APPEND candidates "$ENV{VIRTUAL_ENV}/bin/python3")
  endif()
  # host programs even where a toolchain file confines finding to a sysroot; the
  # results are dropped from the cache (NO_CACHE is CMake 3.21+): each configure looks again
  find_program(_aotc_script aotc NO_CMAKE_FIND_ROOT_PATH)
  if(_aotc_script)
    _aotc_script_interpreter("${_aotc_script}" candidates)
  endif()
  find_program(_aotc_path_python NAMES python3 python NO_CMAKE_FIND_ROOT_PATH)
  list(APPEND candidates "${_aotc_path_python}")
  unset(_aotc_script CACHE)
  unset(_aotc_path_python CACHE)

  list(REMOVE_DUPLICATES candidates)
  foreach(python IN LISTS candidates)
    _aotc_python_runs_this_aotc("${python}" ok)
    if(ok)
      # FORCE: an empty AOTC_PYTHON already in the cache (-DAOTC_PYTHON=) is replaced
      set(AOTC_PYTHON "${python}" CACHE FILEPATH
        "the Python interpreter whose aotc package aotc_add_model runs (python -m aotc)"
        FORCE)
      return()
    endif()
  endforeach()
  message(FATAL_ERROR
    "found no Python interpreter that imports the aotc in ${_aotc_package_dir}: "
    "pass -DAOTC_PYTHON=/path/to/venv/bin/python (the one that installed aotc)")
endfunction()

_aotc_find_python()
