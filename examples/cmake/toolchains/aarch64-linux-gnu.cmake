# Cross-compiles for 64-bit ARM Linux (a Raspberry Pi 4 here) from an x86-64 Debian or
# Ubuntu machine:
#   apt-get install gcc-aarch64-linux-gnu qemu-user libc6-dev-arm64-cross
#   cmake -S examples/cmake -B build-arm -Daotc_DIR=$(aotc --cmake-dir) \
#         -DCMAKE_TOOLCHAIN_FILE=examples/cmake/toolchains/aarch64-linux-gnu.cmake
#   cmake --build build-arm && qemu-aarch64 -L /usr/aarch64-linux-gnu build-arm/mnist_app
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)

set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
# programs (aotc's Python) run here; libraries and headers come from the target's root
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# ctest (and add_custom_command's target programs) run the binaries under qemu
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /usr/aarch64-linux-gnu)

# the code aotc generates for the models: the Pi 4's CPU (aotc targets lists others);
# aotc builds libNAME.a's runtime with aarch64-linux-gnu-gcc -mcpu=cortex-a72
set(AOTC_TARGET "aarch64-linux-gnu:cortex-a72" CACHE STRING
  "aotc_add_model's default aotc --target")
