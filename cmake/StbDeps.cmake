# SPDX-License-Identifier: Apache-2.0
# Finds the libraries stb links (libunwind, elfutils, libbpf, cmocka) and
# defines stb_unwind_link: libunwind linked so that it can never take over
# _Unwind_* from libgcc_s (libgcc_s is NEEDED first in every binary).
find_package(PkgConfig REQUIRED)
find_package(Threads REQUIRED)
pkg_check_modules(LIBUNWIND REQUIRED IMPORTED_TARGET libunwind-generic)
pkg_check_modules(LIBDW REQUIRED IMPORTED_TARGET libdw)
# pprof output (runtime/stacks/pprof.c): profile.proto's wire format written by
# pprof.c itself, gzipped with zlib.
pkg_check_modules(ZLIB REQUIRED IMPORTED_TARGET zlib)
if(STB_BPF)
  pkg_check_modules(LIBBPF REQUIRED IMPORTED_TARGET libbpf>=1.1)
endif()
if(STB_BUILD_TESTS)
  pkg_check_modules(CMOCKA REQUIRED IMPORTED_TARGET cmocka)
endif()

# Debian's libunwind.so.8 exports unversioned _Unwind_*; if it comes before
# libgcc_s in symbol lookup, C++ exceptions and pthread_exit's forced unwind
# go through it and crash. Every binary that links libunwind (or libbthread)
# therefore gets libgcc_s as its first NEEDED entry.
set(STB_GCC_S_FIRST "SHELL:-Wl,--push-state,--no-as-needed -lgcc_s -Wl,--pop-state")
add_library(stb_unwind_link INTERFACE)
target_link_options(stb_unwind_link INTERFACE "${STB_GCC_S_FIRST}")
target_link_libraries(stb_unwind_link INTERFACE PkgConfig::LIBUNWIND)
