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
/// The TAT is kept as an exact rational, relative to the key's last write: `last +
/// tatAhead/c` ticks (c = count/g), so the interval is never rounded, no absolute time is ever
/// added to (the end of the clock's range is safe), and the model makes exactly the token
/// bucket's decisions. State (16 bytes). A call earlier than the last write is answered as if
/// no time had passed, and the TAT moves back with the clock (the rebase).
/// Thread safety: stateless; `step` is a pure function of its arguments.
struct LeakyBucketModel {
    static constexpr std::string_view kName = "leaky_bucket";
    static constexpr bool kBucket = true;

    struct State {
        Tick last = 0;              ///< tick of the last write
        std::int64_t tatAhead = 0;  ///< TAT − last, in 1/unitsPerTick ticks; 0: a fresh key
    };

    static Decision step(State& state, const Quota& q, Tick now, std::int64_t cost) noexcept {
        const std::int64_t ahead = unitsAhead(state, q, now);
        const bool steppedBack = ahead > 0 && now < state.last;
        const auto outcome = detail::bucketStep(q, ahead, cost);
        if (cost > 0 && cost <= q.burst && (outcome.decision.allowed || steppedBack)) {
            // The new TAT is max(TAT, now) + cost intervals, stored relative to `now`.
            state.tatAhead = outcome.decision.allowed ? outcome.deficitAfter : ahead;
            state.last = now;
        }
        return outcome.decision;
    }

    /// The same step in Redis Lua (composed by `detail::composeScript`): the table
    /// `leaky_bucket` over the hash fields `last` and `ahead` (TAT − last in 1/unitsPerTick
    /// µs). A missing key (or field) is the fresh state. Bounds: the units ahead never exceed
    /// capacity < 2^53.
    static constexpr std::string_view kLua = R"lua(
local leaky_bucket = {}
function leaky_bucket.load(key)
  local v = redis.call('HMGET', key, 'last', 'ahead')
  local last = v[1] and tonumber(v[1])
  local ahead = v[2] and tonumber(v[2])
  if not last or not ahead then
    return {last = 0, ahead = 0}
  end
  return {last = last, ahead = ahead}
end
function leaky_bucket.unitsAhead(s, now, p)
  if s.ahead == 0 or now <= s.last then
    return s.ahead
  end
  local elapsed = now - s.last
  if elapsed >= ceildiv(s.ahead, p.unitsPerTick) then
    return 0
  end
  return s.ahead - elapsed * p.unitsPerTick
end
function leaky_bucket.lastWrite(s)
  if s.ahead == 0 then return nil end
  return s.last
end
function leaky_bucket.step(s, now, cost, p)
  local ahead = leaky_bucket.unitsAhead(s, now, p)
  local steppedBack = ahead > 0 and now < s.last
  local allowed, remaining, retry, reset, after = bucketStep(p, ahead, cost)
  local write = cost > 0 and cost <= p.burst and (allowed or steppedBack)
  if write then
    if allowed then s.ahead = after else s.ahead = ahead end
    s.last = now
  end
  return allowed, remaining, retry, reset, write
end
function leaky_bucket.store(key, s, reset)
  if reset <= 0 then
    redis.call('DEL', key)
    return
  end
  redis.call('HSET', key, 'last', fmt(s.last), 'ahead', fmt(s.ahead))
  keepFor(key, reset)
end
)lua";

    static bool isFresh(const State& state, const Quota& q, Tick now) noexcept {
        return unitsAhead(state, q, now) == 0;
    }

    static Tick lastWrite(const State& state) noexcept {
        return state.tatAhead > 0 ? state.last : detail::kInt64Min;
    }

    static ModelRange range(const Quota& q) noexcept { return detail::bucketRange(q); }

private:
    /// How far the TAT lies after `now`, in 1/unitsPerTick ticks (0 once it is past): the
    /// token bucket's deficit. A clock behind the last write counts from the last write.
    static std::int64_t unitsAhead(const State& state, const Quota& q, Tick now) noexcept {
        if (state.tatAhead == 0 || now <= state.last) {
            return state.tatAhead;
        }
        // `elapsed` is capped at the time the TAT needs to pass before it is multiplied.
        const std::int64_t elapsed = detail::satSub(now, state.last);
        if (elapsed >= detail::ceilDiv(state.tatAhead, q.unitsPerTick)) {
            return 0;
        }
        return state.tatAhead - elapsed * q.unitsPerTick;
    }
};

/// GCRA is the leaky bucket as a meter; both names refer to one model.
using GcraModel = LeakyBucketModel;

}  // namespace v1
}  // namespace ratelimit
