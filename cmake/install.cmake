# Installs the library with a package config so another project can find_package(layerinit).
# Headers: each layer installs its own public headers (cmake/modules.cmake) under
# include/layerinit/<folder>/; private ones (checkpoint/detail.hpp) stay behind.
include(CMakePackageConfigHelpers)

install(TARGETS layerinit EXPORT layerinitTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${PROJECT_SOURCE_DIR}/layerinit.hpp ${PROJECT_BINARY_DIR}/generated/layerinit/config.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/layerinit)
install(EXPORT layerinitTargets NAMESPACE layerinit:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/layerinit)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/layerinitConfig.cmake.in
  ${PROJECT_BINARY_DIR}/layerinitConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/layerinit)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/layerinitConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/layerinitConfig.cmake ${PROJECT_BINARY_DIR}/layerinitConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/layerinit)
