# SPDX-License-Identifier: Apache-2.0
# Script mode (cmake -P): install BUILD_DIR into WORK_DIR/prefix, build EXAMPLE_DIR against it,
# run the program on a few steps. Fails on the first step that fails.
function(run_step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  message("${out}")
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
run_step(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
run_step(${CMAKE_COMMAND} -S ${EXAMPLE_DIR} -B ${WORK_DIR}/build -G Ninja
         -DCMAKE_BUILD_TYPE=Release -Dsaturate_DIR=${prefix}/lib/cmake/saturate
         -DCMAKE_PREFIX_PATH=${PREFIX_PATH}
         -DCUDNN_INCLUDE_PATH=${CUDNN_INCLUDE_PATH} -DCUDNN_LIBRARY_PATH=${CUDNN_LIBRARY_PATH}
         "-DCMAKE_CXX_COMPILER_LAUNCHER=${CXX_LAUNCHER}")
run_step(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run_step(${WORK_DIR}/build/train_fmnist fashion-mnist 20)
