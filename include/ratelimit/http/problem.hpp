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

/// Appends `s` as a JSON string. Control characters are escaped; invalid UTF-8 becomes U+FFFD,
/// so the document stays valid whatever the bytes.
inline void appendJsonString(std::string& out, std::string_view s) {
    constexpr std::string_view kHex = "0123456789abcdef";
    out.push_back('"');
    for (std::size_t i = 0; i < s.size();) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c == '"' || c == '\\') {
            out.push_back('\\');
            out.push_back(static_cast<char>(c));
            ++i;
        } else if (c < 0x20) {
            out.append("\\u00");
            out.push_back(kHex[c >> 4U]);
            out.push_back(kHex[c & 0xfU]);
            ++i;
        } else if (c < 0x80) {
            out.push_back(static_cast<char>(c));
            ++i;
        } else {
            // The length of a well-formed UTF-8 sequence starting here, or 0 (RFC 3629).
            std::size_t n = 0;
            unsigned lo = 0x80;
            unsigned hi = 0xbf;
            if (c >= 0xc2 && c <= 0xdf) {
                n = 2;
            } else if (c >= 0xe0 && c <= 0xef) {
                n = 3;
                lo = c == 0xe0 ? 0xa0 : 0x80;
                hi = c == 0xed ? 0x9f : 0xbf;
            } else if (c >= 0xf0 && c <= 0xf4) {
                n = 4;
                lo = c == 0xf0 ? 0x90 : 0x80;
                hi = c == 0xf4 ? 0x8f : 0xbf;
            }
            bool ok = n > 0 && i + n <= s.size();
            for (std::size_t k = 1; ok && k < n; ++k) {
                const auto b = static_cast<unsigned char>(s[i + k]);
                ok = k == 1 ? (b >= lo && b <= hi) : (b >= 0x80 && b <= 0xbf);
            }
            if (ok) {
                out.append(s.substr(i, n));
                i += n;
            } else {
                out.append("\\ufffd");
                ++i;
            }
        }
    }
    out.push_back('"');
}

}  // namespace detail

namespace http {

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
    std::string out = "{\"type\":";
    detail::appendJsonString(out, kQuotaExceededType);
    out.append(",\"title\":\"Request cannot be satisfied as assigned quota has been exceeded\"");
    out.append(",\"status\":429,\"detail\":");
    detail::appendJsonString(
        out, retryAfter ? "Too many requests; retry in " + std::to_string(*retryAfter) + " seconds."
                        : std::string("Too many requests."));
    out.append(",\"violated-policies\":[");
    for (std::size_t i = 0; i < violatedPolicies.size(); ++i) {
        if (i > 0) {
            out.push_back(',');
        }
        detail::appendJsonString(out, violatedPolicies[i]);
    }
    out.append("]}");
    return out;
}

/// `problemJson` for one refusing policy and its decision.
[[nodiscard]] inline std::string problemJson(std::string_view policy, const Decision& decision) {
    return problemJson(std::span<const std::string_view>(&policy, 1), retryAfterSeconds(decision));
}

/// A plain-text 429 body (`text/plain`): one sentence with the wait when there is one.
[[nodiscard]] inline std::string plainBody(const Decision& decision) {
    if (const std::optional<std::int64_t> s = retryAfterSeconds(decision)) {
        return "Too many requests; retry in " + std::to_string(*s) + " seconds.\n";
    }
    return decision.never() ? std::string("Too many requests: this request exceeds the limit.\n")
                            : std::string("Too many requests.\n");
}

}  // namespace http
}  // namespace v1
}  // namespace ratelimit
