# Every dependency comes from Debian's packages (see tools/setup.sh).
find_package(absl REQUIRED)
find_package(Boost 1.74 REQUIRED)  # Boost.Graph is header-only for what we use.
find_package(nlohmann_json 3.10 REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(Z3 REQUIRED IMPORTED_TARGET z3)
find_package(Threads REQUIRED)
# yaml-cpp for Megatron-style training configurations.
find_package(yaml-cpp REQUIRED)
# OpenBLAS for the CPU backend's matrix products.
pkg_check_modules(OPENBLAS REQUIRED IMPORTED_TARGET openblas)
# jemalloc for the programs (the derivation and the plan checks allocate many small
# objects; glibc's allocator costs them about a third of their time). Optional:
# without it the programs use the system allocator.
find_library(LOOM_JEMALLOC NAMES jemalloc)
function(loom_use_fast_allocator target)
  if(LOOM_JEMALLOC)
    target_link_libraries(${target} PRIVATE ${LOOM_JEMALLOC})
  endif()
endfunction()
if(LOOM_BUILD_TESTS)
  find_package(GTest REQUIRED)
  include(GoogleTest)
endif()
if(LOOM_BUILD_BENCH)
  find_package(benchmark REQUIRED)
endif()

# CUDA Toolkit, cuBLAS and NCCL are optional: when all are found the CUDA backend
# is compiled, as a plugin (exec/CMakeLists.txt). cuBLAS and NCCL come from the
# toolkit's folders or, where it lacks them, from .cuda-deps (tools/setup.sh).
set(LOOM_HAVE_CUDA OFF)
if(LOOM_WITH_CUDA)
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    find_package(CUDAToolkit QUIET)
    set(_loom_wheels ${PROJECT_SOURCE_DIR}/.cuda-deps/nvidia)
    find_path(NCCL_INCLUDE_DIR nccl.h
              HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include ${_loom_wheels}/nccl/include)
    find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2
                 HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64 ${_loom_wheels}/nccl/lib)
    find_path(LOOM_CUBLAS_INCLUDE_DIR cublas_v2.h
              HINTS ${CUDAToolkit_INCLUDE_DIRS} ${_loom_wheels}/cu13/include)
    find_library(LOOM_CUBLAS_LIBRARY NAMES cublas libcublas.so.13
                 HINTS ${CUDAToolkit_LIBRARY_DIR} ${_loom_wheels}/cu13/lib)
    if(CUDAToolkit_FOUND AND NCCL_INCLUDE_DIR AND NCCL_LIBRARY AND LOOM_CUBLAS_INCLUDE_DIR
       AND LOOM_CUBLAS_LIBRARY)
      enable_language(CUDA)
      set(CMAKE_CUDA_STANDARD 17)
      if(NOT CMAKE_CUDA_ARCHITECTURES)
        set(CMAKE_CUDA_ARCHITECTURES 80 90)
      endif()
      set(LOOM_HAVE_CUDA ON)
      add_library(NCCL::nccl UNKNOWN IMPORTED)
      set_target_properties(NCCL::nccl PROPERTIES IMPORTED_LOCATION ${NCCL_LIBRARY}
                            INTERFACE_INCLUDE_DIRECTORIES ${NCCL_INCLUDE_DIR})
      add_library(Loom::cublas UNKNOWN IMPORTED)
      set_target_properties(Loom::cublas PROPERTIES IMPORTED_LOCATION ${LOOM_CUBLAS_LIBRARY}
                            INTERFACE_INCLUDE_DIRECTORIES ${LOOM_CUBLAS_INCLUDE_DIR})
    endif()
  endif()
endif()
message(STATUS "Loom: CUDA/NCCL backend ${LOOM_HAVE_CUDA}")
