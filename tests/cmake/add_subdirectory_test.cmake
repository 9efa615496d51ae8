# ctest consumer_add_subdirectory: configure, build and run tests/cmake/subdir, a project that
# pulls ratelimit in with add_subdirectory.
#
# Inputs (-D): RATELIMIT_SOURCE_DIR, SUBDIR_SOURCE_DIR and those of consumer_common.cmake.
include("${CMAKE_CURRENT_LIST_DIR}/consumer_common.cmake")

file(REMOVE_RECURSE "${WORK_DIR}")
consumer_configure_build_run("${SUBDIR_SOURCE_DIR}" "${WORK_DIR}/build"
                             "-DRATELIMIT_SOURCE_DIR=${RATELIMIT_SOURCE_DIR}")
