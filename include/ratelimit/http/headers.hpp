#pragma once

#include <algorithm>
#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <ratelimit/algorithms/algorithm.hpp>
#include <ratelimit/algorithms/limit_set.hpp>
#include <ratelimit/decision.hpp>
#include <ratelimit/detail/checked_math.hpp>
#include <ratelimit/detail/chrono.hpp>
#include <ratelimit/detail/http_fields.hpp>
#include <ratelimit/detail/siphash.hpp>
#include <ratelimit/detail/throw.hpp>
#include <ratelimit/limit.hpp>

namespace ratelimit {
inline namespace v1 {

namespace detail {

/// `d` in whole seconds, rounded up, saturating (a `kNever` wait stays huge, not negative).
inline constexpr std::int64_t ceilSeconds(std::chrono::nanoseconds d) noexcept {
    if (d <= std::chrono::nanoseconds::zero()) {
        return 0;
    }
    const std::int64_t ns = d.count();
    return ns / 1'000'000'000 + (ns % 1'000'000'000 != 0 ? 1 : 0);
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

    /// The policy of a `Limit` enforced by `algorithm`, read one way for every algorithm
    /// (docs/http.md, "What a policy says"): the quota is what a client may spend at once, the
    /// capacity (`count` for a window, `burst` for a bucket, matching `Decision::limit`), and
    /// the window is the time the limit takes to grant that much again (`period` for a window;
    /// for a bucket, the time its burst takes to refill, `burst × period / count`), so that
    /// `q / w` is the sustained rate. A window that is not a whole number of nanoseconds is
    /// left out (0), as one that is not a whole number of seconds is from the fields.
    /// Throws: `std::invalid_argument` naming `QuotaPolicy.name` when it cannot be sent.
    [[nodiscard]] static QuotaPolicy forLimit(std::string name, const Limit& limit,
                                              Algorithm algorithm) {
        const std::int64_t quota = capacity(algorithm, limit);
        QuotaPolicy p{std::move(name), quota, timeToGrant(quota, limit)};
        p.validate();
        return p;
    }

    /// The policy of the limiter that decides (a `Limiter` or an `AnyLimiter`): built from its
    /// own limit and algorithm, so the fields cannot disagree with its decisions.
    /// Throws: as `forLimit`.
    template <class L>
    requires requires(const L& limiter) {
        { limiter.limit() } -> std::convertible_to<const Limit&>;
    }
    [[nodiscard]] static QuotaPolicy forLimiter(std::string name, const L& limiter) {
        const Limit& limit = limiter.limit();
        const Algorithm algorithm = algorithmOf(limiter);
        return forLimit(std::move(name), limit, algorithm);
    }

    /// The policies of a limit set's members (a `Limiter` of a `LimitSetModel`), in the
    /// members' order, named `names`: each one as `forLimit` reads its member's limit and
    /// algorithm. Throws: as `forLimit`.
    template <class L>
    requires detail::kIsLimitSet<typename L::ModelType>
    [[nodiscard]] static std::array<QuotaPolicy, L::ModelType::kSize> forLimitSet(
        std::array<std::string, L::ModelType::kSize> names, const L& limiter) {
        using Set = typename L::ModelType;
        std::array<QuotaPolicy, Set::kSize> policies;
        Set::forEach([&]<std::size_t I>() {
            policies[I] = forLimit(std::move(names[I]), limiter.limit()[I],
                                   kAlgorithmOf<typename Set::template Member<I>>);
        });
        return policies;
    }

    /// Throws: `std::invalid_argument` naming the field when the policy cannot be sent.
    void validate() const {
        if (name.size() > 256 || !detail::http_fields::isSfStringSafe(name)) {
            detail::throwInvalidArgument(
                "QuotaPolicy.name must be at most 256 printable ASCII characters (RFC 9651 "
                "sf-string); got a name of {} bytes with others",
                {name.size()});
        }
        if (quota < 0 || quota > Limit::kMaxCount) {
            detail::throwInvalidArgument("QuotaPolicy.quota must be in 0..2^48 (got {})", {quota});
        }
    }

private:
    /// The algorithm of a `Limiter` (its model's) or of an `AnyLimiter` (its own).
    template <class L>
    static Algorithm algorithmOf(const L& limiter) noexcept {
        if constexpr (requires { limiter.algorithm(); }) {
            return limiter.algorithm();
        } else {
            return kAlgorithmOf<typename L::ModelType>;
        }
    }

    /// `quota × period / count` exactly, or 0 when that is not a whole number of nanoseconds.
    static std::chrono::nanoseconds timeToGrant(std::int64_t quota, const Limit& limit) noexcept {
        const detail::Int128 scaled = detail::Int128{quota} * limit.period.count();
        if (scaled % limit.count != 0 || scaled / limit.count > detail::kInt64Max) {
            return std::chrono::nanoseconds{0};
        }
        return std::chrono::nanoseconds{static_cast<std::int64_t>(scaled / limit.count)};
    }
};

/// How the rate-limit fields are written. Fields only ever get added at the end.
struct HeaderOptions {
    /// A whole, in `nearLimitPercent`.
    static constexpr int kPercent = 100;
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
    /// An early warning for clients near their limit: when above 0, an admitted request whose
    /// binding policy has less than this percentage of its quota left gets
    /// `X-RateLimit-Warning: "name";r=…;q=…`. 0 … 100; default 0 (off).
    int nearLimitPercent = 0;
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
    return detail::http_fields::clampSfInteger(s < 1 ? 1 : s);
}

/// Writes the rate-limit response fields for a request from the decisions of the policies that
/// checked it.
///
/// - `RateLimit-Policy: "login";q=5;w=60` and `RateLimit: "login";r=4;t=60`, one list member per
///   policy (RFC 9651 lists; names quoted and escaped). `t` is the time until the key is fresh
///   when allowed, the wait when refused.
/// - `X-RateLimit-Limit/Remaining/Reset` of the policy that binds: the refusal with the longest
///   wait, else the one with the least remaining (the rule a limit set names its binding member
///   by; ties go to the earlier policy).
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
            detail::throwInvalidArgument(
                "HeaderOptions.retryAfterJitter must be in 0..1h (got {}s)",
                {options_.retryAfterJitter.count()});
        }
        if (options_.nearLimitPercent < 0 || options_.nearLimitPercent > HeaderOptions::kPercent) {
            detail::throwInvalidArgument(
                "HeaderOptions.nearLimitPercent must be in 0..100 (got {})",
                {options_.nearLimitPercent});
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
            if (c.decision.degraded || c.decision.wouldRefuse) {
                continue;  // invented numbers, or a dry-run's refusal of an admitted request
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
        if (allowed && binding != nullptr && nearLimit(*binding)) {
            out.push_back({"X-RateLimit-Warning", warning(*binding)});
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

    /// The fields for a request checked by a limit set: its members' policies
    /// (`QuotaPolicy::forLimitSet`) and decisions (`Limiter::tryAcquire(key, cost, each)`), in
    /// the members' order, one list member each.
    template <std::size_t N>
    [[nodiscard]] std::vector<Header> operator()(const std::array<QuotaPolicy, N>& policies,
                                                 const std::array<Decision, N>& each,
                                                 const ResponseContext& context = {}) const {
        std::array<PolicyDecision, N> checks;
        for (std::size_t i = 0; i < N; ++i) {
            checks[i] = {&policies[i], each[i]};
        }
        return (*this)(std::span<const PolicyDecision>(checks), context);
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
        detail::http_fields::appendSfByteSequence(pk, detail::digestBytes(h));
        return pk;
    }

    /// True when `c` binds rather than `binding` (the policy so far): `detail::bindsTighter`.
    static bool binds(const PolicyDecision& c, const PolicyDecision* binding) noexcept {
        if (binding == nullptr) {
            return true;
        }
        return detail::bindsTighter(c.decision, binding->decision);
    }

    /// One list member of `RateLimit-Policy` and one of `RateLimit` for `c`.
    static void appendDraftMembers(std::string& policyField, std::string& limitField,
                                   const PolicyDecision& c, std::string_view pk) {
        appendMember(policyField, c.policy->name);
        policyField.append(";q=").append(
            std::to_string(detail::http_fields::clampSfInteger(c.policy->quota)));
        const std::int64_t w = c.policy->window.count();
        if (w > 0 && w % 1'000'000'000 == 0) {
            policyField.append(";w=").append(std::to_string(w / 1'000'000'000));
        }
        policyField.append(pk);
        appendMember(limitField, c.policy->name);
        limitField.append(";r=")
            .append(std::to_string(detail::http_fields::clampSfInteger(c.decision.remaining)))
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
            reset = detail::http_fields::clampSfInteger(nowSeconds + reset);
        }
        out.push_back({"X-RateLimit-Limit",
                       std::to_string(detail::http_fields::clampSfInteger(binding.policy->quota))});
        out.push_back({"X-RateLimit-Remaining",
                       std::to_string(detail::http_fields::clampSfInteger(d.remaining))});
        out.push_back({"X-RateLimit-Reset", std::to_string(reset)});
    }

    /// True when the warning is on and `c` has less than `nearLimitPercent` % of its quota left.
    [[nodiscard]] bool nearLimit(const PolicyDecision& c) const noexcept {
        const detail::Int128 left = detail::Int128{c.decision.remaining} * HeaderOptions::kPercent;
        return options_.nearLimitPercent > 0 &&
               left < detail::Int128{c.policy->quota} * options_.nearLimitPercent;
    }

    /// `"name";r=…;q=…`: the policy, what is left and of how much.
    static std::string warning(const PolicyDecision& c) {
        std::string field;
        appendMember(field, c.policy->name);
        field.append(";r=")
            .append(std::to_string(detail::http_fields::clampSfInteger(c.decision.remaining)))
            .append(";q=")
            .append(std::to_string(detail::http_fields::clampSfInteger(c.policy->quota)));
        return field;
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
        detail::http_fields::appendSfString(field, name);
    }

    /// `t`: seconds until the key is fresh when allowed; the wait when refused (so a
    /// `Retry-After` never points before the end of the effective window).
    static std::int64_t effectiveWindow(const Decision& d) noexcept {
        if (!d.allowed && !d.never()) {
            const std::optional<std::int64_t> s = retryAfterSeconds(d);
            return s ? *s : 0;
        }
        return detail::http_fields::clampSfInteger(detail::ceilSeconds(d.resetAfter));
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
