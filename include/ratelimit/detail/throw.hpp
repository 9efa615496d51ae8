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

#include <ratelimit/detail/inline.hpp>

namespace ratelimit {
inline namespace v1 {
namespace detail {

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

/// An integer a message shows in decimal: not a `bool` or a `char`, which would show as a
/// number by surprise.
template <class T>
concept MessageInteger = std::integral<T> && !std::same_as<T, bool> && !std::same_as<T, char>;

/// One value a message shows: a piece of text, or an integer of any type in decimal.
class MessageArg {
public:
    // NOLINTNEXTLINE(google-explicit-constructor): a message value, used in place
    MessageArg(std::string_view text) noexcept : text_(text.data()), value_(text.size()) {}
    // NOLINTNEXTLINE(google-explicit-constructor): a message value, used in place
    MessageArg(const char* text) noexcept : MessageArg(std::string_view(text)) {}
    // NOLINTNEXTLINE(google-explicit-constructor): a message value, used in place
    MessageArg(const std::string& text) noexcept : MessageArg(std::string_view(text)) {}
    template <MessageInteger Integer>
    // NOLINTNEXTLINE(google-explicit-constructor): a message value, used in place
    MessageArg(Integer value) noexcept
        : value_(static_cast<std::uint64_t>(value)), negative_(std::cmp_less(value, 0)) {}

    void appendTo(std::string& out) const {
        if (text_ != nullptr) {
            out.append(text_, value_);
        } else if (negative_) {
            out.append(Decimal(static_cast<std::int64_t>(value_)));
        } else {
            out.append(Decimal(value_));
        }
    }

private:
    const char* text_ = nullptr;  ///< null for an integer
    std::uint64_t value_ = 0;     ///< the text's size, or the integer's two's complement bits
    bool negative_ = false;
};

/// Appends `format` to `out` with each hole ("{}") replaced by the next of `args`; holes beyond
/// the last argument stay as they are. (std::format would do it, from g++ 13 and at the price of
/// its header in every file that includes the limiter.)
inline void appendFormatted(std::string& out, std::string_view format,
                            std::initializer_list<MessageArg> args) {
    const MessageArg* next = args.begin();
    std::size_t copied = 0;  // format[0, copied) is in `out`
    for (std::size_t i = 0; i + 1 < format.size() && next != args.end(); ++i) {
        if (format[i] == '{' && format[i + 1] == '}') {
            out.append(format.data() + copied, i - copied);
            next->appendTo(out);
            ++next;
            copied = i + 2;
            ++i;
        }
    }
    out.append(format.data() + copied, format.size() - copied);
}

/// `format` with its holes filled by `args` (see `appendFormatted`).
inline std::string formatted(std::string_view format, std::initializer_list<MessageArg> args) {
    std::string out;
    appendFormatted(out, format, args);
    return out;
}

/// Every throw of the library goes through here: one place to change for -fno-exceptions,
/// and the message always starts with "ratelimit: ". `format`'s holes ("{}") take `args` in
/// order, as in `throwInvalidArgument("Limit.count must be in 1..2^48 (got {})", {count})`: a
/// call site passes its text once and its values, instead of the pieces of a concatenation the
/// compiler would expand at every one of the library's checks.
[[noreturn]] RATELIMIT_COLD inline void throwInvalidArgument(
    std::string_view format, std::initializer_list<MessageArg> args = {}) {
    std::string message = "ratelimit: ";
    appendFormatted(message, format, args);
    throw std::invalid_argument(message);
}

}  // namespace detail
}  // namespace v1
}  // namespace ratelimit
