# SPDX-License-Identifier: Apache-2.0
include(GoogleTest)

# saturate_add_test(NAME <module> SOURCES <files...> [LABELS <labels...>] [RUN_SERIAL])
# One GoogleTest executable per module, linked to the library and the fakes in tests/testing.
# RUN_SERIAL: tests that compare measured speeds, which another test on the same cores skews.
function(saturate_add_test)
  cmake_parse_arguments(T "RUN_SERIAL" "NAME" "SOURCES;LABELS" ${ARGN})
  set(target saturate_${T_NAME}_test)
  add_executable(${target} ${T_SOURCES})
  target_link_libraries(${target} PRIVATE saturate saturate_testing GTest::gtest GTest::gtest_main
                        saturate_warnings)
  target_compile_definitions(${target} PRIVATE
    SATURATE_TEST_FIXTURES_DIR="${PROJECT_BINARY_DIR}/tests/fixtures"
    SATURATE_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  saturate_use_pch(${target})
  if(NOT T_LABELS)
    set(T_LABELS unit)
  endif()
  # Listing a test binary loads LibTorch (~0.5 s alone, several s on a loaded machine).
  set(serial FALSE)
  if(T_RUN_SERIAL)
    set(serial TRUE)
  endif()
  gtest_discover_tests(${target} DISCOVERY_MODE PRE_TEST DISCOVERY_TIMEOUT 60
                       PROPERTIES LABELS "${T_LABELS}" TIMEOUT 600 RUN_SERIAL ${serial})
endfunction()
