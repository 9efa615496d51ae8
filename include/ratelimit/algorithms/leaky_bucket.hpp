#pragma once

#include <cstdint>
#include <string_view>

#include <ratelimit/algorithms/model.hpp>
#include <ratelimit/decision.hpp>
#include <ratelimit/detail/checked_math.hpp>

namespace ratelimit {
inline namespace v1 {

/// Leaky bucket as a meter: GCRA, as nginx `limit_req` and redis-cell do it. Each admitted
/// cell pushes the theoretical arrival time (TAT) one emission interval `period/count` later;
/// a request passes while the TAT stays within `burst` intervals of now.
///
/// The TAT is kept as an exact rational `q + r/c` ticks (c = count/g), so the interval is never
/// rounded and the model makes exactly the token bucket's decisions while the clock moves
/// forward. State: 16 bytes. After a step back the TAT is clamped to one full refill from now:
/// waits never exceed that, and it never admits more than the token bucket would.
/// Thread safety: stateless; `step` is a pure function of its arguments.
struct LeakyBucketModel {
    static constexpr std::string_view kName = "leaky_bucket";
    static constexpr bool kBucket = true;

    struct State {
        Tick tat = detail::kInt64Min;  ///< whole ticks of the TAT; the minimum marks a fresh key
        std::int64_t tatFraction = 0;  ///< in 1/unitsPerTick ticks, in [0, unitsPerTick)
    };

    static Decision step(State& state, const Quota& q, Tick now, std::int64_t cost) noexcept {
        const std::int64_t ahead = unitsAhead(state, q, now);
        const bool steppedBack = ahead > q.capacityUnits;
        const std::int64_t deficit = steppedBack ? q.capacityUnits : ahead;
        const auto outcome = detail::bucketStep(q, deficit, cost);
        if (cost > 0 && cost <= q.burst && (outcome.decision.allowed || steppedBack)) {
            const std::int64_t stored = outcome.decision.allowed ? outcome.deficitAfter : deficit;
            state.tat = detail::satAdd(now, stored / q.unitsPerTick);
            state.tatFraction = stored % q.unitsPerTick;
        }
        return outcome.decision;
    }

    static bool isFresh(const State& state, const Quota& q, Tick now) noexcept {
        return unitsAhead(state, q, now) == 0;
    }

    static ModelRange range(const Quota& q) noexcept { return detail::bucketRange(q); }

private:
    /// How far the TAT lies after `now`, in 1/unitsPerTick ticks (0 when in the past);
    /// saturates above the capacity so a huge step back cannot overflow.
    static std::int64_t unitsAhead(const State& state, const Quota& q, Tick now) noexcept {
        if (state.tat < now || (state.tat == now && state.tatFraction == 0)) {
            return 0;
        }
        const std::int64_t wholeTicks = detail::satSub(state.tat, now);
        if (wholeTicks > q.capacityUnits / q.unitsPerTick + 1) {
            return q.capacityUnits + 1;
        }
        return wholeTicks * q.unitsPerTick + state.tatFraction;
    }
};

/// GCRA is the leaky bucket as a meter; both names refer to one model.
using GcraModel = LeakyBucketModel;

}  // namespace v1
}  // namespace ratelimit
