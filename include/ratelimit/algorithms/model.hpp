#pragma once

#include <chrono>
#include <concepts>
#include <cstdint>
#include <string_view>

#include <ratelimit/decision.hpp>
#include <ratelimit/detail/checked_math.hpp>
#include <ratelimit/detail/inline.hpp>
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
    detail::Divisor perToken;         ///< divides by `unitsPerToken` without a divide
    detail::Divisor perTick;          ///< divides by `unitsPerTick` without a divide

    /// Compiles `limit` for the model `M` and a clock whose tick is `nanosPerTick` nanoseconds.
    /// Throws: `std::invalid_argument` when the period is not a whole number of ticks.
    template <class M>
    static Quota make(const Limit& limit, std::int64_t nanosPerTick, std::int64_t maxRunsPerKey,
                      Tick lateToleranceTicks = 0) {
        limit.validate();
        if (limit.period.count() % nanosPerTick != 0) {
            detail::throwInvalidArgument({"Limit.period (", detail::Decimal(limit.period.count()),
                                          "ns) is not a whole number of ticks (",
                                          detail::Decimal(nanosPerTick),
                                          "ns: the clock's, or whole microseconds with Redis)"});
        }
        if (maxRunsPerKey < 1) {
            detail::throwInvalidArgument(
                {"maxRunsPerKey must be at least 1 (got ", detail::Decimal(maxRunsPerKey), ")"});
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
        q.capacityUnits = detail::clampToInt64(detail::Int128{q.burst} * q.unitsPerToken);
        q.maxRunsPerKey = maxRunsPerKey;
        q.lateTolerance = lateToleranceTicks < 0 ? 0 : lateToleranceTicks;
        return q;
    }
};

/// The largest magnitudes a model's arithmetic meets for one `Quota`: a storage accepts the
/// quota only if it holds them exactly.
struct ModelRange {
    detail::Int128 span;   ///< the longest time span in ticks (window, or time to refill)
    detail::Int128 units;  ///< the largest state value (count, or bucket units)
};

/// What a limiter needs from an algorithm: a per-key `State` whose value-initialised form is
/// the fresh key, and a pure `step` over it.
///
/// `step(state, quota, now, cost)` decides and applies one request: it changes `state` only
/// when it admits a cost above zero, or to rebase a key whose clock stepped back; a cost above
/// the limit changes nothing. It never reads a clock, locks or allocates for I/O.
/// `isFresh(state, quota, now)` says the key is back to its untouched state (its memory may
/// be reused). `lastWrite(state)` is the tick of the key's last write (the minimum tick for a
/// fresh key). `range(quota)` gives the magnitudes the arithmetic meets. `capacity(limit)` is
/// the limit a client sees (`Decision::limit`, the most one call may cost): the one place that
/// says it is `burst` for a bucket and `count` for a window. `kBucket` says the model has no
/// windows (so `LimiterOptions::spreadWindowResets` has nothing to shift).
template <class M>
concept AlgorithmModel = std::default_initializable<typename M::State> &&
    std::copyable<typename M::State> &&
    requires(typename M::State& state, const typename M::State& constState, const Quota& quota,
             const Limit& limit, Tick now, std::int64_t cost) {
    { M::kName } -> std::convertible_to<std::string_view>;
    { M::kBucket } -> std::convertible_to<bool>;
    { M::capacity(limit) } -> std::same_as<std::int64_t>;
    { M::step(state, quota, now, cost) } -> std::same_as<Decision>;
    { M::isFresh(constState, quota, now) } -> std::same_as<bool>;
    { M::lastWrite(constState) } -> std::same_as<Tick>;
    { M::range(quota) } -> std::same_as<ModelRange>;
};

namespace detail {

/// A `Decision` with its durations in ticks converted to nanoseconds.
RATELIMIT_ALWAYS_INLINE Decision decision(const Quota& q, bool allowed, std::int64_t remaining,
                                          std::chrono::nanoseconds retryAfter,
                                          Tick resetTicks) noexcept {
    Decision d;
    d.allowed = allowed;
    d.limit = q.capacity;
    d.remaining = remaining < 0 ? 0 : remaining;
    d.retryAfter = retryAfter;
    d.resetAfter = std::chrono::nanoseconds{resetTicks * q.nanosPerTick};
    return d;
}

/// The cost is admitted: `remaining` after it, the key fresh again `resetTicks` from now.
RATELIMIT_ALWAYS_INLINE Decision admitted(const Quota& q, std::int64_t remaining,
                                          Tick resetTicks) noexcept {
    return decision(q, true, remaining, std::chrono::nanoseconds{0}, resetTicks);
}

/// The cost is refused: the same call passes `retryTicks` from now.
RATELIMIT_ALWAYS_INLINE Decision refused(const Quota& q, std::int64_t remaining, Tick retryTicks,
                                         Tick resetTicks) noexcept {
    return decision(q, false, remaining, std::chrono::nanoseconds{retryTicks * q.nanosPerTick},
                    resetTicks);
}

/// The cost is above the capacity: refused for ever, whatever the wait.
RATELIMIT_ALWAYS_INLINE Decision refusedForever(const Quota& q, std::int64_t remaining,
                                                Tick resetTicks) noexcept {
    return decision(q, false, remaining, Decision::kNever, resetTicks);
}

/// Runs one model step with the late-call rule every storage applies (docs/semantics.md, "Late
/// calls"): a call earlier than the key's last write by at most `lateTolerance` comes from a
/// caller that read the clock just before another caller wrote (or from a host whose clock is
/// slightly behind), not from a clock that stepped back. It is answered at the last write — no
/// rebase, so the interval is never credited twice — and its waits count from its own time.
/// Redis applies the same rule in its script (detail/redis_script.hpp).
template <AlgorithmModel M>
RATELIMIT_ALWAYS_INLINE Decision applyStep(typename M::State& state, const Quota& q, Tick now,
                                           std::int64_t cost) {
    const Tick last = M::lastWrite(state);
    Tick late = 0;
    if (now < last && satSub(last, now) <= q.lateTolerance) {
        late = last - now;
        now = last;
    }
    Decision d = M::step(state, q, now, cost);
    if (late > 0) {
        const std::chrono::nanoseconds shift{late * q.nanosPerTick};
        if (!d.never() && d.retryAfter.count() > 0) {
            d.retryAfter += shift;
        }
        if (d.resetAfter.count() > 0) {
            d.resetAfter += shift;
        }
    }
    return d;
}

}  // namespace detail
}  // namespace v1
}  // namespace ratelimit
