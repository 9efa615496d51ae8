# ctest consumer_find_package: install this build into a prefix under WORK_DIR, then configure,
# build and run tests/cmake/consumer against it with find_package(ratelimit).
#
# Inputs (-D): RATELIMIT_BINARY_DIR, CONSUMER_SOURCE_DIR and those of consumer_common.cmake.
include("${CMAKE_CURRENT_LIST_DIR}/consumer_common.cmake")

file(REMOVE_RECURSE "${WORK_DIR}")
set(_prefix "${WORK_DIR}/prefix")

set(_install_args --install "${RATELIMIT_BINARY_DIR}" --prefix "${_prefix}")
if(CONFIG)
    list(APPEND _install_args --config "${CONFIG}")
endif()
consumer_run(install "${CMAKE_COMMAND}" ${_install_args})

if(NOT EXISTS "${_prefix}/share/cmake/ratelimit/ratelimitConfig.cmake")
    message(FATAL_ERROR "consumer test: no share/cmake/ratelimit/ratelimitConfig.cmake installed")
endif()

consumer_configure_build_run("${CONSUMER_SOURCE_DIR}" "${WORK_DIR}/build"
                             "-DCMAKE_PREFIX_PATH=${_prefix}")
