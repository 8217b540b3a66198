# `cmake --install build --prefix P` installs Loom as a CMake package (docs/library.md):
#   P/bin/loom                           the command
#   P/lib/libloom_*.a                    the libraries, exported as Loom::loom_*
#   P/lib/libloom_cuda.so                the CUDA backend, a plugin (in a CUDA build)
#   P/include/{api,ir,verify,...}/*.h    the headers, at their repository paths
#   P/lib/cmake/Loom/                    LoomConfig.cmake, its version file, the targets
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# Every library of api/loom.h's closure, in dependency order.
set(LOOM_INSTALLED_LIBRARIES loom_ir loom_smt loom_models loom_transform loom_schedule
    loom_verify loom_exec loom_api)
set(LOOM_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/Loom)

install(TARGETS ${LOOM_INSTALLED_LIBRARIES} EXPORT LoomTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS loom RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# The CUDA plugin beside the libraries, where the installed command looks for it
# (exec/cuda_plugin.h).
if(TARGET loom_cuda)
  install(TARGETS loom_cuda LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()

# Headers: every *.h of the libraries' folders (exec/cuda included), so that all
# that api/loom.h reaches is there.
foreach(dir api ir smt models transform schedule verify exec)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
          FILES_MATCHING PATTERN "*.h")
endforeach()

install(EXPORT LoomTargets NAMESPACE Loom:: DESTINATION ${LOOM_CMAKE_DIR})

# LoomConfig.cmake finds the dependencies again. The CUDA backend is no
# dependency of the libraries: it is the plugin, loaded at run time.
configure_package_config_file(
  ${CMAKE_CURRENT_LIST_DIR}/LoomConfig.cmake.in
  ${PROJECT_BINARY_DIR}/LoomConfig.cmake
  INSTALL_DESTINATION ${LOOM_CMAKE_DIR})
# The API is 0.x: only the same minor version is compatible.
write_basic_package_version_file(
  ${PROJECT_BINARY_DIR}/LoomConfigVersion.cmake
  VERSION ${PROJECT_VERSION}
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/LoomConfig.cmake ${PROJECT_BINARY_DIR}/LoomConfigVersion.cmake
        DESTINATION ${LOOM_CMAKE_DIR})
