#pragma once

// Catch2 v2/v3 shim: test files include "support/catch.hpp", never Catch2 directly.
// Catch2 v3 (split headers, main in Catch2::Catch2WithMain) is preferred when installed;
// Debian 12 ships v2.13 (single header, main from tests/support/main.cpp).
//
// Besides the header it gives every test file the spellings that differ between the two
// versions (a substring matcher for REQUIRE_THROWS_WITH, a matcher base) and the StringMakers of
// the library's value types (support/decision_string.hpp), so every translation unit prints them
// alike.

#if __has_include(<catch2/catch_test_macros.hpp>)
#    include <catch2/catch_all.hpp>
#    define RATELIMIT_TEST_CATCH3 1
#else
#    include <catch2/catch.hpp>
#    define RATELIMIT_TEST_CATCH3 0
#endif

#include <string>

namespace ratelimit_test {

/// Matches a string holding `part` (v2 `Catch::Contains`, v3 `ContainsSubstring`), e.g.
/// `REQUIRE_THROWS_WITH(f(), Contains("period") && Contains("1500"))`. Named after Catch2's
/// own matcher factories.
// NOLINTNEXTLINE(readability-identifier-naming): Catch2's spelling
inline auto Contains(const std::string& part) {
#if RATELIMIT_TEST_CATCH3
    return Catch::Matchers::ContainsSubstring(part);
#else
    return Catch::Matchers::Contains(part);
#endif
}

/// Matches a string that begins with `prefix` (spelled alike in v2 and v3).
using Catch::Matchers::StartsWith;

/// The base of a matcher of a `T` written for a test (override `match` and `describe`).
#if RATELIMIT_TEST_CATCH3
template <class T>
using MatcherBase = Catch::Matchers::MatcherBase<T>;
#else
template <class T>
using MatcherBase = Catch::MatcherBase<T>;
#endif

}  // namespace ratelimit_test

#include "support/decision_string.hpp"
