# ctest consumer_fetchcontent: pack the checkout's tracked files (what a release archive
# holds; `git ls-files`, so files not yet added to git are left out) into a tarball, then
# configure, build and run tests/cmake/fetchcontent, which fetches that tarball with
# FetchContent (URL and URL_HASH, no network).
#
# Inputs (-D): RATELIMIT_SOURCE_DIR, FETCH_SOURCE_DIR and those of consumer_common.cmake.
include("${CMAKE_CURRENT_LIST_DIR}/consumer_common.cmake")

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")
find_program(_git NAMES git REQUIRED)
execute_process(
    COMMAND "${_git}" ls-files
    WORKING_DIRECTORY "${RATELIMIT_SOURCE_DIR}"
    OUTPUT_FILE "${WORK_DIR}/files.txt"
    RESULT_VARIABLE _result)
if(NOT _result EQUAL 0)
    message(FATAL_ERROR "consumer test: git ls-files failed in ${RATELIMIT_SOURCE_DIR}")
endif()
execute_process(
    COMMAND "${CMAKE_COMMAND}" -E tar czf "${WORK_DIR}/ratelimit.tar.gz"
            "--files-from=${WORK_DIR}/files.txt"
    WORKING_DIRECTORY "${RATELIMIT_SOURCE_DIR}"
    RESULT_VARIABLE _result)
if(NOT _result EQUAL 0)
    message(FATAL_ERROR "consumer test: packing the checkout failed")
endif()
file(SHA256 "${WORK_DIR}/ratelimit.tar.gz" _sha256)

consumer_configure_build_run("${FETCH_SOURCE_DIR}" "${WORK_DIR}/build"
                             "-DRATELIMIT_ARCHIVE=file://${WORK_DIR}/ratelimit.tar.gz"
                             "-DRATELIMIT_ARCHIVE_SHA256=${_sha256}")
