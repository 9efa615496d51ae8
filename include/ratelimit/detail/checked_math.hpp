#pragma once

#include <bit>
#include <cstdint>
#include <limits>

namespace ratelimit {
inline namespace v1 {
namespace detail {

// 128-bit intermediates: products of a count (< 2^49) and a span (< 2^62) need 111 bits.
__extension__ using Int128 = __int128;
__extension__ using UInt128 = unsigned __int128;

inline constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();
inline constexpr std::int64_t kInt64Min = std::numeric_limits<std::int64_t>::min();

/// Floor division for any signs (C++ `/` truncates toward zero). Precondition: d > 0.
constexpr std::int64_t floorDiv(std::int64_t n, std::int64_t d) noexcept {
    const std::int64_t q = n / d;
    return (n % d != 0 && n < 0) ? q - 1 : q;
}

/// n mod d in [0, d), also for negative n (C++ `%` takes the dividend's sign). Precondition:
/// d > 0.
constexpr std::int64_t floorMod(std::int64_t n, std::int64_t d) noexcept {
    const std::int64_t r = n % d;
    return r < 0 ? r + d : r;
}

/// Ceiling division of non-negative values. Precondition: n >= 0, d > 0.
constexpr std::int64_t ceilDiv(std::int64_t n, std::int64_t d) noexcept {
    return n / d + (n % d != 0 ? 1 : 0);
}

constexpr Int128 ceilDiv(Int128 n, Int128 d) noexcept { return n / d + (n % d != 0 ? 1 : 0); }

/// a - b, saturated: clock values set by hand may sit anywhere in the int64 range.
constexpr std::int64_t satSub(std::int64_t a, std::int64_t b) noexcept {
    std::int64_t r = 0;
    if (__builtin_sub_overflow(a, b, &r)) {
        return b < 0 ? kInt64Max : kInt64Min;
    }
    return r;
}

/// a + b, saturated.
constexpr std::int64_t satAdd(std::int64_t a, std::int64_t b) noexcept {
    std::int64_t r = 0;
    if (__builtin_add_overflow(a, b, &r)) {
        return b > 0 ? kInt64Max : kInt64Min;
    }
    return r;
}

/// Narrows a value already known to fit; saturates instead of wrapping if it does not.
constexpr std::int64_t clampToInt64(Int128 v) noexcept {
    if (v > kInt64Max) {
        return kInt64Max;
    }
    if (v < kInt64Min) {
        return kInt64Min;
    }
    return static_cast<std::int64_t>(v);
}

/// floor(n / d) for a 128-bit `n` whose quotient fits 64 bits (`n >> 64 < d`, d > 0): one
/// hardware divide on x86-64 instead of the library's 128-bit division routine.
inline std::uint64_t narrowDivide(UInt128 n, std::uint64_t d) noexcept {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    std::uint64_t quotient = 0;
    std::uint64_t remainder = 0;
    constexpr unsigned kWordBits = 64;
    __asm__("divq %[d]"
            : "=a"(quotient), "=d"(remainder)
            : "a"(static_cast<std::uint64_t>(n)),
              "d"(static_cast<std::uint64_t>(n >> kWordBits)), [d] "rm"(d));
    return quotient;
#else
    return static_cast<std::uint64_t>(n / d);
#endif
}

/// Division by a divisor fixed once (a quota's), as one 64×64→128-bit multiplication and a
/// shift (Granlund and Montgomery, "Division by invariant integers using multiplication"),
/// exact for every dividend in [0, 2^63): with K = 63 + ceil(log2 d) and m = ceil(2^K / d)
/// (< 2^64), the error m·d − 2^K < d keeps n·m / 2^K below the next integer. The product is
/// taken of 2n, whose high word shifted by ceil(log2 d) is that quotient: one multiplication
/// and a 64-bit shift, with no test of whether K passes 64.
class Divisor {
public:
    constexpr Divisor() noexcept = default;
    /// Precondition: 0 < d < 2^63.
    explicit constexpr Divisor(std::int64_t d) noexcept
        : divisor_(d), log2_(ceilLog2(static_cast<std::uint64_t>(d))) {
        const UInt128 power = UInt128{1} << (kDividendBits + log2_);
        const auto ud = static_cast<std::uint64_t>(d);
        // d > 0 is the precondition; Quota::make passes period/g and count/g, both >= 1 once
        // Limit::validate and the whole-ticks check passed, which the analyzer cannot follow.
        // NOLINTNEXTLINE(clang-analyzer-core.DivideZero)
        multiplier_ = static_cast<std::uint64_t>(power / ud + (power % ud != 0 ? 1 : 0));
    }

    /// floor(n / d). Precondition: 0 <= n.
    [[nodiscard]] constexpr std::int64_t floor(std::int64_t n) const noexcept {
        const UInt128 twice = UInt128{static_cast<std::uint64_t>(n) << 1} * multiplier_;
        return static_cast<std::int64_t>(static_cast<std::uint64_t>(twice >> kWordBits) >> log2_);
    }
    /// ceil(n / d). Precondition: 0 <= n, n + d - 1 < 2^63.
    [[nodiscard]] constexpr std::int64_t ceil(std::int64_t n) const noexcept {
        return floor(n + (divisor_ - 1));
    }
    [[nodiscard]] constexpr std::int64_t divisor() const noexcept { return divisor_; }

private:
    static constexpr unsigned kDividendBits = 63;
    static constexpr unsigned kWordBits = 64;
    static constexpr unsigned ceilLog2(std::uint64_t d) noexcept {
        return d <= 1 ? 0U : static_cast<unsigned>(std::bit_width(d - 1));
    }

    std::int64_t divisor_ = 1;
    unsigned log2_ = 0;  ///< ceil(log2 d): K − 63
    std::uint64_t multiplier_ = std::uint64_t{1} << kDividendBits;
};

constexpr std::int64_t gcd(std::int64_t a, std::int64_t b) noexcept {
    while (b != 0) {
        const std::int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

}  // namespace detail
}  // namespace v1
}  // namespace ratelimit
