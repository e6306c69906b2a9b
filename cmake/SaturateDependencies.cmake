# SPDX-License-Identifier: Apache-2.0
# find_package for every dependency, with a message that names the Debian package when one is
# missing (scripts/install-deps installs them all).

function(saturate_require pkg debian)
  find_package(${pkg} ${ARGN} QUIET)
  if(NOT ${pkg}_FOUND)
    message(FATAL_ERROR "saturate: ${pkg} not found; run scripts/install-deps "
                        "(or apt-get install ${debian})")
  endif()
endfunction()

# LibTorch from PyPI's torch wheel: the Makefile passes
# CMAKE_PREFIX_PATH=$(python -c 'import torch; print(torch.utils.cmake_prefix_path)').
# The wheel is CUDA-enabled; its config looks for cuDNN, which pip keeps beside torch.
if(SATURATE_PYTHON AND NOT CUDNN_LIBRARY_PATH)
  execute_process(
    COMMAND ${SATURATE_PYTHON} -c
      "import os, nvidia.cudnn as c; d=os.path.dirname(c.__file__) if c.__file__ else list(c.__path__)[0]; print(d)"
    OUTPUT_VARIABLE _cudnn_root OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(_cudnn_root AND EXISTS "${_cudnn_root}/include/cudnn.h")
    file(GLOB _cudnn_lib "${_cudnn_root}/lib/libcudnn.so*")
    list(GET _cudnn_lib 0 _cudnn_lib)
    set(CUDNN_INCLUDE_PATH "${_cudnn_root}/include" CACHE PATH "cuDNN headers")
    set(CUDNN_LIBRARY_PATH "${_cudnn_lib}" CACHE FILEPATH "cuDNN library")
  endif()
endif()
find_package(Torch REQUIRED)
if(Torch_VERSION VERSION_LESS 2.4)
  message(FATAL_ERROR "saturate: LibTorch ${Torch_VERSION} is too old; saturate needs >= 2.4 "
                      "(scripts/install-deps installs a pinned wheel)")
endif()
if(TARGET torch_cuda)
  set(SATURATE_HAS_CUDA 1)
else()
  set(SATURATE_HAS_CUDA 0)
endif()
message(STATUS "saturate: LibTorch ${Torch_VERSION}, CUDA paths ${SATURATE_HAS_CUDA}")

saturate_require(nlohmann_json nlohmann-json3-dev 3.9)
saturate_require(spdlog libspdlog-dev)
saturate_require(ZLIB zlib1g-dev)
saturate_require(JPEG libjpeg62-turbo-dev)
saturate_require(PNG libpng-dev)
if(SATURATE_BUILD_CLI)
  saturate_require(CLI11 libcli11-dev)
endif()
if(SATURATE_BUILD_TESTS)
  saturate_require(GTest libgtest-dev)
endif()
if(SATURATE_BUILD_BENCH)
  saturate_require(benchmark libbenchmark-dev)
endif()
find_package(Threads REQUIRED)

# c10d's Gloo backend: the wheel exports USE_C10D_GLOO but ships no gloo/ headers. Debian's
# libgloo-dev provides them; only c10d's API is used, and torch's own Gloo is what links (never
# another libgloo).
find_path(SATURATE_GLOO_INCLUDE_DIR gloo/algorithm.h)
if(NOT SATURATE_GLOO_INCLUDE_DIR)
  message(FATAL_ERROR "saturate: Gloo headers (gloo/algorithm.h) not found; run "
                      "scripts/install-deps (or apt-get install libgloo-dev)")
endif()
# c10d's NCCL backend needs nccl.h and the CUDA headers it was built with: pip keeps them in
# site-packages/nvidia beside torch. Without them the NCCL backend is left out (Gloo still
# carries CUDA tensors, through host memory).
set(SATURATE_HAS_NCCL 0)
if(SATURATE_HAS_CUDA AND SATURATE_PYTHON)
  execute_process(
    COMMAND ${SATURATE_PYTHON} -c
      "import os, torch; print(os.path.join(os.path.dirname(os.path.dirname(torch.__file__)), 'nvidia'))"
    OUTPUT_VARIABLE _nvidia_root OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(_nvidia_root AND EXISTS "${_nvidia_root}/nccl/include/nccl.h")
    set(SATURATE_NCCL_INCLUDE_DIRS "${_nvidia_root}/nccl/include")
    if(EXISTS "${_nvidia_root}/cu13/include")
      list(APPEND SATURATE_NCCL_INCLUDE_DIRS "${_nvidia_root}/cu13/include")
    endif()
    set(SATURATE_HAS_NCCL 1)
  endif()
endif()
message(STATUS "saturate: Gloo headers in ${SATURATE_GLOO_INCLUDE_DIR}, NCCL backend ${SATURATE_HAS_NCCL}")
