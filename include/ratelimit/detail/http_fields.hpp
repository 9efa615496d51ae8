#pragma once

// HTTP field syntax, read and written in one place: RFC 9110 tokens, lists and quoted strings
// (section 5.6), and the RFC 9651 structured-field items the rate-limit fields are made of.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <ratelimit/detail/ascii.hpp>

namespace ratelimit {
inline namespace v1 {
namespace detail::http_fields {

/// `s` without the optional white space (spaces and tabs) around it.
constexpr std::string_view trimOws(std::string_view s) noexcept {
    return ascii::trim(s, ascii::isBlank);
}

/// A tchar of an RFC 9110 token (section 5.6.2).
constexpr bool isTokenChar(char c) noexcept {
    return ascii::isAlnum(c) ||
           std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

/// Where a scan for a delimiter outside quoted strings stopped.
struct UnquotedScan {
    std::size_t end = 0;  ///< the delimiter's index, or the text's size when there is none
    bool open = false;    ///< a quoted string ran to the end of the text
};

/// The first `delimiter` at or after `pos` outside quoted strings (a backslash in a quoted
/// string escapes the next character).
constexpr UnquotedScan findUnquoted(std::string_view text, std::size_t pos,
                                    char delimiter) noexcept {
    bool quoted = false;
    for (; pos < text.size(); ++pos) {
        const char c = text[pos];
        if (quoted) {
            if (c == '\\') {
                ++pos;
            } else if (c == '"') {
                quoted = false;
            }
        } else if (c == '"') {
            quoted = true;
        } else if (c == delimiter) {
            return {pos, false};
        }
    }
    return {text.size(), quoted};
}

/// Splits `value` at every comma, appending the members: a list whose members hold no quoted
/// strings, as `X-Forwarded-For`'s do not.
inline void splitAtCommas(std::string_view value, std::vector<std::string_view>& out) {
    for (std::size_t start = 0;;) {
        const std::size_t comma = value.find(',', start);
        out.push_back(value.substr(start, comma - start));
        if (comma == std::string_view::npos) {
            return;
        }
        start = comma + 1;
    }
}

/// Splits `value` at commas outside quoted strings (an RFC 9110 list), appending the members in
/// order, but finds the quoted strings from the right: a `"` met outside a string ends one, and
/// the next `"` not preceded by a backslash starts it. So where a member starts depends only on
/// the text right of it, and a quote a client left open further left cannot swallow the
/// members proxies appended after it. For a well-formed list this is the usual left-to-right
/// split; a string still open at the start of `value` runs to it.
inline void splitListFromRight(std::string_view value, std::vector<std::string_view>& out) {
    const std::size_t first = out.size();
    bool quoted = false;
    std::size_t end = value.size();
    for (std::size_t i = value.size(); i-- > 0;) {
        if (value[i] == '"') {
            quoted = !quoted || (i > 0 && value[i - 1] == '\\');
        } else if (value[i] == ',' && !quoted) {
            out.push_back(value.substr(i + 1, end - i - 1));
            end = i;
        }
    }
    out.push_back(value.substr(0, end));
    std::reverse(out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
}

/// The content of a quoted-string with its escapes undone; nullopt when `quoted` is not
/// exactly one quoted string.
inline std::optional<std::string> unquote(std::string_view quoted) {
    if (quoted.size() < 2 || quoted.front() != '"' || quoted.back() != '"') {
        return std::nullopt;
    }
    const std::string_view inner = quoted.substr(1, quoted.size() - 2);
    std::string value;
    for (std::size_t i = 0; i < inner.size(); ++i) {
        if (inner[i] == '\\') {
            if (++i == inner.size()) {
                return std::nullopt;
            }
        } else if (inner[i] == '"') {
            return std::nullopt;
        }
        value.push_back(inner[i]);
    }
    return value;
}

// ---------------------------------------------------------------------------------------------
// RFC 9651 structured-field items.

/// Largest Integer an RFC 9651 structured field may carry (15 digits).
inline constexpr std::int64_t kSfIntegerMax = 999'999'999'999'999;

/// `v` within the Integers an RFC 9651 field may carry (negative values become 0).
constexpr std::int64_t clampSfInteger(std::int64_t v) noexcept {
    return v < 0 ? 0 : (v > kSfIntegerMax ? kSfIntegerMax : v);
}

/// True when every byte may stand in an sf-string (printable ASCII, %x20-7E).
constexpr bool isSfStringSafe(std::string_view s) noexcept {
    return std::all_of(s.begin(), s.end(), ascii::isPrintable);
}

/// Appends `s` as an sf-string: quoted, `"` and `\` escaped. Bytes outside %x20-7E cannot be
/// serialised; they are written as `?` (names are checked at configuration time, so this only
/// guards hand-made values).
inline void appendSfString(std::string& out, std::string_view s) {
    out.push_back('"');
    for (const char c : s) {
        if (c == '"' || c == '\\') {
            out.push_back('\\');
            out.push_back(c);
        } else {
            out.push_back(ascii::isPrintable(c) ? c : '?');
        }
    }
    out.push_back('"');
}

/// Base64 (RFC 4648, section 4): three bytes make a 24-bit group, written as four 6-bit digits.
namespace base64 {
inline constexpr std::string_view kAlphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
inline constexpr unsigned kDigitBits = 6;
inline constexpr std::uint32_t kDigitMask = 0x3f;
/// Where the first and second byte of a group sit in its 24 bits.
inline constexpr unsigned kByte0Shift = 16;
inline constexpr unsigned kByte1Shift = 8;
/// Where the first, second and third digit of a group sit in its 24 bits.
inline constexpr unsigned kDigit0Shift = 3 * kDigitBits;
inline constexpr unsigned kDigit1Shift = 2 * kDigitBits;
inline constexpr unsigned kDigit2Shift = kDigitBits;

/// The digit of `group` that starts `shift` bits from the right.
constexpr char digit(std::uint32_t group, unsigned shift) noexcept {
    return kAlphabet[(group >> shift) & kDigitMask];
}
}  // namespace base64

/// Appends `bytes` as a Byte Sequence: `:` base64 with padding `:`.
inline void appendSfByteSequence(std::string& out, std::string_view bytes) {
    out.push_back(':');
    std::size_t i = 0;
    const auto byte = [&bytes](std::size_t k) {
        return static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[k]));
    };
    for (; i + 3 <= bytes.size(); i += 3) {
        const std::uint32_t n =
            (byte(i) << base64::kByte0Shift) | (byte(i + 1) << base64::kByte1Shift) | byte(i + 2);
        out.push_back(base64::digit(n, base64::kDigit0Shift));
        out.push_back(base64::digit(n, base64::kDigit1Shift));
        out.push_back(base64::digit(n, base64::kDigit2Shift));
        out.push_back(base64::digit(n, 0));
    }
    if (const std::size_t left = bytes.size() - i; left > 0) {
        const std::uint32_t n = (byte(i) << base64::kByte0Shift) |
                                (left == 2 ? byte(i + 1) << base64::kByte1Shift : 0U);
        out.push_back(base64::digit(n, base64::kDigit0Shift));
        out.push_back(base64::digit(n, base64::kDigit1Shift));
        out.push_back(left == 2 ? base64::digit(n, base64::kDigit2Shift) : '=');
        out.push_back('=');
    }
    out.push_back(':');
}

}  // namespace detail::http_fields
}  // namespace v1
}  // namespace ratelimit
