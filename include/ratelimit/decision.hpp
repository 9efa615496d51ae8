#pragma once

#include <cstdint>
#include <ratio>

#include <ratelimit/detail/chrono.hpp>

namespace ratelimit {
inline namespace v1 {

/// The answer to one `tryAcquire` or `peek`: whether the request may go on, and everything an
/// HTTP 429 response needs.
///
/// Durations are nanoseconds whatever the clock. Thread safety: thread-compatible value type.
struct Decision {
    /// `retryAfter` of a request that can never pass (a cost above the limit).
    static constexpr std::chrono::nanoseconds kNever = std::chrono::nanoseconds::max();

    /// The request may go on (its cost was consumed, unless this was a peek).
    bool allowed = false;
    /// The capacity this decision was made against: `count` for the window algorithms,
    /// `burst` for the buckets.
    std::int64_t limit = 0;
    /// Cost units still available after this decision, rounded down, never negative.
    std::int64_t remaining = 0;
    /// Zero when allowed; otherwise the smallest wait after which the same call passes if
    /// nothing else happens (a call at exactly `now + retryAfter` passes), or `kNever`.
    std::chrono::nanoseconds retryAfter{0};
    /// Time until the key is back to its full, untouched state; zero if it already is.
    std::chrono::nanoseconds resetAfter{0};
    /// The store failed and the failure policy answered.
    bool degraded = false;
    /// Dry-run (`LimiterOptions::dryRun`): enforcing would have refused this call. `allowed` is
    /// true; `remaining`, `retryAfter` and `resetAfter` are the refusal's; nothing was consumed.
    bool wouldRefuse = false;
    /// A penalized limiter's (`PenalizedModel`): this refusal was the strike that completed the
    /// count, and started the key's block. (Beside the other flags, so a decision stays 48
    /// bytes on 64-bit targets.)
    bool penaltyStarted = false;
    /// Which member of a limit set decided; 0 for a single limit.
    std::uint32_t policy = 0;

    /// True when the request can never pass, whatever the wait.
    [[nodiscard]] constexpr bool never() const noexcept { return retryAfter == kNever; }

    /// `t + retryAfter`, saturated at the time point's maximum instead of overflowing.
    template <class TimePoint>
    [[nodiscard]] constexpr TimePoint retryAt(TimePoint t) const noexcept {
        using Duration = typename TimePoint::duration;
        static_assert(std::chrono::treat_as_floating_point_v<typename Duration::rep> ||
                          std::ratio_greater_equal_v<typename Duration::period, std::nano>,
                      "retryAt needs a time point no finer than nanoseconds");
        const Duration wait = std::chrono::ceil<Duration>(retryAfter);
        // `max() - wait` cannot overflow (wait >= 0); `max() - t` would for t < 0.
        if (never() || t > TimePoint::max() - wait) {
            return TimePoint::max();
        }
        return t + wait;
    }

    constexpr explicit operator bool() const noexcept { return allowed; }

    friend constexpr bool operator==(const Decision&, const Decision&) = default;
};

namespace detail {

/// Whether `candidate` binds a client more tightly than `current`: a refusal over an admission,
/// the longer wait between refusals, the less remaining between admissions; a tie keeps
/// `current`. The one rule for a limit set's binding member and for the rate-limit fields'
/// binding policy. (A limit set keeps only the fields it reads of the binding member so far:
/// `LimitSetModel::consider`.)
[[gnu::always_inline]] constexpr bool bindsTighter(const Decision& candidate,
                                                   const Decision& current) noexcept {
    if (candidate.allowed != current.allowed) {
        return !candidate.allowed;
    }
    return candidate.allowed ? candidate.remaining < current.remaining
                             : candidate.retryAfter > current.retryAfter;
}

}  // namespace detail

}  // namespace v1
}  // namespace ratelimit
