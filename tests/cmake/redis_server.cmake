# Start or stop a throw-away redis-server for the Redis examples (ctest fixture
# "ratelimit_redis_server"). It listens only on a unix socket in DIR (no TCP port, so parallel
# builds never collide), saves nothing, and is stopped by the cleanup test.
#
#   cmake -DACTION=start|stop -DDIR=<dir> [-DREDIS_SERVER=<path>] -P redis_server.cmake
if(NOT DIR)
    message(FATAL_ERROR "redis_server.cmake: DIR is not set")
endif()
set(_socket "${DIR}/redis.sock")
set(_pidfile "${DIR}/redis.pid")

function(_redis_stop)
    if(EXISTS "${_pidfile}")
        file(READ "${_pidfile}" _pid)
        string(STRIP "${_pid}" _pid)
        if(_pid MATCHES "^[0-9]+$")
            execute_process(COMMAND kill "${_pid}" RESULT_VARIABLE _ignored ERROR_QUIET)
            foreach(_i RANGE 50) # up to ~5 s for a clean exit
                execute_process(COMMAND kill -0 "${_pid}" RESULT_VARIABLE _alive ERROR_QUIET)
                if(NOT _alive EQUAL 0)
                    break()
                endif()
                execute_process(COMMAND "${CMAKE_COMMAND}" -E sleep 0.1)
            endforeach()
        endif()
        file(REMOVE "${_pidfile}")
    endif()
    file(REMOVE "${_socket}")
endfunction()

if(ACTION STREQUAL "stop")
    _redis_stop()
    return()
elseif(NOT ACTION STREQUAL "start")
    message(FATAL_ERROR "redis_server.cmake: ACTION must be start or stop")
endif()

if(NOT REDIS_SERVER)
    set(REDIS_SERVER redis-server)
endif()
_redis_stop() # a server left over from an interrupted run
file(MAKE_DIRECTORY "${DIR}")
execute_process(
    COMMAND
        "${REDIS_SERVER}" --port 0 --unixsocket "${_socket}" --unixsocketperm 700 --daemonize yes
        --pidfile "${_pidfile}" --dir "${DIR}" --logfile "${DIR}/redis.log" --save "" --appendonly
        no
    RESULT_VARIABLE _result
    OUTPUT_VARIABLE _output
    ERROR_VARIABLE _output)
if(NOT _result EQUAL 0)
    message(FATAL_ERROR "redis_server.cmake: ${REDIS_SERVER} failed (${_result}):\n${_output}")
endif()
foreach(_i RANGE 100) # up to ~10 s until the socket appears
    if(EXISTS "${_socket}")
        message(STATUS "redis-server listening on ${_socket}")
        return()
    endif()
    execute_process(COMMAND "${CMAKE_COMMAND}" -E sleep 0.1)
endforeach()
if(EXISTS "${DIR}/redis.log")
    file(READ "${DIR}/redis.log" _log)
endif()
message(FATAL_ERROR "redis_server.cmake: no socket at ${_socket} after 10 s:\n${_log}")
