#pragma once

#include <cstdint>
#include <string_view>

#include <ratelimit/algorithms/model.hpp>
#include <ratelimit/decision.hpp>
#include <ratelimit/detail/checked_math.hpp>

namespace ratelimit {
inline namespace v1 {

/// Fixed window: at most `count` per window `[k·period, (k+1)·period)` counted from the clock's
/// epoch (floor division, also before it). Cheapest and simplest; admits up to 2×count across
/// a window edge.
///
/// State (24 bytes): the key's window start, the tick of its last write and the count used.
/// After a step back the key's window shifts by the step, keeping the time it had left.
/// Thread safety: stateless; `step` is a pure function of its arguments.
struct FixedWindowModel {
    static constexpr std::string_view kName = "fixed_window";
    static constexpr bool kBucket = false;

    struct State {
        Tick start = 0;
        Tick last = 0;
        std::int64_t used = 0;  ///< 0 marks a fresh key
    };

    RATELIMIT_ALWAYS_INLINE static Decision step(State& state, const Quota& q, Tick now,
                                                 std::int64_t cost) noexcept {
        State view = state;
        const bool steppedBack = rebaseAndRoll(view, q, now);
        const Tick left = q.period - detail::satSub(now, view.start);
        const Tick reset = view.used > 0 ? left : 0;
        if (cost > q.count) {
            return detail::decision(q, false, q.count, q.count - view.used, detail::kNeverTicks,
                                    reset);
        }
        if (view.used + cost <= q.count) {
            if (cost > 0) {
                view.used += cost;
                view.last = now;
                state = view;
            }
            return detail::decision(q, true, q.count, q.count - view.used, 0,
                                    view.used > 0 ? left : 0);
        }
        if (steppedBack) {
            state = view;
        }
        return detail::decision(q, false, q.count, q.count - view.used, left, reset);
    }

    /// The same step in Redis Lua (composed by `detail::composeScript`): the table
    /// `fixed_window` over the hash fields `start`, `last` and `used`, in µs ticks. A missing
    /// key is the fresh state. `s` becomes the rolled (and rebased) view; it is stored only
    /// when `write` says the C++ step would have changed the state.
    static constexpr std::string_view kLua = R"lua(
local fixed_window = {}
function fixed_window.load(key)
  local v = redis.call('HMGET', key, 'start', 'last', 'used')
  local start = v[1] and tonumber(v[1])
  local last = v[2] and tonumber(v[2])
  local used = v[3] and tonumber(v[3])
  if not start or not last or not used then
    return {start = 0, last = 0, used = 0}
  end
  return {start = start, last = last, used = used}
end
function fixed_window.rebaseAndRoll(s, now, p)
  local steppedBack = s.used > 0 and now < s.last
  if steppedBack then
    s.start = s.start - (s.last - now)
    s.last = now
  end
  if s.used > 0 and now - s.start >= p.period then
    s.used = 0
  end
  if s.used == 0 then
    s.start = idiv(now, p.period) * p.period
  end
  return steppedBack
end
function fixed_window.lastWrite(s)
  if s.used > 0 then return s.last end
  return nil
end
function fixed_window.step(s, now, cost, p)
  local steppedBack = fixed_window.rebaseAndRoll(s, now, p)
  local left = p.period - (now - s.start)
  local reset = 0
  if s.used > 0 then reset = left end
  if cost > p.count then
    return false, p.count - s.used, -1, reset, false
  end
  if cost <= p.count - s.used then
    if cost > 0 then
      s.used = s.used + cost
      s.last = now
      return true, p.count - s.used, 0, left, true
    end
    return true, p.count - s.used, 0, reset, false
  end
  return false, p.count - s.used, left, reset, steppedBack
end
function fixed_window.store(key, s, reset)
  if reset <= 0 then
    redis.call('DEL', key)
    return
  end
  redis.call('HSET', key, 'start', fmt(s.start), 'last', fmt(s.last), 'used', fmt(s.used))
  keepFor(key, reset)
end
)lua";

    static bool isFresh(const State& state, const Quota& q, Tick now) noexcept {
        return state.used == 0 ||
               (now >= state.last && detail::satSub(now, state.start) >= q.period);
    }

    static Tick lastWrite(const State& state) noexcept {
        return state.used > 0 ? state.last : detail::kInt64Min;
    }

    static ModelRange range(const Quota& q) noexcept { return {q.period, q.count}; }

private:
    /// Shifts the window after a step back, then starts a new aligned window when the key's
    /// window is over (or the key is fresh). Returns whether it rebased.
    static bool rebaseAndRoll(State& s, const Quota& q, Tick now) noexcept {
        const bool steppedBack = s.used > 0 && now < s.last;
        if (steppedBack) {
            const Tick step = detail::satSub(s.last, now);
            s.start = detail::satSub(s.start, step);
            s.last = now;
        }
        if (s.used > 0 && detail::satSub(now, s.start) >= q.period) {
            s.used = 0;
        }
        if (s.used == 0) {
            s.start = detail::alignedStart(now, q.period);
        }
        return steppedBack;
    }
};

}  // namespace v1
}  // namespace ratelimit
