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

# stb-bpf-loader is a root tool that may be started every few hundred
# milliseconds against a live service: it links libbpf, libdw, libelf and the
# compression libraries they use from their static archives (Debian's -dev
# packages ship them), which saves mapping and relocating six shared objects
# at every start (docs/benchmarks.md, "Issue 13, third pass"). libunwind stays
# shared: Debian's archive is not position-independent.
option(STB_LOADER_STATIC_DEPS
  "link stb-bpf-loader with the static libbpf, libdw, libelf, zlib, liblzma and libbz2" ON)
add_library(stb_loader_deps INTERFACE)
if(STB_BPF AND STB_LOADER_STATIC_DEPS)
  set(_stb_static_libs bpf dw elf z lzma bz2)
  set(_stb_archives "")
  set(_stb_missing "")
  foreach(_lib IN LISTS _stb_static_libs)
    find_library(STB_STATIC_LIB_${_lib} NAMES lib${_lib}.a)
    if(STB_STATIC_LIB_${_lib})
      list(APPEND _stb_archives "${STB_STATIC_LIB_${_lib}}")
    else()
      list(APPEND _stb_missing "lib${_lib}.a")
    endif()
  endforeach()
  if(_stb_missing)
    message(FATAL_ERROR "stb-bpf-loader links ${_stb_missing} statically and they are missing: "
      "run .ci/install-deps.sh (libbpf-dev libdw-dev libelf-dev zlib1g-dev liblzma-dev "
      "libbz2-dev), or configure with -DSTB_LOADER_STATIC_DEPS=OFF")
  endif()
  # In dependency order: each archive only uses those after it.
  target_link_libraries(stb_loader_deps INTERFACE ${_stb_archives} Threads::Threads
    ${CMAKE_DL_LIBS})
else()
  target_link_libraries(stb_loader_deps INTERFACE PkgConfig::LIBDW PkgConfig::ZLIB
    $<$<BOOL:${STB_BPF}>:PkgConfig::LIBBPF>)
endif()
