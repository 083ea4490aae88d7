# What `ninja install` puts where, and the three ways a user's build finds it:
# pkg-config (ulnet.pc), CMake (find_package(ulnet) -> ulnet::ulnet), man.
# Included from the top-level CMakeLists.txt after the targets exist.
include(CMakePackageConfigHelpers)

# One version everywhere: project(VERSION) is the source; the header's macros
# must agree with it (a release that bumps one and not the other fails here).
file(STRINGS ${PROJECT_SOURCE_DIR}/include/ulnet.h _uln_hv REGEX "^#define ULNET_VERSION_(MAJOR|MINOR|PATCH) ")
foreach(_part MAJOR MINOR PATCH)
  string(REGEX MATCH "ULNET_VERSION_${_part} ([0-9]+)" _m "${_uln_hv}")
  if(NOT CMAKE_MATCH_1 STREQUAL PROJECT_VERSION_${_part})
    message(FATAL_ERROR "include/ulnet.h: ULNET_VERSION_${_part} is '${CMAKE_MATCH_1}', "
                        "project(VERSION) says ${PROJECT_VERSION_${_part}}")
  endif()
endforeach()

# pkg-config. ulnet.pc names the install's own directories, absolutely: its
# rpath must (a program runs where it was linked, not where pkg-config ran),
# and -L must name the same library the rpath finds, so the file does not
# claim to be relocatable (a moved copy links and runs against the original).
# Static links: the archive needs pthread, libcrypto, libsodium where built in and, when built in, libpmix. PMIx is
# not a pkg-config requirement: a user of ulnet never includes its headers, and
# a machine without pmix.pc must still find ulnet.
set(ULN_PC_LIBS_PRIVATE "-lpthread")
list(JOIN CRYPTO_LDFLAGS " " _uln_crypto_ld) # libcrypto: src/seal/
string(APPEND ULN_PC_LIBS_PRIVATE " ${_uln_crypto_ld}")
if(SODIUM_FOUND) # libsodium: small sealed datagrams
  list(JOIN SODIUM_LDFLAGS " " _uln_sodium_ld)
  string(APPEND ULN_PC_LIBS_PRIVATE " ${_uln_sodium_ld}")
endif()
if(ULN_PMIX_PC)
  list(JOIN PMIX_LDFLAGS " " _uln_pmix_ld)
  string(APPEND ULN_PC_LIBS_PRIVATE " ${_uln_pmix_ld}")
endif()
if(ULN_XDP_FOUND) # the AF_XDP link: libxdp and libbpf, and theirs (libelf, zlib)
  list(TRANSFORM XDP_STATIC_LIBRARIES PREPEND "-l" OUTPUT_VARIABLE _uln_xdp_ld)
  list(JOIN _uln_xdp_ld " " _uln_xdp_ld)
  string(APPEND ULN_PC_LIBS_PRIVATE " ${_uln_xdp_ld}")
endif()
# The paths and the rpath are decided at install time, when the prefix is
# final: ulnet.pc.in is configured once now, with its @ULN_PC_*@ kept for the
# install step.
foreach(_v PREFIX LIBDIR INCLUDEDIR RPATH)
  set(ULN_PC_${_v} "@ULN_PC_${_v}@")
endforeach()
configure_file(ulnet.pc.in ulnet.pc.install @ONLY)
# A library directory the linker searches by itself (/usr/lib/<triplet>: a
# distribution's, where the package manager runs ldconfig) needs no rpath; any
# other (/usr/local, $HOME/opt, a staging directory) gets one, so a program
# linked as the README says runs without LD_LIBRARY_PATH or ldconfig. The
# rpath is the absolute library directory of the install (under DESTDIR: the
# final one), as CMake's own install rpath would be: a relative PKG_CONFIG_PATH
# must not turn it into a path relative to where the program runs.
set(ULN_SYSTEM_LIBDIRS ${CMAKE_C_IMPLICIT_LINK_DIRECTORIES})
install(CODE "
  set(_libdir \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}\")
  if(IS_ABSOLUTE \"${CMAKE_INSTALL_LIBDIR}\")
    set(_libdir \"${CMAKE_INSTALL_LIBDIR}\")
  endif()
  get_filename_component(_libdir \"\${_libdir}\" ABSOLUTE)
  set(_incdir \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_INCLUDEDIR}\")
  if(IS_ABSOLUTE \"${CMAKE_INSTALL_INCLUDEDIR}\")
    set(_incdir \"${CMAKE_INSTALL_INCLUDEDIR}\")
  endif()
  get_filename_component(ULN_PC_PREFIX \"\${CMAKE_INSTALL_PREFIX}\" ABSOLUTE)
  get_filename_component(ULN_PC_INCLUDEDIR \"\${_incdir}\" ABSOLUTE)
  set(ULN_PC_LIBDIR \"\${_libdir}\")
  set(ULN_PC_RPATH \" -Wl,-rpath,\${_libdir}\")
  foreach(_d ${ULN_SYSTEM_LIBDIRS})
    get_filename_component(_d \"\${_d}\" REALPATH)
    if(_d STREQUAL _libdir)
      set(ULN_PC_RPATH \"\")
    endif()
  endforeach()
  configure_file(\"${CMAKE_BINARY_DIR}/ulnet.pc.install\" \"${CMAKE_BINARY_DIR}/ulnet.pc\" @ONLY)
")
install(FILES ${CMAKE_BINARY_DIR}/ulnet.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# CMake: find_package(ulnet) gives the imported target ulnet::ulnet (the
# shared library; its include directory comes with it).
set(ULN_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/ulnet)
set_target_properties(ulnet PROPERTIES EXPORT_NAME ulnet)
install(TARGETS ulnet EXPORT ulnetTargets)
install(TARGETS ulnet_static ulnrun ulnperf ulninfo ulnetd)
install(EXPORT ulnetTargets NAMESPACE ulnet:: DESTINATION ${ULN_CMAKE_DIR})
configure_package_config_file(cmake/ulnetConfig.cmake.in ulnetConfig.cmake
                              INSTALL_DESTINATION ${ULN_CMAKE_DIR})
# 0.x: every minor release may change the interface.
write_basic_package_version_file(ulnetConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/ulnetConfig.cmake ${CMAKE_BINARY_DIR}/ulnetConfigVersion.cmake
        DESTINATION ${ULN_CMAKE_DIR})

install(FILES include/ulnet.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

# Man pages: docs/man/man1 (the tools), docs/man/man8 (ulnetd), docs/man/man3 (the API; pages that
# document several functions are reached from the others by .so links).
install(DIRECTORY docs/man/ DESTINATION ${CMAKE_INSTALL_MANDIR} FILES_MATCHING PATTERN "*.[138]")

# ulnetd's systemd unit (Type=simple, the capabilities it needs, restarted on
# failure), beside its man page. Relative to the prefix (a distribution sets
# ULN_SYSTEMD_UNITDIR to systemd's own, e.g. /lib/systemd/system); its
# options come from ULN_SYSTEMD_ENVFILE (ULNETD_OPTS=...).
set(ULN_SYSTEMD_UNITDIR lib/systemd/system CACHE STRING "where ulnetd.service is installed")
set(ULN_SYSTEMD_ENVFILE /etc/default/ulnetd CACHE STRING "ulnetd.service's options file")
# Written at install time: ExecStart names ulnetd where this install puts it
# (cmake --install --prefix P included).
install(CODE "
  set(ULN_BINDIR \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}\")
  set(ULN_SYSTEMD_ENVFILE \"${ULN_SYSTEMD_ENVFILE}\")
  configure_file(\"${CMAKE_SOURCE_DIR}/tools/ulnetd/ulnetd.service.in\"
                 \"${CMAKE_BINARY_DIR}/ulnetd.service\" @ONLY)")
install(FILES ${CMAKE_BINARY_DIR}/ulnetd.service DESTINATION ${ULN_SYSTEMD_UNITDIR})

# `ninja uninstall`: removes every file the last install wrote (CMake's
# install_manifest.txt), then the directories that install left empty, up to
# the prefix. Nothing is removed that the install did not write.
configure_file(cmake/uninstall.cmake.in uninstall.cmake @ONLY)
add_custom_target(uninstall COMMAND ${CMAKE_COMMAND} -P ${CMAKE_BINARY_DIR}/uninstall.cmake
                  COMMENT "Removing the files of the last install" VERBATIM)
