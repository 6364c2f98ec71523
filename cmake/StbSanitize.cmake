# SPDX-License-Identifier: Apache-2.0
# STB_SANITIZE: builds everything with -fsanitize=<list>. "address,undefined"
# for the whole suite; "thread" for the runtime-core tests.
if(STB_SANITIZE STREQUAL "")
  return()
endif()
if(NOT STB_SANITIZE MATCHES "^(address,undefined|undefined,address|address|undefined|thread)$")
  message(FATAL_ERROR "STB_SANITIZE='${STB_SANITIZE}': use address,undefined or thread")
endif()
add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=${STB_SANITIZE};-fno-sanitize-recover=all>")
add_link_options(-fsanitize=${STB_SANITIZE})
if(STB_SANITIZE MATCHES "address")
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:-fno-common>")
endif()
