# The aotc CMake package: find_package(aotc [0.1] REQUIRED), then
#
#   aotc_add_model(mnist MODEL mnist.onnx)          # compiled by aotc at build time
#   target_link_libraries(app PRIVATE mnist)        # mnist.h and libmnist.a
#
# `aotc --cmake-dir` prints this file's directory: cmake -Daotc_DIR=$(aotc --cmake-dir).
# It ships inside the Python package (aotc/cmake/), so it always belongs to exactly one
# aotc; aotcConfigVersion.cmake reads that aotc's version.
#
# Cache variables:
#   AOTC_PYTHON  the interpreter that runs `python -m aotc` (found if not given)
#   AOTC_TARGET  aotc_add_model's default --target (host if empty; toolchain files set it)

get_property(_aotc_languages GLOBAL PROPERTY ENABLED_LANGUAGES)
if(NOT "C" IN_LIST _aotc_languages AND NOT "CXX" IN_LIST _aotc_languages)
  # FindThreads (and linking the model) need a C or C++ compiler
  set(aotc_FOUND FALSE)
  set(aotc_NOT_FOUND_MESSAGE "enable C or CXX first, e.g. project(app C)")
  return()
endif()
unset(_aotc_languages)

include(CMakeFindDependencyMacro)
# libNAME.a's runtime runs its thread pool on pthreads
find_dependency(Threads)

include("${CMAKE_CURRENT_LIST_DIR}/aotcPython.cmake")
include("${CMAKE_CURRENT_LIST_DIR}/aotcAddModel.cmake")

set(AOTC_TARGET "${AOTC_TARGET}" CACHE STRING
  "aotc_add_model's default aotc --target (empty: host)")
