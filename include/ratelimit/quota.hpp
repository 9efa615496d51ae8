#pragma once

// The rule compiled for one model and one clock tick: the plain values every model's step,
// every storage and the limiter share.

#include <cstdint>

#include <ratelimit/detail/checked_math.hpp>
#include <ratelimit/detail/throw.hpp>
#include <ratelimit/limit.hpp>

namespace ratelimit {
inline namespace v1 {

/// A time in whole ticks of the limiter's clock since that clock's epoch.
using Tick = std::int64_t;

/// A `Limit` compiled for one model and one clock tick: what every model's step reads.
///
/// The bucket fields express the rate `count/period` as an exact rational reduced by
/// g = gcd(count, period): one token is `unitsPerToken` units and each tick refills
/// `unitsPerTick` units, so no emission interval is ever rounded.
/// Thread safety: thread-compatible value type.
struct Quota {
    std::int64_t count = 1;
    std::int64_t burst = 1;
    std::int64_t capacity = 1;        ///< the limit a client sees: `Model::capacity(limit)`
    Tick period = 1;                  ///< ticks
    std::int64_t nanosPerTick = 1;    ///< to report durations in nanoseconds
    std::int64_t unitsPerToken = 1;   ///< period / g
    std::int64_t unitsPerTick = 1;    ///< count / g
    std::int64_t capacityUnits = 1;   ///< burst * unitsPerToken (< 2^62 once accepted)
    std::int64_t maxRunsPerKey = 64;  ///< sliding log only
    Tick lateTolerance = 0;           ///< ticks; see `LimiterOptions::lateCallTolerance`
    /// Ticks by which two keys' times may differ: the largest phase when each key's windows are
    /// shifted by its own (`LimiterOptions::spreadWindowResets`; about a period), else 0.
    Tick keyTimeSpread = 0;
    detail::Divisor perToken;   ///< divides by `unitsPerToken` without a divide
    detail::Divisor perTick;    ///< divides by `unitsPerTick` without a divide
    detail::Divisor perPeriod;  ///< divides by `period` without a divide

    /// Compiles `limit` for the model `M` and a clock whose tick is `nanosPerTick` nanoseconds.
    /// Throws: `std::invalid_argument` when the period is not a whole number of ticks.
    template <class M>
    static Quota make(const Limit& limit, std::int64_t nanosPerTick, std::int64_t maxRunsPerKey,
                      Tick lateToleranceTicks = 0) {
        limit.validate();
        if (limit.period.count() % nanosPerTick != 0) {
            detail::throwInvalidArgument(
                "Limit.period ({}ns) is not a whole number of ticks ({}ns: the clock's, or whole "
                "microseconds with Redis)",
                {limit.period.count(), nanosPerTick});
        }
        if (maxRunsPerKey < 1) {
            detail::throwInvalidArgument("maxRunsPerKey must be at least 1 (got {})",
                                         {maxRunsPerKey});
        }
        Quota q;
        q.count = limit.count;
        q.burst = limit.burst;
        q.capacity = M::capacity(limit);
        q.period = limit.period.count() / nanosPerTick;
        q.nanosPerTick = nanosPerTick;
        const std::int64_t g = detail::gcd(q.count, q.period);
        q.unitsPerToken = q.period / g;
        q.unitsPerTick = q.count / g;
        q.perToken = detail::Divisor(q.unitsPerToken);
        q.perTick = detail::Divisor(q.unitsPerTick);
        q.perPeriod = detail::Divisor(q.period);
        q.capacityUnits = detail::clampToInt64(detail::Int128{q.burst} * q.unitsPerToken);
        q.maxRunsPerKey = maxRunsPerKey;
        q.lateTolerance = lateToleranceTicks < 0 ? 0 : lateToleranceTicks;
        return q;
    }
};

namespace detail {

/// Whether two limiters' quotas agree on everything their keys' states depend on: their
/// limits, tick and options.
inline bool sameQuota(const Quota& a, const Quota& b) noexcept {
    return a.count == b.count && a.burst == b.burst && a.period == b.period &&
           a.nanosPerTick == b.nanosPerTick && a.maxRunsPerKey == b.maxRunsPerKey &&
           a.lateTolerance == b.lateTolerance && a.keyTimeSpread == b.keyTimeSpread;
}

}  // namespace detail

/// The largest magnitudes a model's arithmetic meets for one `Quota`: a storage accepts the
/// quota only if it holds them exactly.
struct ModelRange {
    detail::Int128 span;   ///< the longest time span in ticks (window, or time to refill)
    detail::Int128 units;  ///< the largest state value (count, or bucket units)
};

}  // namespace v1
}  // namespace ratelimit
