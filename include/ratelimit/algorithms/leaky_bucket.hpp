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

    /// The same step in Redis Lua (composed by `detail::composeScript`): the table
    /// `leaky_bucket` over the hash fields `tat`, `frac` (the TAT's fraction in 1/unitsPerTick
    /// µs) and `last`. A missing key (or field) is the fresh state, marked `fresh` instead of
    /// a minimum TAT. Bounds: the units ahead never exceed capacity < 2^53.
    static constexpr std::string_view kLua = R"lua(
local leaky_bucket = {}
function leaky_bucket.load(key)
  local v = redis.call('HMGET', key, 'tat', 'frac', 'last')
  local tat = v[1] and tonumber(v[1])
  local frac = v[2] and tonumber(v[2])
  local last = v[3] and tonumber(v[3])
  if not tat or not frac or not last then
    return {fresh = true, tat = 0, frac = 0, last = 0}
  end
  return {fresh = false, tat = tat, frac = frac, last = last}
end
function leaky_bucket.unitsAhead(s, now, p)
  if s.fresh then
    return 0
  end
  local from = now
  if now < s.last then from = s.last end
  if s.tat < from or (s.tat == from and s.frac == 0) then
    return 0
  end
  local wholeTicks = s.tat - from
  if wholeTicks > idiv(p.capacity, p.unitsPerTick) then
    return p.capacity
  end
  return wholeTicks * p.unitsPerTick + s.frac
end
function leaky_bucket.step(s, now, cost, p)
  local ahead = leaky_bucket.unitsAhead(s, now, p)
  local steppedBack = ahead > 0 and now < s.last
  local allowed, remaining, retry, reset, after = bucketStep(p, ahead, cost)
  local write = cost > 0 and cost <= p.burst and (allowed or steppedBack)
  if write then
    local stored = ahead
    if allowed then stored = after end
    s.tat = now + idiv(stored, p.unitsPerTick)
    s.frac = imod(stored, p.unitsPerTick)
    s.last = now
    s.fresh = false
  end
  return allowed, remaining, retry, reset, write
end
function leaky_bucket.store(key, s, reset)
  if reset <= 0 then
    redis.call('DEL', key)
    return
  end
  redis.call('HSET', key, 'tat', fmt(s.tat), 'frac', fmt(s.frac), 'last', fmt(s.last))
  keepFor(key, reset)
end
)lua";

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
