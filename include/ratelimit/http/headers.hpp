#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <ratelimit/decision.hpp>
#include <ratelimit/detail/siphash.hpp>
#include <ratelimit/detail/throw.hpp>
#include <ratelimit/limit.hpp>

namespace ratelimit {
inline namespace v1 {

namespace detail {

/// Largest Integer an RFC 9651 structured field may carry (15 digits).
inline constexpr std::int64_t kSfIntegerMax = 999'999'999'999'999;

inline constexpr std::int64_t clampSfInteger(std::int64_t v) noexcept {
    return v < 0 ? 0 : (v > kSfIntegerMax ? kSfIntegerMax : v);
}

/// `d` in whole seconds, rounded up, saturating (a `kNever` wait stays huge, not negative).
inline constexpr std::int64_t ceilSeconds(std::chrono::nanoseconds d) noexcept {
    if (d <= std::chrono::nanoseconds::zero()) {
        return 0;
    }
    const std::int64_t ns = d.count();
    return ns / 1'000'000'000 + (ns % 1'000'000'000 != 0 ? 1 : 0);
}

/// The printable ASCII range an RFC 9651 sf-string may carry (%x20-7E).
inline constexpr char kSfStringFirst = 0x20;
inline constexpr char kSfStringLast = 0x7e;

inline constexpr bool isSfStringChar(char c) noexcept {
    return c >= kSfStringFirst && c <= kSfStringLast;
}

/// True when every byte may stand in an RFC 9651 sf-string (printable ASCII, %x20-7E).
inline constexpr bool isSfStringSafe(std::string_view s) noexcept {
    return std::all_of(s.begin(), s.end(), isSfStringChar);
}

/// Appends `s` as an RFC 9651 sf-string: quoted, `"` and `\` escaped. Bytes outside %x20-7E
/// cannot be serialised; they are written as `?` (names are checked at configuration time, so
/// this only guards hand-made values).
inline void appendSfString(std::string& out, std::string_view s) {
    out.push_back('"');
    for (const char c : s) {
        if (c == '"' || c == '\\') {
            out.push_back('\\');
            out.push_back(c);
        } else if (!isSfStringChar(c)) {
            out.push_back('?');
        } else {
            out.push_back(c);
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
/// Where the first, second and third byte of a group sit in its 24 bits.
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

/// Appends `bytes` as an RFC 9651 Byte Sequence: `:` base64 with padding `:`.
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

/// The sixteen bytes of a SipHash-128 digest, big-endian (high half first).
inline std::string digestBytes(const Digest128& h) {
    constexpr std::size_t kHalfBytes = sizeof(std::uint64_t);
    constexpr unsigned kBitsPerByte = 8;
    constexpr std::size_t kTopByteShift = (kHalfBytes - 1) * kBitsPerByte;
    constexpr std::uint64_t kByteMask = 0xff;
    std::string raw(2 * kHalfBytes, '\0');
    for (std::size_t i = 0; i < kHalfBytes; ++i) {
        const std::size_t shift = kTopByteShift - kBitsPerByte * i;
        raw[i] = static_cast<char>((h.high >> shift) & kByteMask);
        raw[kHalfBytes + i] = static_cast<char>((h.low >> shift) & kByteMask);
    }
    return raw;
}

}  // namespace detail

namespace http {

/// One response header field.
struct Header {
    std::string name;
    std::string value;
    friend bool operator==(const Header&, const Header&) = default;
};

/// A quota policy as a client is told about it (`RateLimit-Policy`, draft-ietf-httpapi-
/// ratelimit-headers): a name, a quota and, when it is a whole number of seconds, a window.
/// Thread safety: thread-compatible value type.
struct QuotaPolicy {
    /// The policy's identifier: printable ASCII (RFC 9651 sf-string), `"` and `\` allowed
    /// (they are escaped). At most 256 bytes.
    std::string name;
    /// `q`: the quota in requests (cost units). 0 … 2^48.
    std::int64_t quota = 0;
    /// `w`: sent only when a whole number of seconds (the draft has no sub-second windows).
    std::chrono::nanoseconds window{0};

    /// The policy of a `Limit`: quota `count` per window `period`, or `burst` for a bucket
    /// (`bucket == true`), matching `Decision::limit`.
    /// Throws: `std::invalid_argument` naming `QuotaPolicy.name` when it cannot be sent.
    [[nodiscard]] static QuotaPolicy forLimit(std::string name, const Limit& limit,
                                              bool bucket = false) {
        QuotaPolicy p{std::move(name), bucket ? limit.burst : limit.count, limit.period};
        p.validate();
        return p;
    }

    /// Throws: `std::invalid_argument` naming the field when the policy cannot be sent.
    void validate() const {
        if (name.size() > 256 || !detail::isSfStringSafe(name)) {
            detail::throwInvalidArgument(
                "QuotaPolicy.name must be at most 256 printable ASCII characters (RFC 9651 "
                "sf-string); got a name of " +
                std::to_string(name.size()) + " bytes with others");
        }
        if (quota < 0 || quota > Limit::kMaxCount) {
            detail::throwInvalidArgument("QuotaPolicy.quota must be in 0..2^48 (got " +
                                         std::to_string(quota) + ")");
        }
    }
};

/// How the rate-limit fields are written. Fields only ever get added at the end.
struct HeaderOptions {
    /// How `X-RateLimit-Reset` counts.
    enum class Reset {
        /// Unix time in seconds at which the quota resets (GitHub, express-rate-limit's legacy
        /// fields): what most client libraries read.
        kEpochSeconds,
        /// Seconds from now (immune to clock skew between client and server).
        kDeltaSeconds,
    };

    /// `RateLimit-Policy` and `RateLimit` (draft-ietf-httpapi-ratelimit-headers-08 … -11
    /// syntax). Default on.
    bool draftFields = true;
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset`. Default on.
    bool legacyFields = true;
    /// Default epoch seconds.
    Reset legacyReset = Reset::kEpochSeconds;
    /// `Retry-After` (delay-seconds) on a refusal that can pass later. Default on.
    bool retryAfter = true;
    /// Up to this much is added to `Retry-After` (never subtracted), so refused clients do not
    /// come back all at once. Derived from the client key (no random state). 0 … 1 h; default 0.
    std::chrono::seconds retryAfterJitter{0};
    /// Adds `pk` (partition key) to the draft fields: a keyed hash of the client key, never the
    /// key itself. Default off.
    bool partitionKey = false;
    /// The SipHash key of `pk`: a secret of this deployment (not all zero when `partitionKey`).
    std::array<std::uint64_t, 2> partitionKeySecret{};
};

/// One policy checked for a request, and its answer.
struct PolicyDecision {
    const QuotaPolicy* policy = nullptr;
    Decision decision;
};

/// What a response needs beyond the decisions.
struct ResponseContext {
    /// Wall time, for `X-RateLimit-Reset` as epoch seconds; the default (the epoch itself)
    /// means "read `std::chrono::system_clock` now".
    std::chrono::system_clock::time_point now{};
    /// The limiter key of the client (for `pk` and the jitter); may be empty.
    std::string_view clientKey;
};

/// `Retry-After` of `d` in whole seconds, rounded up and never 0; nullopt when `d` is allowed
/// or can never pass (a request above the limit gets no `Retry-After`: no wait helps).
[[nodiscard]] constexpr std::optional<std::int64_t> retryAfterSeconds(const Decision& d) noexcept {
    if (d.allowed || d.never()) {
        return std::nullopt;
    }
    const std::int64_t s = detail::ceilSeconds(d.retryAfter);
    return detail::clampSfInteger(s < 1 ? 1 : s);
}

/// Writes the rate-limit response fields for a request from the decisions of the policies that
/// checked it.
///
/// - `RateLimit-Policy: "login";q=5;w=60` and `RateLimit: "login";r=4;t=60`, one list member per
///   policy (RFC 9651 lists; names quoted and escaped). `t` is the time until the key is fresh
///   when allowed, the wait when refused.
/// - `X-RateLimit-Limit/Remaining/Reset` of the policy that binds: the first refusal, else the
///   one with the least remaining.
/// - `Retry-After` when refused: the longest wait among the refusals, in whole seconds rounded
///   up, never 0, plus the optional jitter; none when a refusal can never pass.
/// - A degraded decision (the store failed and the failure policy answered) carries invented
///   numbers: its policy is left out of every rate-limit field (`Retry-After` stays).
///
/// Thread safety: thread-compatible; the const members may be called concurrently.
class RateLimitHeaders {
public:
    /// Throws: `std::invalid_argument` naming the `HeaderOptions` field that is out of range.
    explicit RateLimitHeaders(HeaderOptions options = {}) : options_(options) {
        if (options_.retryAfterJitter < std::chrono::seconds{0} ||
            options_.retryAfterJitter > std::chrono::hours{1}) {
            detail::throwInvalidArgument("HeaderOptions.retryAfterJitter must be in 0..1h (got " +
                                         std::to_string(options_.retryAfterJitter.count()) + "s)");
        }
        if (options_.partitionKey && options_.partitionKeySecret[0] == 0 &&
            options_.partitionKeySecret[1] == 0) {
            detail::throwInvalidArgument(
                "HeaderOptions.partitionKeySecret must be set (not all zero) when partitionKey "
                "is on: pk must be a keyed hash, not something a client can compute");
        }
    }

    /// The fields for a request checked by several policies.
    [[nodiscard]] std::vector<Header> operator()(std::span<const PolicyDecision> checks,
                                                 const ResponseContext& context = {}) const {
        std::vector<Header> out;
        const std::string pk = partitionKeyParameter(context);

        bool allowed = true;
        const PolicyDecision* binding = nullptr;
        std::string policyField;
        std::string limitField;
        for (const PolicyDecision& c : checks) {
            if (c.policy == nullptr) {
                continue;
            }
            allowed = allowed && c.decision.allowed;
            if (c.decision.degraded) {
                continue;
            }
            if (binds(c, binding)) {
                binding = &c;
            }
            if (options_.draftFields) {
                appendDraftMembers(policyField, limitField, c, pk);
            }
        }
        if (!policyField.empty()) {
            out.push_back({"RateLimit-Policy", std::move(policyField)});
            out.push_back({"RateLimit", std::move(limitField)});
        }
        if (options_.legacyFields && binding != nullptr) {
            appendLegacyFields(out, *binding, context);
        }
        if (!allowed && options_.retryAfter) {
            if (const std::optional<std::int64_t> wait = longestWait(checks); wait && *wait > 0) {
                out.push_back({"Retry-After", std::to_string(*wait + jitter(context, *wait))});
            }
        }
        return out;
    }

    /// The fields for a request checked by one policy.
    [[nodiscard]] std::vector<Header> operator()(const QuotaPolicy& policy,
                                                 const Decision& decision,
                                                 const ResponseContext& context = {}) const {
        const PolicyDecision one{&policy, decision};
        return (*this)(std::span<const PolicyDecision>(&one, 1), context);
    }

    [[nodiscard]] const HeaderOptions& options() const noexcept { return options_; }

private:
    /// `;pk=:…:` (a keyed hash of the client key) when enabled and there is a key, else empty.
    [[nodiscard]] std::string partitionKeyParameter(const ResponseContext& context) const {
        if (!options_.partitionKey || context.clientKey.empty()) {
            return {};
        }
        const detail::Digest128 h = detail::SipHash128(
            options_.partitionKeySecret[0], options_.partitionKeySecret[1])(context.clientKey);
        std::string pk = ";pk=";
        detail::appendSfByteSequence(pk, detail::digestBytes(h));
        return pk;
    }

    /// True when `c` binds rather than `binding` (the policy so far): the first refusal, else
    /// the one with the least remaining.
    static bool binds(const PolicyDecision& c, const PolicyDecision* binding) noexcept {
        if (binding == nullptr) {
            return true;
        }
        const Decision& now = c.decision;
        const Decision& before = binding->decision;
        if (before.allowed != now.allowed) {
            return !now.allowed;
        }
        return now.allowed && now.remaining < before.remaining;
    }

    /// One list member of `RateLimit-Policy` and one of `RateLimit` for `c`.
    static void appendDraftMembers(std::string& policyField, std::string& limitField,
                                   const PolicyDecision& c, std::string_view pk) {
        appendMember(policyField, c.policy->name);
        policyField.append(";q=").append(std::to_string(detail::clampSfInteger(c.policy->quota)));
        const std::int64_t w = c.policy->window.count();
        if (w > 0 && w % 1'000'000'000 == 0) {
            policyField.append(";w=").append(std::to_string(w / 1'000'000'000));
        }
        policyField.append(pk);
        appendMember(limitField, c.policy->name);
        limitField.append(";r=")
            .append(std::to_string(detail::clampSfInteger(c.decision.remaining)))
            .append(";t=")
            .append(std::to_string(effectiveWindow(c.decision)))
            .append(pk);
    }

    /// `X-RateLimit-Limit/Remaining/Reset` of the binding policy.
    void appendLegacyFields(std::vector<Header>& out, const PolicyDecision& binding,
                            const ResponseContext& context) const {
        const Decision& d = binding.decision;
        std::int64_t reset = effectiveWindow(d);
        if (options_.legacyReset == HeaderOptions::Reset::kEpochSeconds) {
            const auto now = context.now == std::chrono::system_clock::time_point{}
                                 ? std::chrono::system_clock::now()
                                 : context.now;
            const std::int64_t nowSeconds =
                std::chrono::ceil<std::chrono::seconds>(now.time_since_epoch()).count();
            reset = detail::clampSfInteger(nowSeconds + reset);
        }
        out.push_back(
            {"X-RateLimit-Limit", std::to_string(detail::clampSfInteger(binding.policy->quota))});
        out.push_back(
            {"X-RateLimit-Remaining", std::to_string(detail::clampSfInteger(d.remaining))});
        out.push_back({"X-RateLimit-Reset", std::to_string(reset)});
    }

    /// The longest wait among the refusals in whole seconds; nullopt when one can never pass
    /// (no wait helps).
    static std::optional<std::int64_t> longestWait(std::span<const PolicyDecision> checks) {
        std::int64_t wait = 0;
        for (const PolicyDecision& c : checks) {
            if (c.policy == nullptr || c.decision.allowed) {
                continue;
            }
            const std::optional<std::int64_t> s = retryAfterSeconds(c.decision);
            if (!s) {
                return std::nullopt;
            }
            wait = *s > wait ? *s : wait;
        }
        return wait;
    }

    static void appendMember(std::string& field, std::string_view name) {
        if (!field.empty()) {
            field.append(", ");
        }
        detail::appendSfString(field, name);
    }

    /// `t`: seconds until the key is fresh when allowed; the wait when refused (so a
    /// `Retry-After` never points before the end of the effective window).
    static std::int64_t effectiveWindow(const Decision& d) noexcept {
        if (!d.allowed && !d.never()) {
            const std::optional<std::int64_t> s = retryAfterSeconds(d);
            return s ? *s : 0;
        }
        return detail::clampSfInteger(detail::ceilSeconds(d.resetAfter));
    }

    [[nodiscard]] std::int64_t jitter(const ResponseContext& context,
                                      std::int64_t wait) const noexcept {
        // The first SipHash key word of the jitter: "jitter01" in ASCII, fixed so that a
        // client's jitter is the same on every server.
        constexpr std::uint64_t kJitterHashKey = 0x6a69747465723031ULL;
        const std::int64_t max = options_.retryAfterJitter.count();
        if (max <= 0) {
            return 0;
        }
        const detail::Digest128 h =
            detail::SipHash128(kJitterHashKey, static_cast<std::uint64_t>(wait))(context.clientKey);
        return static_cast<std::int64_t>(h.low % static_cast<std::uint64_t>(max + 1));
    }

    HeaderOptions options_;
};

}  // namespace http
}  // namespace v1
}  // namespace ratelimit
