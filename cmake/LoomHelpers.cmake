# loom_cc_library(NAME <target> [HDRS ...] [SRCS ...] [DEPS ...])
# One library per folder. A library without sources is an INTERFACE target.
function(loom_cc_library)
  cmake_parse_arguments(ARG "" "NAME" "HDRS;SRCS;DEPS" ${ARGN})
  if(ARG_SRCS)
    add_library(${ARG_NAME} STATIC ${ARG_SRCS} ${ARG_HDRS})
    target_include_directories(${ARG_NAME} PUBLIC
      $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>)
    target_link_libraries(${ARG_NAME} PUBLIC ${ARG_DEPS})
  else()
    add_library(${ARG_NAME} INTERFACE)
    target_include_directories(${ARG_NAME} INTERFACE
      $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>)
    target_link_libraries(${ARG_NAME} INTERFACE ${ARG_DEPS})
  endif()
endfunction()

# loom_cc_test(NAME <binary> SRCS ... DEPS ...)
# One GoogleTest binary per folder; every TEST becomes a CTest test.
function(loom_cc_test)
  cmake_parse_arguments(ARG "" "NAME" "SRCS;DEPS" ${ARGN})
  add_executable(${ARG_NAME} ${ARG_SRCS})
  target_link_libraries(${ARG_NAME} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gmock GTest::gtest_main)
  gtest_discover_tests(${ARG_NAME} DISCOVERY_TIMEOUT 60
    PROPERTIES ENVIRONMENT "LOOM_SOURCE_DIR=${PROJECT_SOURCE_DIR}")
endfunction()
