// The Catch2 main for every test executable, compiled once (OBJECT library
// ratelimit_catch_main). Only Catch2 v2 needs it: with v3, CMake links Catch2::Catch2WithMain
// and does not compile this file.

#if __has_include(<catch2/catch_test_macros.hpp>)
// Catch2 v3: main() comes from Catch2::Catch2WithMain.
#else
#    define CATCH_CONFIG_MAIN
#    include <catch2/catch.hpp>
#endif
