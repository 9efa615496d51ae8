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

    RATELIMIT_ALWAYS_INLINE static Decision step(State& state, const Quota& q, Tick now,
                                                 std::int64_t cost) noexcept {
        const bool steppedBack = state.deficit > 0 && now < state.last;
        const auto outcome = detail::bucketStep(q, deficitAt(state, q, now), cost);
        if (cost > 0 && cost <= q.burst && (outcome.decision.allowed || steppedBack)) {
            // Admitted, or rebased: a step back keeps the deficit and restarts refill at `now`.
            state.last = now;
            state.deficit = outcome.decision.allowed ? outcome.deficitAfter : state.deficit;
        }
        return outcome.decision;
    }

    /// The same step in Redis Lua (composed by `detail::composeScript`): the table
    /// `token_bucket` with `load(key)`, `step(s, now, cost, p)` and `store(key, s, reset)`, over
    /// the hash fields `last` and `deficit` in µs ticks. A missing key is the fresh state.
    /// Bounds: deficit <= capacity < 2^53; `elapsed` is capped before it is multiplied.
    static constexpr std::string_view kLua = R"lua(
local token_bucket = {}
function token_bucket.load(key)
  local v = redis.call('HMGET', key, 'last', 'deficit')
  local last = v[1] and tonumber(v[1])
  local deficit = v[2] and tonumber(v[2])
  if not last or not deficit then
    return {last = 0, deficit = 0}
  end
  return {last = last, deficit = deficit}
end
function token_bucket.deficitAt(s, now, p)
  if s.deficit == 0 or now <= s.last then
    return s.deficit
  end
  local elapsed = now - s.last
  if elapsed >= ceildiv(s.deficit, p.unitsPerTick) then
    return 0
  end
  return s.deficit - elapsed * p.unitsPerTick
end
function token_bucket.lastWrite(s)
  if s.deficit > 0 then return s.last end
  return nil
end
function token_bucket.step(s, now, cost, p)
  local steppedBack = s.deficit > 0 and now < s.last
  local allowed, remaining, retry, reset, after =
    bucketStep(p, token_bucket.deficitAt(s, now, p), cost)
  local write = cost > 0 and cost <= p.burst and (allowed or steppedBack)
  if write then
    -- Admitted, or rebased: a step back keeps the deficit and restarts refill at now.
    s.last = now
    if allowed then s.deficit = after end
  end
  return allowed, remaining, retry, reset, write
end
function token_bucket.store(key, s, reset)
  if reset <= 0 then
    redis.call('DEL', key)
    return
  end
  redis.call('HSET', key, 'last', fmt(s.last), 'deficit', fmt(s.deficit))
  keepFor(key, reset)
end
)lua";

    static bool isFresh(const State& state, const Quota& q, Tick now) noexcept {
        return deficitAt(state, q, now) == 0;
    }

    static Tick lastWrite(const State& state) noexcept {
        return state.deficit > 0 ? state.last : detail::kInt64Min;
    }

    static ModelRange range(const Quota& q) noexcept { return detail::bucketRange(q); }

private:
    /// The deficit after refilling up to `now`; a clock that stepped back refills nothing.
    static std::int64_t deficitAt(const State& state, const Quota& q, Tick now) noexcept {
        if (state.deficit == 0 || now <= state.last) {
            return state.deficit;
        }
        // Refilled when elapsed·unitsPerTick covers the deficit (a 128-bit product, no divide).
        const std::int64_t elapsed = detail::satSub(now, state.last);
        if (detail::Int128{elapsed} * q.unitsPerTick >= state.deficit) {
            return 0;
        }
        return state.deficit - elapsed * q.unitsPerTick;
    }
};

}  // namespace v1
}  // namespace ratelimit
