#pragma once

// Character classes of the ASCII text the library parses (limits, rule files, HTTP fields,
// addresses). Locale-independent, unlike <cctype>, and constexpr.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace ratelimit {
inline namespace v1 {
namespace detail::ascii {

constexpr bool isDigit(char c) noexcept { return c >= '0' && c <= '9'; }
constexpr bool isLower(char c) noexcept { return c >= 'a' && c <= 'z'; }
constexpr bool isUpper(char c) noexcept { return c >= 'A' && c <= 'Z'; }
constexpr bool isAlpha(char c) noexcept { return isLower(c) || isUpper(c); }
constexpr bool isAlnum(char c) noexcept { return isAlpha(c) || isDigit(c); }

/// A space or a horizontal tab: RFC 9110's optional white space (OWS) between tokens.
constexpr bool isBlank(char c) noexcept { return c == ' ' || c == '\t'; }

/// Printable ASCII, %x20-7E.
constexpr bool isPrintable(char c) noexcept { return c >= ' ' && c <= '~'; }

constexpr char toLower(char c) noexcept {
    return isUpper(c) ? static_cast<char>(c - 'A' + 'a') : c;
}
constexpr char toUpper(char c) noexcept {
    return isLower(c) ? static_cast<char>(c - 'a' + 'A') : c;
}

/// The value of a hexadecimal digit, or -1 when `c` is none.
constexpr int hexValue(char c) noexcept {
    constexpr int kTen = 10;
    if (isDigit(c)) {
        return c - '0';
    }
    const char lower = toLower(c);
    return lower >= 'a' && lower <= 'f' ? lower - 'a' + kTen : -1;
}

/// The value of `digits`, one or more decimal digits and nothing else, when it is at most
/// `max` (>= 0); -1 otherwise (an empty text, another character, a value above `max`).
constexpr std::int64_t decimalValue(std::string_view digits, std::int64_t max) noexcept {
    constexpr std::int64_t kRadix = 10;
    if (digits.empty()) {
        return -1;
    }
    std::int64_t value = 0;
    for (const char c : digits) {
        const std::int64_t digit = c - '0';
        if (!isDigit(c) || digit > max || value > (max - digit) / kRadix) {
            return -1;  // value · 10 + digit would pass max
        }
        value = value * kRadix + digit;
    }
    return value;
}

constexpr bool equalsIgnoreCase(std::string_view a, std::string_view b) noexcept {
    if (a.size() != b.size()) {
        return false;
    }
    for (std::size_t i = 0; i < a.size(); ++i) {
        if (toLower(a[i]) != toLower(b[i])) {
            return false;
        }
    }
    return true;
}

inline std::string upperCase(std::string_view s) {
    std::string out(s);
    for (char& c : out) {
        c = toUpper(c);
    }
    return out;
}

/// `s` without the leading and trailing characters for which `strip(c)` holds.
template <class Predicate>
constexpr std::string_view trim(std::string_view s, Predicate strip) noexcept {
    while (!s.empty() && strip(s.front())) {
        s.remove_prefix(1);
    }
    while (!s.empty() && strip(s.back())) {
        s.remove_suffix(1);
    }
    return s;
}

}  // namespace detail::ascii
}  // namespace v1
}  // namespace ratelimit
