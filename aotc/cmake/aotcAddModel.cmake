# aotc_add_model(): a model compiled by aotc at build time, as a library target.
#
#   aotc_add_model(<target> MODEL <file>
#                  [NAME <c name>]             symbol prefix and file names (default: <target>)
#                  [TARGET <aotc --target>]    default: ${AOTC_TARGET}, else host
#                  [INPUTS <NAME=DIMS>...]     aotc compile --input, one each
#                  [DIMS <NAME=RANGE>...]      aotc compile --dim, one each
#                  [OPTIONS <aotc flags>...]   anything else aotc compile takes
#                  [DEPENDS <files>...])       more files the compile reads (external data)
#
# writes NAME.o, NAME.h and libNAME.a into ${CMAKE_CURRENT_BINARY_DIR}/aotc/<target>/ and
# makes <target> an imported static library of libNAME.a with NAME.h's directory and the
# runtime's system libraries, so `target_link_libraries(app PRIVATE <target>)` builds the
# model before app and links it.

function(aotc_add_model target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "MODEL;NAME;TARGET" "INPUTS;DIMS;OPTIONS;DEPENDS")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "aotc_add_model(${target}): unknown arguments ${arg_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT arg_MODEL)
    message(FATAL_ERROR "aotc_add_model(${target}): MODEL <file> is required")
  endif()
  get_filename_component(model "${arg_MODEL}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
  set(name "${target}")
  if(arg_NAME)
    set(name "${arg_NAME}")
  endif()
  # aotc would refuse it too, but only at build time
  if(NOT name MATCHES "^[A-Za-z_][A-Za-z0-9_]*$")
    message(FATAL_ERROR "aotc_add_model(${target}): '${name}' is not a C identifier; "
      "give NAME <c name>")
  endif()
  set(aotc_target host)
  if(arg_TARGET)
    set(aotc_target "${arg_TARGET}")
  elseif(AOTC_TARGET)
    set(aotc_target "${AOTC_TARGET}")
  endif()

  get_property(package_dir GLOBAL PROPERTY AOTC_PACKAGE_DIR)
  set(out "${CMAKE_CURRENT_BINARY_DIR}/aotc/${target}")
  set(outputs "${out}/${name}.o" "${out}/${name}.h" "${out}/lib${name}.a")
  set(command "${AOTC_PYTHON}" -m aotc compile "${model}" -o "${out}" --name "${name}"
    --target "${aotc_target}")
  foreach(spec IN LISTS arg_INPUTS)
    list(APPEND command --input "${spec}")
  endforeach()
  foreach(spec IN LISTS arg_DIMS)
    list(APPEND command --dim "${spec}")
  endforeach()
  list(APPEND command ${arg_OPTIONS} -q)

  # The include directory must exist when CMake generates (it checks imported targets'),
  # and is the command's working directory: `python -m` puts that first on sys.path, and
  # the binary directory above holds an `aotc/` folder of its own.
  file(MAKE_DIRECTORY "${out}")
  # Makefiles rerun a command when a file it depends on changes, not when the command
  # does: its text goes into a file it depends on, rewritten only when it differs (a
  # new TARGET, OPTIONS or interpreter then recompiles the model).
  set(command_file "${out}/aotc-command.txt")
  string(REPLACE ";" " " command_text "${command}")
  set(previous "")
  if(EXISTS "${command_file}")
    file(READ "${command_file}" previous)
  endif()
  if(NOT previous STREQUAL "${command_text}\n")
    file(WRITE "${command_file}" "${command_text}\n")
  endif()

  add_custom_command(
    OUTPUT ${outputs}
    COMMAND ${command}
    # aotc succeeds without the target's C compiler (it writes the runtime sources and
    # says how to build libNAME.a): here that must fail the build, not the link later
    COMMAND "${CMAKE_COMMAND}" -E compare_files "${out}/lib${name}.a" "${out}/lib${name}.a"
    # _version.py: a new aotc (pip install -U rewrites it) recompiles the model
    DEPENDS "${model}" "${package_dir}/_version.py" "${command_file}" ${arg_DEPENDS}
    WORKING_DIRECTORY "${out}"
    COMMENT "aotc: compiling ${arg_MODEL} for ${aotc_target}"
    VERBATIM)
  add_custom_target(${target}_aotc DEPENDS ${outputs})

  # the runtime's pool is pthreads and kernels call libm; a CUDA model's runtime opens
  # libcuda with dlopen
  set(link m Threads::Threads)
  if(aotc_target MATCHES "^cuda:")
    list(APPEND link ${CMAKE_DL_LIBS})
  endif()
  add_library(${target} STATIC IMPORTED GLOBAL)
  set_target_properties(${target} PROPERTIES
    IMPORTED_LOCATION "${out}/lib${name}.a"
    INTERFACE_INCLUDE_DIRECTORIES "${out}"
    INTERFACE_LINK_LIBRARIES "${link}")
  # a program linking <target> waits for the compile (and relinks when libNAME.a changes)
  add_dependencies(${target} ${target}_aotc)
endfunction()
