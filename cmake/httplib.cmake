# cpp-httplib, for examples/http_server.cpp and the test that drives it; never for the library,
# whose HTTP helpers are framework-free. Upstream ships a CMake package (httplib::httplib);
# Debian 12's libcpp-httplib-dev is a compiled library with only a .pc file, whose compile
# definitions (CPPHTTPLIB_OPENSSL_SUPPORT, ...) must match the library's, so it is found with
# pkg-config. The target found (or "") is the global property RATELIMIT_HTTPLIB_TARGET.
include_guard(GLOBAL)

set(_ratelimit_httplib_target "")
find_package(httplib CONFIG QUIET)
if(TARGET httplib::httplib)
    set_target_properties(httplib::httplib PROPERTIES IMPORTED_GLOBAL TRUE)
    set(_ratelimit_httplib_target httplib::httplib)
else()
    find_package(PkgConfig QUIET)
    if(PkgConfig_FOUND)
        pkg_check_modules(RATELIMIT_CPPHTTPLIB QUIET IMPORTED_TARGET GLOBAL cpp-httplib)
        if(TARGET PkgConfig::RATELIMIT_CPPHTTPLIB)
            set(_ratelimit_httplib_target PkgConfig::RATELIMIT_CPPHTTPLIB)
        endif()
    endif()
endif()
if(_ratelimit_httplib_target)
    message(STATUS "ratelimit: cpp-httplib found (${_ratelimit_httplib_target}); "
                   "examples/http_server.cpp is built")
else()
    message(STATUS "ratelimit: cpp-httplib not found (Debian: libcpp-httplib-dev); "
                   "examples/http_server.cpp and its test are skipped")
endif()
set_property(GLOBAL PROPERTY RATELIMIT_HTTPLIB_TARGET "${_ratelimit_httplib_target}")
