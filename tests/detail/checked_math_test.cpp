// Tests of include/ratelimit/detail/checked_math.hpp: the invariant-divisor division and the
// narrowing 128-by-64 division that keep the models' allowed paths free of divide routines
// must agree with plain integer division everywhere in their stated domains.

#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include <ratelimit/detail/checked_math.hpp>

#include "support/catch.hpp"

namespace {

using ratelimit::detail::Divisor;
using ratelimit::detail::UInt128;

constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();

/// Divisors where multiply-shift schemes break first: around every power of two, plus
/// small odd ones and the ends of the range.
std::vector<std::int64_t> edgeDivisors() {
    std::vector<std::int64_t> out{1, 2, 3, 5, 6, 7, 10, 60, 641, 1'000'000'007, kMax - 1, kMax};
    for (int k = 1; k < 63; ++k) {
        const std::int64_t p = std::int64_t{1} << k;
        out.insert(out.end(), {p - 1, p, p + 1});
    }
    return out;
}

std::vector<std::int64_t> edgeDividends(std::int64_t d) {
    std::vector<std::int64_t> out{0, 1, kMax, kMax - 1, std::int64_t{1} << 62};
    for (const std::int64_t m : {std::int64_t{1}, std::int64_t{2}, std::int64_t{3}, kMax / d}) {
        const std::int64_t base = (kMax / d >= m) ? d * m : 0;
        out.insert(out.end(), {base, base > 0 ? base - 1 : 0, base < kMax ? base + 1 : base});
    }
    return out;
}

}  // namespace

TEST_CASE("Divisor: floor and ceil agree with integer division on edge values", "[checked_math]") {
    for (const std::int64_t d : edgeDivisors()) {
        const Divisor divisor(d);
        REQUIRE(divisor.divisor() == d);
        for (const std::int64_t n : edgeDividends(d)) {
            INFO("n = " << n << ", d = " << d);
            REQUIRE(divisor.floor(n) == n / d);
            if (n <= kMax - (d - 1)) {
                REQUIRE(divisor.ceil(n) == n / d + (n % d != 0 ? 1 : 0));
            }
        }
    }
}

TEST_CASE("Divisor: floor agrees with integer division on random values", "[checked_math]") {
    std::mt19937_64 random(20261130);
    int checked = 0;
    for (int i = 0; i < 200'000; ++i, ++checked) {
        // Divisors of every magnitude: a random bit length, then random bits below it.
        const int bits = 1 + static_cast<int>(random() % 63);
        const auto d = static_cast<std::int64_t>((random() >> (64 - bits)) | 1U);
        const auto n = static_cast<std::int64_t>(random() >> 1U);
        const Divisor divisor(d);
        if (divisor.floor(n) != n / d) {
            FAIL("floor(" << n << " / " << d << ") = " << divisor.floor(n));
        }
    }
    REQUIRE(checked == 200'000);
}

TEST_CASE("Divisor: a default-constructed divisor divides by one", "[checked_math]") {
    const Divisor one;
    REQUIRE(one.divisor() == 1);
    REQUIRE(one.floor(0) == 0);
    REQUIRE(one.floor(kMax) == kMax);
    REQUIRE(one.ceil(12345) == 12345);
}

TEST_CASE("narrowDivide: 128-bit dividends with a 64-bit quotient", "[checked_math]") {
    using ratelimit::detail::narrowDivide;
    constexpr auto kAllOnes = std::numeric_limits<std::uint64_t>::max();
    // The largest dividend a divisor allows: high word d - 1, low word all ones.
    for (const std::uint64_t d :
         {std::uint64_t{1}, std::uint64_t{3}, std::uint64_t{1} << 40U, kAllOnes - 1, kAllOnes}) {
        const UInt128 n = (UInt128{d - 1} << 64U) | kAllOnes;
        REQUIRE(narrowDivide(n, d) == static_cast<std::uint64_t>(n / d));
    }
    std::mt19937_64 random(7);
    for (int i = 0; i < 100'000; ++i) {
        const std::uint64_t d = random() | 1U;
        const UInt128 n = (UInt128{random() % d} << 64U) | random();
        if (narrowDivide(n, d) != static_cast<std::uint64_t>(n / d)) {
            FAIL("narrowDivide disagrees for d = " << d);
        }
    }
}

TEST_CASE("floorMod: the offset into an epoch-aligned window, also below zero and at the ends",
          "[checked_math]") {
    using ratelimit::detail::floorMod;
    constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
    for (const std::int64_t d : edgeDivisors()) {
        for (const std::int64_t n :
             {kMin, kMin + 1, std::int64_t{-1}, std::int64_t{0}, d - 1, kMax, -d, -d + 1, -d - 1}) {
            const std::int64_t r = floorMod(n, d);
            CAPTURE(n, d, r);
            CHECK(r >= 0);
            CHECK(r < d);
            // n − r is the window's start: a multiple of d at or below n (exact in 128 bits).
            const auto start = ratelimit::detail::Int128{n} - r;
            CHECK(start % d == 0);
        }
    }
    CHECK(floorMod(-1, 60) == 59);
    CHECK(floorMod(kMin, (std::int64_t{1} << 62) - 1) == (std::int64_t{1} << 62) - 3);
}
