// Tests of include/ratelimit/detail/throw.hpp: every message the library throws is built here.

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>

#include <ratelimit/detail/throw.hpp>

#include "support/catch.hpp"

namespace {

using ratelimit::detail::Decimal;

template <class Integer>
std::string decimal(Integer value) {
    return std::string(std::string_view(Decimal(value)));
}

}  // namespace

TEST_CASE("Decimal: every integer type in decimal, both ends of its range included", "[throw]") {
    CHECK(decimal(0) == "0");
    CHECK(decimal(-1) == "-1");
    CHECK(decimal(std::int64_t{42}) == "42");
    CHECK(decimal(std::numeric_limits<std::int64_t>::min()) == "-9223372036854775808");
    CHECK(decimal(std::numeric_limits<std::int64_t>::max()) == "9223372036854775807");
    CHECK(decimal(std::numeric_limits<std::uint64_t>::max()) == "18446744073709551615");
    CHECK(decimal(std::size_t{1} << 63U) == "9223372036854775808");
    CHECK(decimal(std::numeric_limits<int>::min()) == "-2147483648");
    CHECK(decimal(static_cast<unsigned char>(200)) == "200");
}

TEST_CASE("formatted: each hole takes the next value, text or integer of any type", "[throw]") {
    using ratelimit::detail::formatted;
    CHECK(formatted("", {}).empty());
    CHECK(formatted("no hole", {}) == "no hole");
    CHECK(formatted("{}", {"whole"}) == "whole");
    CHECK(formatted("a {} b {} c", {std::int64_t{-3}, std::string_view("x")}) == "a -3 b x c");
    CHECK(formatted("{}{}", {std::numeric_limits<std::uint64_t>::max(),
                             std::numeric_limits<std::int64_t>::min()}) ==
          "18446744073709551615-9223372036854775808");
    CHECK(formatted("{} of {}", {static_cast<unsigned char>(200), std::string("name")}) ==
          "200 of name");
    // Braces that are no hole stay, and so do holes beyond the last value; a value's own
    // braces are never read as holes.
    CHECK(formatted("Limit{count={}}", {5}) == "Limit{count=5}");
    CHECK(formatted("{ {} }", {"{}"}) == "{ {} }");
    CHECK(formatted("{} and {}", {1}) == "1 and {}");
    CHECK(formatted("{}", {1, 2}) == "1");
    CHECK(formatted("ends with {", {1}) == "ends with {");
}

TEST_CASE("throwInvalidArgument: the formatted message after the library's prefix", "[throw]") {
    REQUIRE_THROWS_MATCHES(
        ratelimit::detail::throwInvalidArgument("Limit.count must be in 1..2^48 (got {})", {-3}),
        std::invalid_argument,
        Catch::Matchers::Message("ratelimit: Limit.count must be in 1..2^48 (got -3)"));
    REQUIRE_THROWS_MATCHES(ratelimit::detail::throwInvalidArgument("plain {}"),
                           std::invalid_argument, Catch::Matchers::Message("ratelimit: plain {}"));
}
