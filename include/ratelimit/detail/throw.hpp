#pragma once

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace ratelimit {
inline namespace v1 {
namespace detail {

/// Every throw of the library goes through here: one place to change for -fno-exceptions,
/// and the message always starts with "ratelimit: ".
[[noreturn]] inline void throwInvalidArgument(std::string_view message) {
    throw std::invalid_argument(std::string("ratelimit: ").append(message));
}

/// A message written in pieces (`{"Limit.count is ", Decimal(c), ", not 0"}`), joined: each
/// call site, many of them on construction paths, stays one call instead of a chain of string
/// concatenations the compiler expands at every one of them.
inline std::string joined(std::initializer_list<std::string_view> pieces) {
    std::string message;
    for (const std::string_view piece : pieces) {
        message.append(piece);
    }
    return message;
}

/// `throwInvalidArgument` of the `joined` pieces.
[[noreturn]] inline void throwInvalidArgument(std::initializer_list<std::string_view> pieces) {
    throwInvalidArgument(joined(pieces));
}

/// An integer in decimal, for messages, without an allocation.
class Decimal {
public:
    template <std::integral Integer>
    explicit Decimal(Integer value) noexcept
        : Decimal(static_cast<std::int64_t>(value), std::cmp_less(value, 0)) {}

    // NOLINTNEXTLINE(google-explicit-constructor): a message piece, used in place
    operator std::string_view() const noexcept {
        return {digits_.data() + first_, digits_.size() - first_};
    }

private:
    /// One conversion, of |value| as an unsigned 64-bit value, serves every type: `bits` holds
    /// the value's two's complement bits (so an unsigned value above 2^63 passes unchanged).
    /// Written from the right, least significant digit first (std::to_chars would do it too,
    /// at the price of <charconv> in every file that includes the limiter).
    Decimal(std::int64_t bits, bool negative) noexcept {
        constexpr std::uint64_t kRadix = 10;
        auto magnitude =
            negative ? 0 - static_cast<std::uint64_t>(bits) : static_cast<std::uint64_t>(bits);
        std::size_t first = digits_.size();
        do {
            digits_[--first] = static_cast<char>('0' + magnitude % kRadix);
            magnitude /= kRadix;
        } while (magnitude != 0);
        if (negative) {
            digits_[--first] = '-';
        }
        first_ = first;
    }

    static constexpr std::size_t kDigits = 24;  // a sign and 20 digits fit
    std::array<char, kDigits> digits_{};
    std::size_t first_ = kDigits;  ///< where the text starts: it ends at the array's end
};

}  // namespace detail
}  // namespace v1
}  // namespace ratelimit
