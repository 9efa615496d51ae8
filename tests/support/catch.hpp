#pragma once

// Catch2 v2/v3 shim: test files include "support/catch.hpp", never Catch2 directly.
// Catch2 v3 (split headers, main in Catch2::Catch2WithMain) is preferred when installed;
// Debian 12 ships v2.13 (single header, main from tests/support/main.cpp).

#if __has_include(<catch2/catch_test_macros.hpp>)
#    include <catch2/catch_all.hpp>
#else
#    include <catch2/catch.hpp>
#endif
