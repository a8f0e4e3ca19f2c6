# Installs the library with a package config so another project can find_package(layerinit).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS layerinit EXPORT layerinitTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
foreach(dir dtypes kernels memory init stacking checkpoint)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/layerinit/${dir}
          FILES_MATCHING PATTERN "*.hpp" PATTERN "*.cuh")
endforeach()
install(FILES ${PROJECT_SOURCE_DIR}/layerinit.hpp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/layerinit)
install(FILES ${PROJECT_BINARY_DIR}/generated/layerinit/config.hpp
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/layerinit/layerinit)
install(EXPORT layerinitTargets NAMESPACE layerinit:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/layerinit)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/layerinitConfig.cmake.in
  ${PROJECT_BINARY_DIR}/layerinitConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/layerinit)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/layerinitConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/layerinitConfig.cmake ${PROJECT_BINARY_DIR}/layerinitConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/layerinit)
