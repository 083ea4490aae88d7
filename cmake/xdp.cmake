# xdp.cmake - the AF_XDP link (src/link/xdp/link.c) where libxdp, libbpf
# (Debian: libxdp-dev, libbpf-dev) and clang are found; without them ulnet
# builds as before and the link's open says it was left out.
#   ULN_XDP=AUTO|ON|OFF   ON: fail if something is missing
# Sets ULN_XDP_FOUND, and adds the program object and ULN_HAVE_XDP to ulnet_obj
# (uln_xdp_setup, called once the targets exist).
set(ULN_XDP AUTO CACHE STRING "AF_XDP link: AUTO (if libxdp, libbpf and clang are found), ON, OFF")
set_property(CACHE ULN_XDP PROPERTY STRINGS AUTO ON OFF)
set(ULN_XDP_FOUND FALSE)
if(NOT ULN_XDP MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "ULN_XDP=${ULN_XDP}: use AUTO, ON or OFF")
endif()
if(NOT ULN_XDP STREQUAL "OFF")
  find_package(PkgConfig)
  if(PkgConfig_FOUND)
    pkg_check_modules(XDP IMPORTED_TARGET libxdp libbpf)
  endif()
  find_program(ULN_BPF_CLANG NAMES clang clang-16 clang-15 clang-14)
  if(XDP_FOUND AND ULN_BPF_CLANG)
    set(ULN_XDP_FOUND TRUE)
    message(STATUS "ulnet: AF_XDP link on (libxdp, libbpf, ${ULN_BPF_CLANG})")
  elseif(ULN_XDP STREQUAL "ON")
    message(FATAL_ERROR "ULN_XDP=ON but libxdp/libbpf (pkg-config) or clang is missing")
  else()
    message(STATUS "ulnet: AF_XDP link off (needs libxdp-dev, libbpf-dev and clang)")
  endif()
endif()

# The program, compiled for the BPF target and embedded as an array.
function(uln_xdp_setup)
  if(NOT ULN_XDP_FOUND)
    return()
  endif()
  set(src ${CMAKE_SOURCE_DIR}/src/link/xdp/ulnet_xdp.bpf.c)
  set(obj ${CMAKE_BINARY_DIR}/ulnet_xdp.bpf.o)
  set(gen ${CMAKE_BINARY_DIR}/ulnet_xdp_obj.c)
  execute_process(COMMAND ${CMAKE_C_COMPILER} -print-multiarch OUTPUT_VARIABLE multiarch
                  OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  set(arch_inc "")
  if(multiarch)
    set(arch_inc -I/usr/include/${multiarch}) # asm/types.h for the BPF target
  endif()
  add_custom_command(
    OUTPUT ${obj}
    COMMAND ${ULN_BPF_CLANG} -O2 -g -target bpf -Wall ${arch_inc}
            -I${CMAKE_SOURCE_DIR}/src/link/xdp -c ${src} -o ${obj}
    DEPENDS ${src} ${CMAKE_SOURCE_DIR}/src/link/xdp/ulnet_xdp.h
    COMMENT "BPF program ulnet_xdp.bpf.o")
  add_custom_command(
    OUTPUT ${gen}
    COMMAND ${CMAKE_COMMAND} -DIN=${obj} -DOUT=${gen} -P ${CMAKE_SOURCE_DIR}/cmake/xdp_embed.cmake
    DEPENDS ${obj} ${CMAKE_SOURCE_DIR}/cmake/xdp_embed.cmake)
  target_sources(ulnet_obj PRIVATE ${gen})
  foreach(t ulnet_obj ulnet_hooks_obj)
    if(TARGET ${t})
      target_compile_definitions(${t} PRIVATE ULN_HAVE_XDP)
      target_link_libraries(${t} PRIVATE PkgConfig::XDP) # its include directories
    endif()
  endforeach()
  foreach(t ulnet ulnet_static ulnet_test)
    if(TARGET ${t})
      target_link_libraries(${t} PRIVATE PkgConfig::XDP)
    endif()
  endforeach()
endfunction()
