# SPDX-License-Identifier: Apache-2.0
# Install rules and the saturate CMake package: find_package(saturate) gives saturate::saturate.
include(CMakePackageConfigHelpers)

install(TARGETS saturate EXPORT saturateTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/saturate ${PROJECT_BINARY_DIR}/include/saturate
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.h")
install(EXPORT saturateTargets NAMESPACE saturate::
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/saturate)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/saturateConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/saturateConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/saturate)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/saturateConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/saturateConfig.cmake
              ${PROJECT_BINARY_DIR}/saturateConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/saturate)
