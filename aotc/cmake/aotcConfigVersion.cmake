# find_package(aotc <version>) asks this file whether this aotc will do.
#
# The version is read from aotc/_version.py, the one place it is written (the wheel's
# metadata and the generated headers read it there too), so the CMake package can never
# disagree with the Python one.  0.x releases may break their interface at each minor
# version, later ones at each major: a request is met by a version at least as new with
# the same major (and, below 1.0, the same minor) number, as CMake's SameMinorVersion /
# SameMajorVersion compatibility modes say.

file(STRINGS "${CMAKE_CURRENT_LIST_DIR}/../_version.py" _aotc_version_line
     REGEX "^__version__ *= *")
# "0.1.0", "0.2.0rc1", "1.0.0.dev3" -> the leading numbers: 0.1.0, 0.2.0, 1.0.0
string(REGEX MATCH "[0-9]+(\\.[0-9]+)*" PACKAGE_VERSION "${_aotc_version_line}")
unset(_aotc_version_line)

if(NOT PACKAGE_VERSION)
  set(PACKAGE_VERSION "unknown")
  set(PACKAGE_VERSION_UNSUITABLE TRUE)  # a broken install: say so rather than guess
  return()
endif()

set(PACKAGE_VERSION_COMPATIBLE FALSE)
set(PACKAGE_VERSION_EXACT FALSE)

if(PACKAGE_FIND_VERSION_RANGE)
  # find_package(aotc 0.1...<0.3) (CMake 3.19+): any version in the range will do
  if(NOT PACKAGE_VERSION VERSION_LESS PACKAGE_FIND_VERSION_MIN
     AND ((PACKAGE_FIND_VERSION_RANGE_MAX STREQUAL "INCLUDE"
           AND NOT PACKAGE_VERSION VERSION_GREATER PACKAGE_FIND_VERSION_MAX)
          OR (PACKAGE_FIND_VERSION_RANGE_MAX STREQUAL "EXCLUDE"
              AND PACKAGE_VERSION VERSION_LESS PACKAGE_FIND_VERSION_MAX)))
    set(PACKAGE_VERSION_COMPATIBLE TRUE)
  endif()
elseif(NOT PACKAGE_FIND_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE TRUE)  # find_package(aotc): any version will do
elseif(NOT PACKAGE_VERSION VERSION_LESS PACKAGE_FIND_VERSION)
  string(REGEX MATCHALL "[0-9]+" _aotc_parts "${PACKAGE_VERSION}.0")
  list(GET _aotc_parts 0 _aotc_major)
  list(GET _aotc_parts 1 _aotc_minor)
  if(_aotc_major EQUAL PACKAGE_FIND_VERSION_MAJOR
     AND (_aotc_major GREATER 0 OR PACKAGE_FIND_VERSION_COUNT LESS 2
          OR _aotc_minor EQUAL PACKAGE_FIND_VERSION_MINOR))
    set(PACKAGE_VERSION_COMPATIBLE TRUE)
  endif()
  unset(_aotc_parts)
  unset(_aotc_major)
  unset(_aotc_minor)
endif()

if(PACKAGE_FIND_VERSION AND PACKAGE_VERSION VERSION_EQUAL PACKAGE_FIND_VERSION)
  set(PACKAGE_VERSION_EXACT TRUE)
endif()
