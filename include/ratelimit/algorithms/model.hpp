#pragma once

#include <chrono>
#include <concepts>
#include <cstdint>
#include <string>
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

/// A `Limit` compiled for one clock tick: what every model's step reads.
///
/// The bucket fields express the rate `count/period` as an exact rational reduced by
/// g = gcd(count, period): one token is `unitsPerToken` units and each tick refills
/// `unitsPerTick` units, so no emission interval is ever rounded.
/// Thread safety: thread-compatible value type.
struct Quota {
    std::int64_t count = 1;
    std::int64_t burst = 1;
    Tick period = 1;                  ///< ticks
    std::int64_t nanosPerTick = 1;    ///< to report durations in nanoseconds
    std::int64_t unitsPerToken = 1;   ///< period / g
    std::int64_t unitsPerTick = 1;    ///< count / g
    std::int64_t capacityUnits = 1;   ///< burst * unitsPerToken (< 2^62 once accepted)
    std::int64_t maxRunsPerKey = 64;  ///< sliding log only
    Tick lateTolerance = 0;           ///< ticks; see `LimiterOptions::lateCallTolerance`
    detail::Divisor perToken;         ///< divides by `unitsPerToken` without a divide
    detail::Divisor perTick;          ///< divides by `unitsPerTick` without a divide

    /// Compiles `limit` for a clock whose tick is `nanosPerTick` nanoseconds.
    /// Throws: `std::invalid_argument` when the period is not a whole number of ticks.
    static Quota make(const Limit& limit, std::int64_t nanosPerTick, std::int64_t maxRunsPerKey,
                      Tick lateToleranceTicks = 0) {
        limit.validate();
        if (limit.period.count() % nanosPerTick != 0) {
            detail::throwInvalidArgument("Limit.period (" + std::to_string(limit.period.count()) +
                                         "ns) is not a whole number of ticks (" +
                                         std::to_string(nanosPerTick) +
                                         "ns: the clock's, or whole microseconds with Redis)");
        }
        if (maxRunsPerKey < 1) {
            detail::throwInvalidArgument("maxRunsPerKey must be at least 1 (got " +
                                         std::to_string(maxRunsPerKey) + ")");
        }
        Quota q;
        q.count = limit.count;
        q.burst = limit.burst;
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
/// fresh key). `range(quota)` gives the magnitudes the arithmetic meets.
template <class M>
concept AlgorithmModel = std::default_initializable<typename M::State> &&
    std::copyable<typename M::State> &&
    requires(typename M::State& state, const typename M::State& constState, const Quota& quota,
             Tick now, std::int64_t cost) {
    { M::kName } -> std::convertible_to<std::string_view>;
    { M::kBucket } -> std::convertible_to<bool>;
    { M::step(state, quota, now, cost) } -> std::same_as<Decision>;
    { M::isFresh(constState, quota, now) } -> std::same_as<bool>;
    { M::lastWrite(constState) } -> std::same_as<Tick>;
    { M::range(quota) } -> std::same_as<ModelRange>;
};

namespace detail {

/// Builds a `Decision` from tick durations; `retryTicks < 0` means never.
RATELIMIT_ALWAYS_INLINE Decision decision(const Quota& q, bool allowed, std::int64_t limit,
                                          std::int64_t remaining, Tick retryTicks,
                                          Tick resetTicks) noexcept {
    Decision d;
    d.allowed = allowed;
    d.limit = limit;
    d.remaining = remaining < 0 ? 0 : remaining;
    d.retryAfter =
        retryTicks < 0 ? Decision::kNever : std::chrono::nanoseconds{retryTicks * q.nanosPerTick};
    d.resetAfter = std::chrono::nanoseconds{resetTicks * q.nanosPerTick};
    return d;
}

inline constexpr Tick kNeverTicks = -1;

/// The bucket decision shared by the token bucket and GCRA, which differ only in how they
/// store the `deficit` (units below full at `now`, already refilled).
struct BucketOutcome {
    Decision decision;
    std::int64_t deficitAfter = 0;  ///< deficit to store when allowed
};

RATELIMIT_ALWAYS_INLINE BucketOutcome bucketStep(const Quota& q, std::int64_t deficit,
                                                 std::int64_t cost) noexcept {
    // Every dividend is below 2^62 + 2^62 (deficits and capacity are below 2^62).
    const auto reset = [&](std::int64_t d) { return q.perTick.ceil(d); };
    const auto remaining = [&](std::int64_t d) { return q.perToken.floor(q.capacityUnits - d); };
    if (cost > q.burst) {
        return {decision(q, false, q.burst, remaining(deficit), kNeverTicks, reset(deficit)),
                deficit};
    }
    // cost <= burst < 2^49 and capacity < 2^62: no product below overflows.
    const std::int64_t costUnits = cost * q.unitsPerToken;
    if (deficit + costUnits <= q.capacityUnits) {
        const std::int64_t after = deficit + costUnits;
        return {decision(q, true, q.burst, remaining(after), 0, reset(after)), after};
    }
    const Tick wait = q.perTick.ceil(deficit + costUnits - q.capacityUnits);
    return {decision(q, false, q.burst, remaining(deficit), wait, reset(deficit)), deficit};
}

/// `bucketStep` in Lua, for both bucket models' scripts (needs `detail::kLuaPrelude`).
/// Returns allowed, remaining, retry (-1 = never), reset, deficit after. With deficit <=
/// capacity < 2^53 and cost <= burst, `cost * unitsPerToken <= capacity`; the test against
/// the room left (never `deficit + costUnits`, up to 2^54) keeps every value exact.
inline constexpr std::string_view kBucketStepLua = R"lua(
local function bucketStep(p, deficit, cost)
  local reset = ceildiv(deficit, p.unitsPerTick)
  local remaining = idiv(p.capacity - deficit, p.unitsPerToken)
  if cost > p.burst then
    return false, remaining, -1, reset, deficit
  end
  local costUnits = cost * p.unitsPerToken
  local room = p.capacity - deficit
  if costUnits <= room then
    local after = deficit + costUnits
    return true, idiv(p.capacity - after, p.unitsPerToken), 0, ceildiv(after, p.unitsPerTick), after
  end
  return false, remaining, ceildiv(costUnits - room, p.unitsPerTick), reset, deficit
end
)lua";

/// Runs one model step with the late-call rule every storage applies: a call earlier than the
/// key's last write by at most `lateTolerance` comes from a caller that read the clock just
/// before another caller wrote (or from a host whose clock is slightly behind), not from a
/// clock that stepped back. It is answered at the last write — no rebase, so the interval is
/// never credited twice — and its waits are counted from its own time.
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

inline ModelRange bucketRange(const Quota& q) noexcept {
    return {Int128{q.burst} * q.period / q.count + 1, Int128{q.burst} * q.unitsPerToken};
}

}  // namespace detail
}  // namespace v1
}  // namespace ratelimit
