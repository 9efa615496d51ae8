# Helpers for the consumer test scripts (run with cmake -P).
#
# Inputs (-D): WORK_DIR, CXX_COMPILER, GENERATOR, MAKE_PROGRAM, CONFIG (may be empty),
# WITH_REDIS and WITH_PROMETHEUS (optional).

foreach(_var IN ITEMS WORK_DIR CXX_COMPILER GENERATOR)
    if(NOT DEFINED ${_var} OR "${${_var}}" STREQUAL "")
        message(FATAL_ERROR "consumer test: ${_var} is not set")
    endif()
endforeach()

# consumer_run(<step name> <command...>): run a command, fail the test with its output if it fails.
function(consumer_run step)
    message(STATUS "consumer test: ${step}: ${ARGN}")
    execute_process(
        COMMAND ${ARGN}
        RESULT_VARIABLE _result
        OUTPUT_VARIABLE _output
        ERROR_VARIABLE _output)
    if(NOT _result EQUAL 0)
        message(FATAL_ERROR "consumer test: ${step} failed (${_result}):\n${_output}")
    endif()
endfunction()

# consumer_configure_build_run(<source dir> <build dir> <extra configure args...>)
function(consumer_configure_build_run source_dir build_dir)
    set(_configure_args -S "${source_dir}" -B "${build_dir}" -G "${GENERATOR}"
                        "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}")
    if(MAKE_PROGRAM)
        list(APPEND _configure_args "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
    endif()
    set(_build_args --build "${build_dir}")
    if(CONFIG)
        list(APPEND _configure_args "-DCMAKE_BUILD_TYPE=${CONFIG}")
        list(APPEND _build_args --config "${CONFIG}")
    endif()
    if(WITH_REDIS)
        list(APPEND _configure_args "-DCONSUMER_WITH_REDIS=ON")
    endif()
    if(WITH_PROMETHEUS)
        list(APPEND _configure_args "-DCONSUMER_WITH_PROMETHEUS=ON")
    endif()

    consumer_run(configure "${CMAKE_COMMAND}" ${_configure_args} ${ARGN})
    consumer_run(build "${CMAKE_COMMAND}" ${_build_args})

    file(GLOB_RECURSE _exe LIST_DIRECTORIES false "${build_dir}/consumer" "${build_dir}/consumer.exe"
         "${build_dir}/*/consumer" "${build_dir}/*/consumer.exe")
    if(NOT _exe)
        message(FATAL_ERROR "consumer test: no consumer executable under ${build_dir}")
    endif()
    list(GET _exe 0 _exe)
    consumer_run(run "${_exe}")
    message(STATUS "consumer test: ${_exe} passed")
endfunction()
