# The installable package: libengram_offload.so (SONAME libengram_offload.so.<major>.<minor>) and
# libengram_offload.a, both made of the objects of the library folders an engine links (core, sys, host, sched, cpu,
# plan, cuda when built, engine); the public headers of include/engram (with the generated version.hpp); the CMake
# package engram_offloadConfig.cmake + ConfigVersion with imported targets; engram_offload.pc. The folder libraries
# stay what the CLI, tests and benches link; the harnesses (replay, report, bench) are not part of the package.
# 0.x releases may change the ABI with every minor version, hence the SONAME carries major.minor.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(engram_package_parts engram_core engram_sys engram_host engram_sched engram_cpu engram_plan engram_metrics engram_engine)
if(ENGRAM_HAVE_CUDA)
  list(INSERT engram_package_parts 6 engram_cuda)
endif()
set(engram_package_objects)
foreach(part ${engram_package_parts})
  list(APPEND engram_package_objects $<TARGET_OBJECTS:${part}>)
endforeach()

# Public usage: the headers of include/engram (and the generated version.hpp) and nlohmann_json (engine.hpp).
function(engram_package_usage target)
  target_include_directories(${target} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
                             $<BUILD_INTERFACE:${PROJECT_BINARY_DIR}/include>
                             $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_compile_features(${target} PUBLIC cxx_std_20)
  target_link_libraries(${target} PUBLIC nlohmann_json::nlohmann_json)
  add_dependencies(${target} ${engram_package_parts})
endfunction()

add_library(engram_offload SHARED ${engram_package_objects})
engram_package_usage(engram_offload)
target_link_libraries(engram_offload PRIVATE PkgConfig::NUMA PkgConfig::HWLOC PkgConfig::ICU fmt::fmt Threads::Threads)
target_link_options(engram_offload PRIVATE LINKER:--no-undefined)  # every symbol it needs is in it or its deps
set_target_properties(engram_offload PROPERTIES VERSION ${PROJECT_VERSION}
                      SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR} EXPORT_NAME engram_offload)

add_library(engram_offload_static STATIC ${engram_package_objects})
engram_package_usage(engram_offload_static)
target_link_libraries(engram_offload_static PUBLIC PkgConfig::NUMA PkgConfig::HWLOC PkgConfig::ICU fmt::fmt Threads::Threads)
set_target_properties(engram_offload_static PROPERTIES OUTPUT_NAME engram_offload EXPORT_NAME static)

set(engram_package_targets engram_offload engram_offload_static)
set(ENGRAM_PC_CUDA_LIBS "")
set(ENGRAM_PC_CUDA_CFLAGS "")
if(ENGRAM_HAVE_CUDA)
  target_link_libraries(engram_offload PRIVATE CUDA::cudart CUDA::cublas)
  # The installed library finds the CUDA runtime it was linked against by its RUNPATH, so neither the consumer's link
  # nor its run depends on the loader's configuration knowing the toolkit's library directory.
  set_target_properties(engram_offload PROPERTIES INSTALL_RPATH "${CUDAToolkit_LIBRARY_DIR}")
  target_link_libraries(engram_offload_static PUBLIC CUDA::cudart CUDA::cublas)
  # The `cuda` component: what a consumer of the CUDA backend needs besides the library.
  add_library(engram_offload_cuda INTERFACE)
  target_link_libraries(engram_offload_cuda INTERFACE engram_offload CUDA::cudart)
  target_compile_definitions(engram_offload_cuda INTERFACE ENGRAM_HAVE_CUDA=1)
  set_target_properties(engram_offload_cuda PROPERTIES EXPORT_NAME cuda)
  list(APPEND engram_package_targets engram_offload_cuda)
  set(ENGRAM_PC_CUDA_LIBS "-L${CUDAToolkit_LIBRARY_DIR} -lcudart -lcublas")
  set(ENGRAM_PC_CUDA_CFLAGS " -DENGRAM_HAVE_CUDA=1")
endif()

set(engram_cmake_dir ${CMAKE_INSTALL_LIBDIR}/cmake/engram_offload)
install(TARGETS ${engram_package_targets} EXPORT engram_offloadTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/engram ${PROJECT_BINARY_DIR}/include/engram
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} FILES_MATCHING PATTERN "*.hpp")
install(EXPORT engram_offloadTargets NAMESPACE engram_offload:: DESTINATION ${engram_cmake_dir})
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/engram_offloadConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/engram_offloadConfig.cmake INSTALL_DESTINATION ${engram_cmake_dir})
# 0.x: a consumer asking for 0.1 gets 0.1.z only.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/engram_offloadConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/engram_offloadConfig.cmake ${PROJECT_BINARY_DIR}/engram_offloadConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/cuda_nvtx_target.cmake DESTINATION ${engram_cmake_dir})
# Relocatable: the prefix is found from the .pc file's own place (cmake --install --prefix P works for any P).
file(RELATIVE_PATH ENGRAM_PC_TO_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
configure_file(${PROJECT_SOURCE_DIR}/cmake/engram_offload.pc.in ${PROJECT_BINARY_DIR}/engram_offload.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/engram_offload.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
install(FILES ${PROJECT_SOURCE_DIR}/LICENSE ${PROJECT_SOURCE_DIR}/CHANGELOG.md DESTINATION ${CMAKE_INSTALL_DOCDIR})
