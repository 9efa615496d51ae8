#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include <ratelimit/algorithms/bucket.hpp>
#include <ratelimit/algorithms/model.hpp>
#include <ratelimit/decision.hpp>
#include <ratelimit/detail/checked_math.hpp>
#include <ratelimit/detail/inline.hpp>
#include <ratelimit/limit.hpp>

namespace ratelimit {
inline namespace v1 {

/// Token bucket: starts full with `burst` tokens and refills `count` tokens per `period`,
/// continuously and exactly (integer units, no rounded rate).
///
/// State (16 bytes): the tick of the last write and the deficit below full in units of
/// `period/g` per token (g = gcd(count, period)); a zero deficit is a full, fresh bucket.
/// Redis encoding version 1 was a hash of decimal fields.
struct TokenBucketModel : BucketKind, ModelNames<"token_bucket", 2, "last", "deficit"> {
    struct State {
        Tick last = 0;
        std::int64_t deficit = 0;
    };

    RATELIMIT_INLINE static Decision step(State& state, const Quota& q, Tick now,
                                          std::int64_t cost) noexcept {
        const bool steppedBack = state.deficit > 0 && now < state.last;
        std::int64_t deficit = deficitAt(state, q, now);
        Decision d = detail::bucketStep(q, deficit, cost);
        if (cost > 0 && cost <= q.burst && (d.allowed || steppedBack)) {
            // Admitted, or rebased: a step back keeps the deficit and restarts refill at `now`.
            state.last = now;
            if (d.allowed) {
                state.deficit = deficit;
            }
        }
        return d;
    }

    /// Gives back up to `cost` tokens (`Limiter::refund`): the deficit at `now` falls by the
    /// cost, never below 0 (the bucket never holds more than its burst).
    static void refund(State& state, const Quota& q, Tick now, std::int64_t cost) noexcept {
        if (state.deficit == 0 || cost == 0) {
            return;
        }
        const std::int64_t deficit = deficitAt(state, q, now);
        const std::int64_t units = cost > q.burst ? q.capacityUnits : cost * q.unitsPerToken;
        state.deficit = deficit - (units < deficit ? units : deficit);
        state.last = now > state.last ? now : state.last;
    }

    /// The same model in Lua, line by line (composed into a script by the Redis storage): a
    /// step returns the state to store (nil when nothing changed), then the decision; a refund
    /// returns the state to store. The step is `detail::bucketStep` written out in it, as one
    /// function, with `deficitAt` written out too: it runs on every check, where each Lua call
    /// costs the server's one core (bench/README.md, "Redis functions"). The Lua differential
    /// test holds it to the C++ step. Bounds: deficit <= capacityUnits < 2^53, and with cost <=
    /// burst, `cost * unitsPerToken <= capacityUnits`; testing against the room left (never
    /// against `deficit + costUnits`, up to 2^54) keeps every value exact, and a refill above
    /// 2^53 is only compared with the deficit, which rounding cannot reverse.
    static constexpr std::string_view kLuaModel = R"lua(
local token_bucket = {}
function token_bucket.step(state, q, now, cost)
  local deficit, last = state.deficit, state.last
  local steppedBack = deficit > 0 and now < last
  if deficit > 0 and now > last then
    local refill = (now - last) * q.unitsPerTick
    if refill >= deficit then deficit = 0 else deficit = deficit - refill end
  end
  if cost > q.burst then
    return nil, false, idiv(q.capacityUnits - deficit, q.unitsPerToken), -1,
           ceildiv(deficit, q.unitsPerTick)
  end
  local costUnits = cost * q.unitsPerToken
  local room = q.capacityUnits - deficit
  if costUnits <= room then
    local after = deficit + costUnits
    local remaining = idiv(room - costUnits, q.unitsPerToken)
    local reset = ceildiv(after, q.unitsPerTick)
    if cost == 0 then
      return nil, true, remaining, 0, reset
    end
    state.last, state.deficit = now, after
    return state, true, remaining, 0, reset
  end
  local retry = ceildiv(costUnits - room, q.unitsPerTick)
  local remaining, reset = idiv(room, q.unitsPerToken), ceildiv(deficit, q.unitsPerTick)
  if steppedBack and cost > 0 then
    -- A step back keeps the deficit and restarts refill at now.
    state.last = now
    return state, false, remaining, retry, reset
  end
  return nil, false, remaining, retry, reset
end
function token_bucket.refund(state, q, now, cost)
  if state.deficit == 0 or cost == 0 then return nil end
  local deficit = token_bucket.deficitAt(state, q, now)
  local units = cost > q.burst and q.capacityUnits or cost * q.unitsPerToken
  state.deficit = deficit - math.min(units, deficit)
  if now > state.last then state.last = now end
  return state
end
function token_bucket.lastWrite(state)
  if state.deficit > 0 then return state.last end
  return nil
end
function token_bucket.deficitAt(state, q, now)
  if state.deficit == 0 or now <= state.last then
    return state.deficit
  end
  local elapsed = now - state.last
  if elapsed * q.unitsPerTick >= state.deficit then
    return 0
  end
  return state.deficit - elapsed * q.unitsPerTick
end
)lua";
    /// The script's Lua, in the pieces the script joins.
    static constexpr std::array<std::string_view, 1> kLua{kLuaModel};

    static bool isFresh(const State& state, const Quota& q, Tick now) noexcept {
        return deficitAt(state, q, now) == 0;
    }

    static Tick lastWrite(const State& state) noexcept {
        return state.deficit > 0 ? state.last : detail::kInt64Min;
    }

    static ModelRange range(const Quota& q) noexcept { return detail::bucketRange(q); }

private:
    /// The deficit after refilling up to `now`; a clock that stepped back refills nothing.
    RATELIMIT_INLINE static std::int64_t deficitAt(const State& state, const Quota& q,
                                                   Tick now) noexcept {
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
