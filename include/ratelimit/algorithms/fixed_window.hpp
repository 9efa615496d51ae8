#pragma once

#include <algorithm>
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
/// State (24 bytes): the tick of the key's last write, how far into its window that write was,
/// and the count used. Holding the offset rather than the window's start keeps every window
/// representable: the window holding INT64_MIN starts below it when the period does not divide
/// 2^63.
/// After a step back the key's window shifts by the step, keeping the time it had left, and
/// its next windows follow the shifted one until an epoch-aligned window no longer overlaps
/// it: realigning at once would reopen the aligned window the key already used (a clock
/// oscillating by one tick would then admit `count` per oscillation).
/// Thread safety: stateless; `step` is a pure function of its arguments.
struct FixedWindowModel {
    static constexpr std::string_view kName = "fixed_window";
    static constexpr bool kBucket = false;

    struct State {
        Tick last = 0;
        Tick into = 0;          ///< `last` − the window's start: 0 <= into < period
        std::int64_t used = 0;  ///< 0 marks a fresh key
    };

    RATELIMIT_ALWAYS_INLINE static Decision step(State& state, const Quota& q, Tick now,
                                                 std::int64_t cost) noexcept {
        State view = state;
        const bool steppedBack = rebaseAndRoll(view, q, now);
        const Tick left = q.period - view.into;
        const Tick reset = view.used > 0 ? left : 0;
        if (cost > q.count) {
            return detail::decision(q, false, q.count, q.count - view.used, detail::kNeverTicks,
                                    reset);
        }
        if (view.used + cost <= q.count) {
            if (cost > 0) {
                view.used += cost;
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
  local aligned = idiv(now, p.period) * p.period
  if s.used > 0 and now - s.start >= p.period then
    s.used = 0
    s.start = math.max(aligned, s.start + p.period)
  elseif s.used == 0 then
    s.start = aligned
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
function fixed_window.store(key, s, reset, p)
  if reset <= 0 then
    redis.call('DEL', key)
    return
  end
  redis.call('HSET', key, 'start', fmt(s.start), 'last', fmt(s.last), 'used', fmt(s.used))
  -- A shifted window is kept until the next aligned edge, as isFresh says in C++.
  keepFor(key, reset + imod(-(s.start + p.period), p.period))
end
)lua";

    /// Fresh once the window is over and the aligned window holding `now` starts after it
    /// (the same thing for an aligned window; later for one shifted by a step back).
    static bool isFresh(const State& state, const Quota& q, Tick now) noexcept {
        return state.used == 0 ||
               (now >= state.last && elapsed(state, now) - q.period >= alignedInto(now, q));
    }

    static Tick lastWrite(const State& state) noexcept {
        return state.used > 0 ? state.last : detail::kInt64Min;
    }

    static ModelRange range(const Quota& q) noexcept { return {q.period, q.count}; }

private:
    /// How far `now` lies into the window of the key's last write (saturated).
    static Tick elapsed(const State& s, Tick now) noexcept {
        return detail::satAdd(s.into, detail::satSub(now, s.last));
    }

    /// How far `now` lies into its epoch-aligned window.
    static Tick alignedInto(Tick now, const Quota& q) noexcept {
        return detail::floorMod(now, q.period);
    }

    /// Moves the view to `now` (`last = now`, `into` = how far `now` is into the key's window):
    /// after a step back no time passed, so the window shifts by the step; a window that is
    /// over gives way to the aligned one holding `now`, unless that would overlap the shifted
    /// one, which the next window then follows; a fresh key starts in the aligned window.
    /// Returns whether it rebased.
    static bool rebaseAndRoll(State& s, const Quota& q, Tick now) noexcept {
        const bool steppedBack = s.used > 0 && now < s.last;
        if (s.used == 0) {
            s.into = alignedInto(now, q);
        } else if (!steppedBack) {
            const Tick e = elapsed(s, now);
            if (e >= q.period) {
                s.used = 0;
                s.into = std::min(alignedInto(now, q), e - q.period);
            } else {
                s.into = e;
            }
        }
        s.last = now;
        return steppedBack;
    }
};

}  // namespace v1
}  // namespace ratelimit
