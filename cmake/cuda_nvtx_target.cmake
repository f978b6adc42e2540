# Included before find_package(CUDAToolkit) (this project) and find_dependency(CUDAToolkit) (its installed package).
# CMake 3.25's FindCUDAToolkit marks CUDA::nvToolsExt deprecated without checking that the target exists; CUDA 12.9+
# ships no libnvToolsExt (NVTX 3 is header-only), so stock CMake 3.25 fails there. An empty target gives it
# something to mark; nothing in this project links NVTX.
if(CMAKE_VERSION VERSION_LESS 3.26 AND NOT TARGET CUDA::nvToolsExt)
  find_library(ENGRAM_NVTOOLSEXT_LIBRARY NAMES nvToolsExt nvToolsExt64
               HINTS "${CUDAToolkit_ROOT}/lib64" /usr/local/cuda/lib64 ENV CUDA_PATH PATH_SUFFIXES lib64)
  if(NOT ENGRAM_NVTOOLSEXT_LIBRARY)
    add_library(CUDA::nvToolsExt INTERFACE IMPORTED)
  endif()
endif()
