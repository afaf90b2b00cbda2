# Installs the headers (public API and device code) and a package config so that find_package(kda) works.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS kda EXPORT kdaTargets)
install(DIRECTORY "${PROJECT_SOURCE_DIR}/include/" "${PROJECT_SOURCE_DIR}/kernels/"
        DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}" FILES_MATCHING PATTERN "*.hpp" PATTERN "*.h")
install(EXPORT kdaTargets NAMESPACE kda:: DESTINATION "${CMAKE_INSTALL_LIBDIR}/cmake/kda")
configure_package_config_file("${PROJECT_SOURCE_DIR}/cmake/kdaConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/kdaConfig.cmake" INSTALL_DESTINATION "${CMAKE_INSTALL_LIBDIR}/cmake/kda")
write_basic_package_version_file("${PROJECT_BINARY_DIR}/kdaConfigVersion.cmake" COMPATIBILITY SameMinorVersion
  ARCH_INDEPENDENT)
install(FILES "${PROJECT_BINARY_DIR}/kdaConfig.cmake" "${PROJECT_BINARY_DIR}/kdaConfigVersion.cmake"
        DESTINATION "${CMAKE_INSTALL_LIBDIR}/cmake/kda")
