# Install rules and the exported CMake package:
#   cmake --install build --prefix /opt/gearbox
#   find_package(gearbox CONFIG REQUIRED)     # with CMAKE_PREFIX_PATH=/opt/gearbox
#   target_link_libraries(app PRIVATE gearbox::gearbox gearbox::backends)
# The same two targets name the static layers or, built with -DGEARBOX_SHARED=ON,
# libgearbox.so (which holds the backends too).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(GEARBOX_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/gearbox)
if(GEARBOX_SHARED)
  # libgearbox.so (gearbox::gearbox) and gearbox::backends, which names it too.
  set(installed_targets gearbox_shared gearbox_shared_backends)
else()
  set(installed_targets gearbox ${GEARBOX_LAYERS})
endif()
install(TARGETS ${installed_targets}
        EXPORT gearboxTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/gearbox
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        FILES_MATCHING PATTERN "*.h")
install(EXPORT gearboxTargets NAMESPACE gearbox:: DESTINATION ${GEARBOX_CMAKE_DIR})

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/gearboxConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/gearboxConfig.cmake
                              INSTALL_DESTINATION ${GEARBOX_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/gearboxConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/gearboxConfig.cmake
              ${PROJECT_BINARY_DIR}/gearboxConfigVersion.cmake
        DESTINATION ${GEARBOX_CMAKE_DIR})
