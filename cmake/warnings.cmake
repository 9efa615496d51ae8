# ratelimit_set_warnings(<target>)
#
# Warnings, sanitizers and (optionally) clang-tidy for ratelimit's OWN targets: tests, examples,
# tools, benchmarks. Never call it on the INTERFACE library targets, whose usage requirements
# reach every consumer.
#
# Warnings are never errors here: a user's plain build must not fail on a warning a newer or
# older compiler raises. The CI and dev presets turn them into errors with
# CMAKE_COMPILE_WARNING_AS_ERROR (CMakePresets.json).
#
# ratelimit_set_test_warnings(<target>) is the same for test programs, less one warning that
# g++ 12 raises falsely at -O3 on the way tests build their keys and messages.
include_guard(GLOBAL)

function(ratelimit_set_warnings target)
    set(_common
        -Wall
        -Wextra
        -Wpedantic
        -Wshadow
        -Wconversion
        -Wsign-conversion
        -Wold-style-cast
        -Wnon-virtual-dtor
        -Woverloaded-virtual
        -Wcast-align
        -Wcast-qual
        -Wnull-dereference
        -Wdouble-promotion
        -Wformat=2
        -Wimplicit-fallthrough
        -Wundef)
    set(_gcc -Wduplicated-cond -Wduplicated-branches -Wlogical-op -Wuseless-cast)
    set(_clang -Wthread-safety -Wextra-semi -Wcomma)

    if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
        target_compile_options(${target} PRIVATE ${_common} ${_gcc})
    elseif(CMAKE_CXX_COMPILER_ID MATCHES "Clang") # Clang, AppleClang, IntelLLVM's clang front end
        target_compile_options(${target} PRIVATE ${_common} ${_clang})
    elseif(MSVC)
        target_compile_options(${target} PRIVATE /W4 /permissive-)
    endif()

    # Our own code is plain ISO C++ (-std=c++20, not gnu++20).
    set_target_properties(${target} PROPERTIES CXX_EXTENSIONS OFF)

    if(RATELIMIT_SANITIZE)
        set(_sanitize "-fsanitize=${RATELIMIT_SANITIZE}" -fno-omit-frame-pointer)
        if(RATELIMIT_SANITIZE MATCHES "undefined")
            list(APPEND _sanitize -fno-sanitize-recover=all)
        endif()
        target_compile_options(${target} PRIVATE ${_sanitize})
        target_link_options(${target} PRIVATE "-fsanitize=${RATELIMIT_SANITIZE}")
    endif()

    if(RATELIMIT_CLANG_TIDY)
        find_program(RATELIMIT_CLANG_TIDY_EXE NAMES clang-tidy-14 clang-tidy REQUIRED)
        set_target_properties(${target} PROPERTIES CXX_CLANG_TIDY "${RATELIMIT_CLANG_TIDY_EXE}")
    endif()
endfunction()

function(ratelimit_set_test_warnings target)
    ratelimit_set_warnings(${target})
    # g++ 12 at -O3 reports -Wrestrict inside std::string for `"literal" + std::to_string(n)`
    # (GCC bug 105651), which tests write by the hundred. The library's own headers never
    # concatenate that way, so users' builds do not see it.
    if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
        target_compile_options(${target} PRIVATE -Wno-restrict)
    endif()
endfunction()
