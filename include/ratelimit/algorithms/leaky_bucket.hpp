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
/// The TAT is kept as an exact rational `tat + tatFraction/c` ticks (c = count/g), so the
/// interval is never rounded and the model makes exactly the token bucket's decisions. State
/// (24 bytes): the TAT and the tick of the last write; a call earlier than the last write is
/// answered as if no time had passed, and the TAT moves back with the clock (the rebase).
/// Thread safety: stateless; `step` is a pure function of its arguments.
struct LeakyBucketModel {
    static constexpr std::string_view kName = "leaky_bucket";
    static constexpr bool kBucket = true;

    struct State {
        Tick tat = detail::kInt64Min;  ///< whole ticks of the TAT; the minimum marks a fresh key
        std::int64_t tatFraction = 0;  ///< in 1/unitsPerTick ticks, in [0, unitsPerTick)
        Tick last = 0;                 ///< tick of the last write
    };

    static Decision step(State& state, const Quota& q, Tick now, std::int64_t cost) noexcept {
        const std::int64_t ahead = unitsAhead(state, q, now);
        const bool steppedBack = ahead > 0 && now < state.last;
        const auto outcome = detail::bucketStep(q, ahead, cost);
        if (cost > 0 && cost <= q.burst && (outcome.decision.allowed || steppedBack)) {
            const std::int64_t stored = outcome.decision.allowed ? outcome.deficitAfter : ahead;
            state.tat = detail::satAdd(now, stored / q.unitsPerTick);
            state.tatFraction = stored % q.unitsPerTick;
            state.last = now;
        }
        return outcome.decision;
    }

    static bool isFresh(const State& state, const Quota& q, Tick now) noexcept {
        return unitsAhead(state, q, now) == 0;
    }

    static ModelRange range(const Quota& q) noexcept { return detail::bucketRange(q); }

private:
    /// How far the TAT lies after `now` in 1/unitsPerTick ticks (0 when it is past): the token
    /// bucket's deficit. A clock behind the last write counts from the last write.
    static std::int64_t unitsAhead(const State& state, const Quota& q, Tick now) noexcept {
        const Tick from = now < state.last ? state.last : now;
        if (state.tat < from || (state.tat == from && state.tatFraction == 0)) {
            return 0;
        }
        // At most the capacity: every write leaves the TAT within one full refill of `last`.
        const std::int64_t wholeTicks = detail::satSub(state.tat, from);
        if (wholeTicks > q.capacityUnits / q.unitsPerTick) {
            return q.capacityUnits;
        }
        return wholeTicks * q.unitsPerTick + state.tatFraction;
    }
};

/// GCRA is the leaky bucket as a meter; both names refer to one model.
using GcraModel = LeakyBucketModel;

}  // namespace v1
}  // namespace ratelimit
