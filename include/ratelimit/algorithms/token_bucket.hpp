#pragma once

#include <cstdint>
#include <string_view>

#include <ratelimit/algorithms/model.hpp>
#include <ratelimit/decision.hpp>
#include <ratelimit/detail/checked_math.hpp>

namespace ratelimit {
inline namespace v1 {

/// Token bucket: starts full with `burst` tokens and refills `count` tokens per `period`,
/// continuously and exactly (integer units, no rounded rate).
///
/// State (16 bytes): the tick of the last write and the deficit below full in units of
/// `period/g` per token (g = gcd(count, period)); a zero deficit is a full, fresh bucket.
/// Thread safety: stateless; `step` is a pure function of its arguments.
struct TokenBucketModel {
    static constexpr std::string_view kName = "token_bucket";
    static constexpr bool kBucket = true;

    struct State {
        Tick last = 0;
        std::int64_t deficit = 0;
    };

    static Decision step(State& state, const Quota& q, Tick now, std::int64_t cost) noexcept {
        const bool steppedBack = state.deficit > 0 && now < state.last;
        const auto outcome = detail::bucketStep(q, deficitAt(state, q, now), cost);
        if (cost > 0 && cost <= q.burst && (outcome.decision.allowed || steppedBack)) {
            // Admitted, or rebased: a step back keeps the deficit and restarts refill at `now`.
            state.last = now;
            state.deficit = outcome.decision.allowed ? outcome.deficitAfter : state.deficit;
        }
        return outcome.decision;
    }

    static bool isFresh(const State& state, const Quota& q, Tick now) noexcept {
        return deficitAt(state, q, now) == 0;
    }

    static ModelRange range(const Quota& q) noexcept { return detail::bucketRange(q); }

private:
    /// The deficit after refilling up to `now`; a clock that stepped back refills nothing.
    static std::int64_t deficitAt(const State& state, const Quota& q, Tick now) noexcept {
        if (state.deficit == 0 || now <= state.last) {
            return state.deficit;
        }
        // `elapsed` is capped at the time to full before it is multiplied.
        const std::int64_t elapsed = detail::satSub(now, state.last);
        if (elapsed >= detail::ceilDiv(state.deficit, q.unitsPerTick)) {
            return 0;
        }
        return state.deficit - elapsed * q.unitsPerTick;
    }
};

}  // namespace v1
}  // namespace ratelimit
