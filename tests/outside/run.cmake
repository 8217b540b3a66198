# The outside_project test (tests/CMakeLists.txt): installs the build tree into a
# temporary prefix, then configures, builds and runs tests/outside against it.
# It passes when the program prints "proved equivalent" and exits 0.
#
#   cmake -DLOOM_BINARY_DIR=<build> -DWORK_DIR=<scratch> -DCMAKE_BUILD_TYPE=<type>
#         -DCMAKE_CXX_COMPILER=<c++> -DCMAKE_MAKE_PROGRAM=<ninja> -P run.cmake
set(source_dir ${CMAKE_CURRENT_LIST_DIR})
set(prefix ${WORK_DIR}/prefix)
set(binary_dir ${WORK_DIR}/build)
file(REMOVE_RECURSE ${WORK_DIR})

# step(<name> <command>...): runs the command, fails the test on a non-zero exit.
function(step name)
  message(STATUS "outside_project: ${name}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "outside_project: ${name} failed (${rc}):\n${out}")
  endif()
endfunction()

step(install ${CMAKE_COMMAND} --install ${LOOM_BINARY_DIR} --prefix ${prefix})
step(configure ${CMAKE_COMMAND} -S ${source_dir} -B ${binary_dir} -G Ninja
     -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE}
     -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER} -DCMAKE_MAKE_PROGRAM=${CMAKE_MAKE_PROGRAM})
step(build ${CMAKE_COMMAND} --build ${binary_dir})

execute_process(COMMAND ${binary_dir}/verify_tiny RESULT_VARIABLE rc
                OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "outside_project: run (exit ${rc}):\n${out}${err}")
if(NOT rc EQUAL 0 OR NOT out MATCHES "proved equivalent")
  message(FATAL_ERROR "outside_project: expected \"proved equivalent\" and exit 0")
endif()
