# SPDX-License-Identifier: Apache-2.0
# Shared target settings: warnings, sanitizers, and the precompiled LibTorch header.

add_library(saturate_warnings INTERFACE)
target_compile_options(saturate_warnings INTERFACE -Wall -Wextra -Wno-unused-parameter)
if(SATURATE_WERROR)
  target_compile_options(saturate_warnings INTERFACE -Werror)
endif()
if(SATURATE_SANITIZE)
  target_compile_options(saturate_warnings INTERFACE -fsanitize=${SATURATE_SANITIZE}
                         -fno-omit-frame-pointer)
  target_link_options(saturate_warnings INTERFACE -fsanitize=${SATURATE_SANITIZE})
endif()

# One precompiled header for every target that includes LibTorch: building it costs one
# torch-heavy compile, and every other translation unit starts from it.
add_library(saturate_pch OBJECT ${PROJECT_SOURCE_DIR}/cmake/pch_anchor.cpp)
target_link_libraries(saturate_pch PRIVATE ${TORCH_LIBRARIES})
set_target_properties(saturate_pch PROPERTIES POSITION_INDEPENDENT_CODE ON)
target_compile_features(saturate_pch PRIVATE cxx_std_17)
if(SATURATE_USE_PCH)
  target_precompile_headers(saturate_pch PRIVATE ${PROJECT_SOURCE_DIR}/cmake/pch.h)
endif()

# Gives a target the shared PCH and the settings it was built with.
# Executables get -fPIC rather than CMake's -fPIE: GCC refuses a PCH built with the other flag,
# and -fPIC objects link into (default) PIE executables all the same.
function(saturate_use_pch target)
  get_target_property(type ${target} TYPE)
  if(type STREQUAL "EXECUTABLE")
    target_compile_options(${target} PRIVATE -fPIC)
  else()
    set_target_properties(${target} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  endif()
  if(SATURATE_USE_PCH)
    target_precompile_headers(${target} REUSE_FROM saturate_pch)
  endif()
endfunction()
