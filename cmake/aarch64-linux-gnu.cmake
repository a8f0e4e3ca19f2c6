# Cross build for 64-bit Arm Linux (GH200/GB200 Grace hosts) with Debian's cross toolchain
# (g++-aarch64-linux-gnu) and its multiarch packages (libgtest-dev:arm64, ...): scripts/cross-aarch64.
#   cmake -S . -B build-aarch64 -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake ...
# Test executables run under qemu-user (CMAKE_CROSSCOMPILING_EMULATOR): gtest_discover_tests lists
# them through it, and ctest runs them through it.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# Debian's multiarch layout: the target's libraries in /usr/lib/aarch64-linux-gnu, its config packages
# in /usr/lib/aarch64-linux-gnu/cmake; arch-independent headers (Eigen, nlohmann-json, CLI11, Random123)
# in /usr/include, shared with the build machine.
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# Programs (cmake, python) from the build machine; libraries only for the target: never an x86-64
# library from /usr/lib/x86_64-linux-gnu.
set(CMAKE_FIND_ROOT_PATH /usr/aarch64-linux-gnu)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE BOTH)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE BOTH)
set(CMAKE_IGNORE_PREFIX_PATH /usr/lib/x86_64-linux-gnu)
set(CMAKE_IGNORE_PATH /usr/lib/x86_64-linux-gnu /usr/lib/x86_64-linux-gnu/cmake)

# qemu-user runs the target's executables: Debian's qemu-user (qemu-aarch64) or qemu-user-static
# (qemu-aarch64-static), with the cross toolchain's libc and libstdc++ as the target's root (-L).
# LD_LIBRARY_PATH too: the cross root's loader searches /lib/aarch64-linux-gnu first, and qemu falls back
# to the real directory where the prefixed one is absent; where libc6:arm64 is installed (a dependency of
# some :arm64 packages) it would load that libc.so.6, of another Debian revision than the cross
# toolchain's ld.so, and the first pthread_create hangs.
find_program(LAYERINIT_QEMU_AARCH64 NAMES qemu-aarch64 qemu-aarch64-static)
if(LAYERINIT_QEMU_AARCH64)
  set(CMAKE_CROSSCOMPILING_EMULATOR ${LAYERINIT_QEMU_AARCH64} -L /usr/aarch64-linux-gnu
                                    -E LD_LIBRARY_PATH=/usr/aarch64-linux-gnu/lib)
endif()
