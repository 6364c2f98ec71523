# SPDX-License-Identifier: Apache-2.0
# stb_add_bpf_skeleton(): compiles a BPF C source with clang (CO-RE, against
# vmlinux/vmlinux.h), links it with bpftool (drops DWARF, keeps BTF) and
# generates its libbpf skeleton header, as explicit build steps. The file is
# also run as a script (cmake -P) by the skeleton step, to capture bpftool's
# output into the header without a shell redirection.

if(CMAKE_SCRIPT_MODE_FILE)
  # cmake -DSTB_BPFTOOL=<bpftool> -DSTB_BPF_OBJ=<linked.o> -DSTB_BPF_NAME=<name>
  #       -DSTB_BPF_SKEL=<out.skel.h> -P StbBpf.cmake
  execute_process(
    COMMAND "${STB_BPFTOOL}" gen skeleton "${STB_BPF_OBJ}" name "${STB_BPF_NAME}"
    OUTPUT_FILE "${STB_BPF_SKEL}.tmp"
    RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    file(REMOVE "${STB_BPF_SKEL}.tmp")
    message(FATAL_ERROR "bpftool gen skeleton ${STB_BPF_OBJ} failed (${rc})")
  endif()
  file(RENAME "${STB_BPF_SKEL}.tmp" "${STB_BPF_SKEL}")
  return()
endif()

find_program(STB_CLANG NAMES clang clang-16 clang-15 clang-14
             DOC "clang used to compile BPF programs")
find_program(STB_BPFTOOL NAMES bpftool PATHS /usr/sbin /sbin /usr/local/sbin
             DOC "bpftool used to link BPF objects and generate skeletons")
if(NOT STB_CLANG)
  message(FATAL_ERROR "STB_BPF=ON needs clang to compile the BPF program: install the "
          "Debian package 'clang' (or set STB_CLANG, or configure with -DSTB_BPF=OFF)")
endif()
if(NOT STB_BPFTOOL)
  message(FATAL_ERROR "STB_BPF=ON needs bpftool to generate the BPF skeleton: install the "
          "Debian package 'bpftool' (or set STB_BPFTOOL, or configure with -DSTB_BPF=OFF)")
endif()

option(STB_BPF_VMLINUX_FROM_KERNEL
       "Generate vmlinux.h from the running kernel's BTF instead of using vmlinux/vmlinux.h" OFF)
if(STB_BPF_VMLINUX_FROM_KERNEL)
  set(STB_BPF_VMLINUX_DIR "${CMAKE_BINARY_DIR}/vmlinux")
  set(STB_BPF_VMLINUX_H "${STB_BPF_VMLINUX_DIR}/vmlinux.h")
  if(NOT TARGET stb_vmlinux_h)
    add_custom_command(
      OUTPUT "${STB_BPF_VMLINUX_H}"
      COMMAND "${CMAKE_COMMAND}" -E make_directory "${STB_BPF_VMLINUX_DIR}"
      COMMAND "${CMAKE_COMMAND}" -E env "BPFTOOL=${STB_BPFTOOL}"
              sh "${PROJECT_SOURCE_DIR}/vmlinux/gen-vmlinux.sh"
              /sys/kernel/btf/vmlinux "${STB_BPF_VMLINUX_H}"
      DEPENDS "${PROJECT_SOURCE_DIR}/vmlinux/gen-vmlinux.sh"
      COMMENT "Generating vmlinux.h from /sys/kernel/btf/vmlinux"
      VERBATIM)
    add_custom_target(stb_vmlinux_h DEPENDS "${STB_BPF_VMLINUX_H}")
  endif()
else()
  set(STB_BPF_VMLINUX_DIR "${PROJECT_SOURCE_DIR}/vmlinux")
  set(STB_BPF_VMLINUX_H "${STB_BPF_VMLINUX_DIR}/vmlinux.h")
endif()

# stb_add_bpf_skeleton(<name> SOURCE <file.bpf.c> [DEPENDS <file>...])
#
# Builds <name>.skel.h (skeleton struct `struct <name>`, functions
# <name>__open/__load/__destroy) from SOURCE and defines the INTERFACE target
# <name>: linking it adds the skeleton's directory to the include path, libbpf
# to the link line and the generation to the build order. DEPENDS lists the
# headers SOURCE includes (clang's depfile tracks them too).
function(stb_add_bpf_skeleton name)
  cmake_parse_arguments(ARG "" "SOURCE" "DEPENDS" ${ARGN})
  if(NOT ARG_SOURCE OR ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "usage: stb_add_bpf_skeleton(<name> SOURCE <file.bpf.c> [DEPENDS ...])")
  endif()
  get_filename_component(src "${ARG_SOURCE}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
  get_filename_component(src_dir "${src}" DIRECTORY)
  set(deps "")
  foreach(d IN LISTS ARG_DEPENDS)
    get_filename_component(d "${d}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
    list(APPEND deps "${d}")
  endforeach()

  set(out_dir "${CMAKE_CURRENT_BINARY_DIR}/${name}")
  set(obj "${out_dir}/${name}.bpf.o")
  set(linked "${out_dir}/${name}.o")
  set(skel "${out_dir}/${name}.skel.h")

  set(includes "-I${STB_BPF_VMLINUX_DIR}" "-I${PROJECT_SOURCE_DIR}/include" "-I${src_dir}")
  foreach(d IN LISTS LIBBPF_INCLUDE_DIRS)
    list(APPEND includes "-I${d}")
  endforeach()
  set(vmlinux_dep "${STB_BPF_VMLINUX_H}")

  # -mcpu=v3: the program uses BPF_CMPXCHG (kernel >= 5.12).
  add_custom_command(
    OUTPUT "${obj}"
    COMMAND "${CMAKE_COMMAND}" -E make_directory "${out_dir}"
    COMMAND "${STB_CLANG}" -target bpf -mcpu=v3 -g -O2 -D__TARGET_ARCH_x86
            -Wall -Wextra "$<$<BOOL:${STB_WERROR}>:-Werror>" ${includes}
            -MD -MF "${obj}.d" -c "${src}" -o "${obj}"
    DEPENDS "${src}" ${deps} "${vmlinux_dep}"
    DEPFILE "${obj}.d"
    COMMENT "Compiling BPF program ${name} (clang)"
    VERBATIM COMMAND_EXPAND_LISTS)
  add_custom_command(
    OUTPUT "${linked}"
    COMMAND "${STB_BPFTOOL}" gen object "${linked}" "${obj}"
    DEPENDS "${obj}"
    COMMENT "Linking BPF object ${name} (bpftool gen object)"
    VERBATIM)
  add_custom_command(
    OUTPUT "${skel}"
    COMMAND "${CMAKE_COMMAND}" "-DSTB_BPFTOOL=${STB_BPFTOOL}" "-DSTB_BPF_OBJ=${linked}"
            "-DSTB_BPF_NAME=${name}" "-DSTB_BPF_SKEL=${skel}"
            -P "${CMAKE_CURRENT_FUNCTION_LIST_FILE}"
    DEPENDS "${linked}" "${CMAKE_CURRENT_FUNCTION_LIST_FILE}"
    COMMENT "Generating BPF skeleton ${name}.skel.h (bpftool gen skeleton)"
    VERBATIM)
  add_custom_target(${name}_skel DEPENDS "${skel}")
  if(TARGET stb_vmlinux_h)
    add_dependencies(${name}_skel stb_vmlinux_h)
  endif()

  add_library(${name} INTERFACE)
  add_dependencies(${name} ${name}_skel)
  target_include_directories(${name} INTERFACE "${out_dir}")
  target_link_libraries(${name} INTERFACE PkgConfig::LIBBPF)
endfunction()
