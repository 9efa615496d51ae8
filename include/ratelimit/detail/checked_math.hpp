#pragma once

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
