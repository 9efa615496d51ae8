#pragma once

// The decision both bucket models make (the token bucket, and the leaky bucket that is its
// meter). Its Lua is written out in the token bucket's step (`TokenBucketModel::kLuaModel`).

#include <cstdint>

#include <ratelimit/algorithms/model.hpp>
#include <ratelimit/decision.hpp>
#include <ratelimit/detail/checked_math.hpp>
#include <ratelimit/detail/inline.hpp>

namespace ratelimit {
inline namespace v1 {
namespace detail {

/// A bucket's decision for `deficit` (units below full at `now`, already refilled), which it
/// raises by the cost when it admits. The decision is returned as it is built, never as a
/// member of a larger result: a copy of its 48 bytes out of one stalled the inlined step on a
/// store-forwarding miss (12–15 % of a hot key's time).
RATELIMIT_INLINE Decision bucketStep(const Quota& q, std::int64_t& deficit,
                                     std::int64_t cost) noexcept {
    // Every dividend is below 2^62 + 2^62 (deficits and capacity are below 2^62).
    const auto reset = [&](std::int64_t d) { return q.perTick.ceil(d); };
    const auto remaining = [&](std::int64_t d) { return q.perToken.floor(q.capacityUnits - d); };
    if (cost > q.burst) {
        return refusedForever(q, remaining(deficit), reset(deficit));
    }
    // cost <= burst < 2^49 and capacity < 2^62: no product below overflows.
    const std::int64_t costUnits = cost * q.unitsPerToken;
    const std::int64_t room = q.capacityUnits - deficit;
    if (costUnits <= room) {
        deficit += costUnits;
        return admitted(q, remaining(deficit), reset(deficit));
    }
    const Tick wait = q.perTick.ceil(costUnits - room);
    return refused(q, remaining(deficit), wait, reset(deficit));
}

/// The magnitudes of a bucket: its longest refill in ticks, its capacity in units.
inline ModelRange bucketRange(const Quota& q) noexcept {
    return {Int128{q.burst} * q.period / q.count + 1, Int128{q.burst} * q.unitsPerToken};
}

}  // namespace detail
}  // namespace v1
}  // namespace ratelimit
