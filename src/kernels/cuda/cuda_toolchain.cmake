# Decides once per configure whether the CUDA plugin is built, and enables the CUDA language
# in the directory that includes this file (src/device/cuda and src/kernels/cuda do).
#
# Built when PIER_CUDA is ON, PIER_SANITIZE is OFF (the sanitizer pass builds unit tests
# only) and nvcc is found (check_language: the build goes on without it). Sets
# PIER_CUDA_ENABLED in the including scope.
get_property(_pier_cuda_decided GLOBAL PROPERTY PIER_CUDA_DECIDED)
if(NOT _pier_cuda_decided)
  set(_pier_cuda_enabled OFF)
  if(NOT PIER_CUDA)
    message(STATUS "CUDA plugin: off (PIER_CUDA=OFF); pier runs on the CPU")
  elseif(PIER_SANITIZE)
    message(STATUS "CUDA plugin: skipped in the sanitizer build")
  else()
    include(CheckLanguage)
    if(NOT CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES ${PIER_CUDA_ARCHITECTURES})
    endif()
    check_language(CUDA)
    if(CMAKE_CUDA_COMPILER)
      set(_pier_cuda_enabled ON)
      message(STATUS "CUDA plugin: ${CMAKE_CUDA_COMPILER}, architectures ${PIER_CUDA_ARCHITECTURES}")
    else()
      message(STATUS "CUDA plugin: nvcc not found; building without it (pier runs on the CPU)")
    endif()
  endif()
  set_property(GLOBAL PROPERTY PIER_CUDA_ENABLED ${_pier_cuda_enabled})
  set_property(GLOBAL PROPERTY PIER_CUDA_DECIDED TRUE)
endif()

get_property(PIER_CUDA_ENABLED GLOBAL PROPERTY PIER_CUDA_ENABLED)
if(PIER_CUDA_ENABLED)
  set(CMAKE_CUDA_ARCHITECTURES ${PIER_CUDA_ARCHITECTURES})
  enable_language(CUDA)
  # C++17 for .cu files: CMake 3.25 knows no CUDA20 flags for nvcc.
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  set(CMAKE_CUDA_EXTENSIONS OFF)
  find_package(CUDAToolkit REQUIRED)
endif()
