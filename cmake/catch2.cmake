# Catch2 for ratelimit's test executables (tests/ and tools/explore/tests/): v3 when installed,
# else v2 (Debian 12 ships 2.13). No FetchContent: CI has no network.
#
# Defines, once:
#   ratelimit_catch_main    the Catch2 main, compiled once and shared by every test executable
#                           (v2: tests/support/main.cpp; v3: Catch2::Catch2WithMain); its users
#                           include "support/catch.hpp" (the v2/v3 shim in tests/)
#   RATELIMIT_CATCH_ARGS    arguments for every run: random order (hidden order dependencies)
#                           and a warning for test cases that assert nothing
# and sets RATELIMIT_CATCH2_FOUND. Without Catch2 it defines nothing.
include_guard(GLOBAL)

find_package(Catch2 3 QUIET)
if(NOT Catch2_FOUND)
    find_package(Catch2 2 QUIET)
endif()
set(RATELIMIT_CATCH2_FOUND ${Catch2_FOUND})
if(NOT Catch2_FOUND)
    return()
endif()
message(STATUS "ratelimit: tests use Catch2 ${Catch2_VERSION}")

if(Catch2_VERSION VERSION_GREATER_EQUAL 3)
    add_library(ratelimit_catch_main INTERFACE)
    target_link_libraries(ratelimit_catch_main INTERFACE Catch2::Catch2WithMain)
else()
    add_library(ratelimit_catch_main OBJECT "${PROJECT_SOURCE_DIR}/tests/support/main.cpp")
    target_link_libraries(ratelimit_catch_main PUBLIC Catch2::Catch2)
    ratelimit_set_warnings(ratelimit_catch_main)
endif()
# "support/catch.hpp" and the other shared test pieces resolve from any test file.
target_include_directories(ratelimit_catch_main INTERFACE "${PROJECT_SOURCE_DIR}/tests")

set(RATELIMIT_CATCH_ARGS --order rand --warn NoAssertions)
