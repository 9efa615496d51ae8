#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <ratelimit/decision.hpp>
#include <ratelimit/http/headers.hpp>

namespace ratelimit {
inline namespace v1 {

namespace detail {

/// Byte values of RFC 3629 (UTF-8), section 4, and of RFC 8259 (JSON), section 7.
namespace utf8 {
/// JSON escapes every byte below this (U+0000 … U+001F).
inline constexpr unsigned kFirstUnescaped = 0x20;
/// Bytes from here on are not ASCII.
inline constexpr unsigned kFirstNonAscii = 0x80;
/// A continuation byte: 10xxxxxx.
inline constexpr unsigned kContinuationFirst = 0x80;
inline constexpr unsigned kContinuationLast = 0xbf;
/// Lead bytes of two-byte sequences (0xc0 and 0xc1 would only start overlong forms).
inline constexpr unsigned kLead2First = 0xc2;
inline constexpr unsigned kLead2Last = 0xdf;
/// Lead bytes of three-byte sequences.
inline constexpr unsigned kLead3First = 0xe0;
inline constexpr unsigned kLead3Last = 0xef;
/// Lead bytes of four-byte sequences (above 0xf4 the code point would pass U+10FFFF).
inline constexpr unsigned kLead4First = 0xf0;
inline constexpr unsigned kLead4Last = 0xf4;
/// After 0xe0 the second byte starts at 0xa0 (no overlong three-byte forms).
inline constexpr unsigned kAfterE0First = 0xa0;
/// After 0xed the second byte ends at 0x9f (no UTF-16 surrogates).
inline constexpr unsigned kLeadBeforeSurrogates = 0xed;
inline constexpr unsigned kAfterEdLast = 0x9f;
/// After 0xf0 the second byte starts at 0x90 (no overlong four-byte forms).
inline constexpr unsigned kAfterF0First = 0x90;
/// After 0xf4 the second byte ends at 0x8f (nothing above U+10FFFF).
inline constexpr unsigned kAfterF4Last = 0x8f;
/// The low four bits of a byte, one hex digit.
inline constexpr unsigned kNibbleMask = 0xf;
}  // namespace utf8

/// What a lead byte says about the well-formed sequence it starts: its length (0 when the byte
/// cannot start one) and the range its second byte must fall in.
struct Utf8Lead {
    std::size_t length = 0;
    unsigned secondFirst = utf8::kContinuationFirst;
    unsigned secondLast = utf8::kContinuationLast;
};

constexpr Utf8Lead utf8Lead(unsigned c) noexcept {
    if (c >= utf8::kLead2First && c <= utf8::kLead2Last) {
        return {2};
    }
    if (c >= utf8::kLead3First && c <= utf8::kLead3Last) {
        return {3, c == utf8::kLead3First ? utf8::kAfterE0First : utf8::kContinuationFirst,
                c == utf8::kLeadBeforeSurrogates ? utf8::kAfterEdLast : utf8::kContinuationLast};
    }
    if (c >= utf8::kLead4First && c <= utf8::kLead4Last) {
        return {4, c == utf8::kLead4First ? utf8::kAfterF0First : utf8::kContinuationFirst,
                c == utf8::kLead4Last ? utf8::kAfterF4Last : utf8::kContinuationLast};
    }
    return {};
}

/// The length of the well-formed UTF-8 sequence at `s[i]`, or 0 when there is none (RFC 3629).
constexpr std::size_t wellFormedUtf8Length(std::string_view s, std::size_t i) noexcept {
    const Utf8Lead lead = utf8Lead(static_cast<unsigned char>(s[i]));
    if (lead.length == 0 || i + lead.length > s.size()) {
        return 0;
    }
    for (std::size_t k = 1; k < lead.length; ++k) {
        const unsigned b = static_cast<unsigned char>(s[i + k]);
        const unsigned first = k == 1 ? lead.secondFirst : utf8::kContinuationFirst;
        const unsigned last = k == 1 ? lead.secondLast : utf8::kContinuationLast;
        if (b < first || b > last) {
            return 0;
        }
    }
    return lead.length;
}

/// Appends `c`, a control character, as `\u00XX`.
inline void appendJsonControlEscape(std::string& out, unsigned c) {
    constexpr std::string_view kHex = "0123456789abcdef";
    out.append(R"(\u00)");
    out.push_back(kHex[c >> 4U]);
    out.push_back(kHex[c & utf8::kNibbleMask]);
}

}  // namespace detail

namespace http {

/// Appends `s` to `out` as a JSON string (quotes included): control characters are escaped and
/// invalid UTF-8 becomes U+FFFD, so the document stays valid whatever bytes a client chose for
/// its key. For bodies and pages that show keys and policy names.
inline void appendJsonString(std::string& out, std::string_view s) {
    out.push_back('"');
    for (std::size_t i = 0; i < s.size();) {
        const unsigned c = static_cast<unsigned char>(s[i]);
        if (c == '"' || c == '\\') {
            out.push_back('\\');
            out.push_back(static_cast<char>(c));
            ++i;
        } else if (c < detail::utf8::kFirstUnescaped) {
            detail::appendJsonControlEscape(out, c);
            ++i;
        } else if (c < detail::utf8::kFirstNonAscii) {
            out.push_back(static_cast<char>(c));
            ++i;
        } else if (const std::size_t n = detail::wellFormedUtf8Length(s, i); n > 0) {
            out.append(s.substr(i, n));
            i += n;
        } else {
            out.append(R"(\ufffd)");
            ++i;
        }
    }
    out.push_back('"');
}

/// `Content-Type` of `problemJson`.
inline constexpr std::string_view kProblemContentType = "application/problem+json";
/// The draft's problem type for a refused request.
inline constexpr std::string_view kQuotaExceededType =
    "https://iana.org/assignments/http-problem-types#quota-exceeded";

/// A 429 body as RFC 9457 problem details: the draft's `quota-exceeded` type, `status` 429, a
/// `detail` sentence with the wait, and `violated-policies` (the names of the policies that
/// refused). Any bytes in the names are escaped into valid JSON.
[[nodiscard]] inline std::string problemJson(std::span<const std::string_view> violatedPolicies,
                                             std::optional<std::int64_t> retryAfter = {}) {
    std::string out = R"({"type":)";
    appendJsonString(out, kQuotaExceededType);
    out.append(R"(,"title":"Request cannot be satisfied as assigned quota has been exceeded")");
    out.append(R"(,"status":429,"detail":)");
    appendJsonString(out, retryAfter ? detail::formatted("Too many requests; retry in {} seconds.",
                                                         {*retryAfter})
                                     : std::string("Too many requests."));
    out.append(R"(,"violated-policies":[)");
    for (std::size_t i = 0; i < violatedPolicies.size(); ++i) {
        if (i > 0) {
            out.push_back(',');
        }
        appendJsonString(out, violatedPolicies[i]);
    }
    out.append("]}");
    return out;
}

/// `problemJson` for one refusing policy and its decision.
[[nodiscard]] inline std::string problemJson(std::string_view policy, const Decision& decision) {
    return problemJson(std::span<const std::string_view>(&policy, 1), retryAfterSeconds(decision));
}

/// A 400 Bad Request body as RFC 9457 problem details: type `about:blank` (the status says it
/// all), title `Bad Request`, `status` 400 and the `detail` sentence, escaped into valid JSON.
[[nodiscard]] inline std::string badRequestProblemJson(std::string_view detail) {
    std::string out = R"({"type":"about:blank","title":"Bad Request","status":400,"detail":)";
    appendJsonString(out, detail);
    out.push_back('}');
    return out;
}

/// A plain-text 429 body (`text/plain`): one sentence with the wait when there is one.
[[nodiscard]] inline std::string plainBody(const Decision& decision) {
    if (const std::optional<std::int64_t> s = retryAfterSeconds(decision)) {
        return detail::formatted("Too many requests; retry in {} seconds.\n", {*s});
    }
    return decision.never() ? std::string("Too many requests: this request exceeds the limit.\n")
                            : std::string("Too many requests.\n");
}

}  // namespace http
}  // namespace v1
}  // namespace ratelimit
