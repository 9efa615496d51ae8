#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include <ratelimit/algorithms/model.hpp>
#include <ratelimit/algorithms/window.hpp>
#include <ratelimit/decision.hpp>
#include <ratelimit/detail/checked_math.hpp>
#include <ratelimit/detail/inline.hpp>
#include <ratelimit/limit.hpp>

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
/// Redis encoding version 1 held the window's start instead of `into`; version 2 was a hash of
/// decimal fields.
struct FixedWindowModel : WindowKind, ModelNames<"fixed_window", 3, "last", "into", "used"> {
    struct State {
        Tick last = 0;
        Tick into = 0;          ///< `last` − the window's start: 0 <= into < period
        std::int64_t used = 0;  ///< 0 marks a fresh key
    };
    /// The memory table may keep the state in 16 bytes (`detail::WindowWords`): a fresh state
    /// is all zeros, 0 <= into < period and 0 <= used <= count.
    static constexpr bool kStateInWindowWords = true;

    RATELIMIT_INLINE static Decision step(State& state, const Quota& q, Tick now,
                                          std::int64_t cost) noexcept {
        State view = state;
        const bool steppedBack = rebaseAndRoll(view, q, now);
        const Tick left = q.period - view.into;
        const Tick reset = view.used > 0 ? left : 0;
        if (cost > q.count) {
            return detail::refusedForever(q, q.count - view.used, reset);
        }
        if (view.used + cost <= q.count) {
            if (cost > 0) {
                view.used += cost;
                state = view;
            }
            return detail::admitted(q, q.count - view.used, view.used > 0 ? left : 0);
        }
        if (steppedBack) {
            state = view;
        }
        return detail::refused(q, q.count - view.used, left, reset);
    }

    /// Gives back up to `cost` of the count of the key's window at `now` (`Limiter::refund`),
    /// never below 0.
    static void refund(State& state, const Quota& q, Tick now, std::int64_t cost) noexcept {
        if (state.used == 0 || cost == 0) {
            return;
        }
        State view = state;
        rebaseAndRoll(view, q, now);
        view.used -= cost < view.used ? cost : view.used;
        state = view;
    }

    /// The same model in Lua, line by line (composed into a script by the Redis storage): a
    /// step returns the state to store (nil when nothing changed), then the decision. The
    /// state a script loaded is its own, so the view is that state, not a copy.
    static constexpr std::string_view kLuaModel = R"lua(
local fixed_window = {}
function fixed_window.step(state, q, now, cost)
  local view = state
  local steppedBack = fixed_window.rebaseAndRoll(view, q, now)
  local left = q.period - view.into
  local reset = view.used > 0 and left or 0
  if cost > q.count then
    return nil, refusedForever(q.count - view.used, reset)
  end
  if view.used + cost <= q.count then
    local written = nil
    if cost > 0 then
      view.used = view.used + cost
      written = view
    end
    return written, admitted(q.count - view.used, view.used > 0 and left or 0)
  end
  local written = nil
  if steppedBack then
    written = view
  end
  return written, refused(q.count - view.used, left, reset)
end
function fixed_window.refund(state, q, now, cost)
  if state.used == 0 or cost == 0 then return nil end
  fixed_window.rebaseAndRoll(state, q, now)
  state.used = state.used - math.min(cost, state.used)
  return state
end
function fixed_window.lastWrite(state)
  if state.used > 0 then return state.last end
  return nil
end
-- How long Redis keeps a written key: until isFresh holds, which a window shifted by a step
-- back reaches only at the next epoch-aligned edge after its end.
function fixed_window.keep(state, q, reset)
  return reset + imod(state.into - state.last, q.period)
end
function fixed_window.rebaseAndRoll(s, q, now)
  local steppedBack = s.used > 0 and now < s.last
  if s.used == 0 then
    s.into = alignedInto(now, q.period)
  elseif not steppedBack then
    local e = windowElapsed(s.into, s.last, now)
    if e >= q.period then
      s.used = 0
      s.into = math.min(alignedInto(now, q.period), e - q.period)
    else
      s.into = e
    end
  end
  s.last = now
  return steppedBack
end
)lua";
    /// The script's Lua, in the pieces the script joins: the shared window measures, then the
    /// model.
    static constexpr std::array<std::string_view, 2> kLua{detail::kWindowLua, kLuaModel};

    /// Fresh once the window is over and the aligned window holding `now` starts after it
    /// (the same thing for an aligned window; later for one shifted by a step back).
    static bool isFresh(const State& state, const Quota& q, Tick now) noexcept {
        return state.used == 0 || (now >= state.last &&
                                   detail::windowElapsed(state.into, state.last, now) - q.period >=
                                       detail::alignedInto(now, q.perPeriod));
    }

    static Tick lastWrite(const State& state) noexcept {
        return state.used > 0 ? state.last : detail::kInt64Min;
    }

    static ModelRange range(const Quota& q) noexcept { return {q.period, q.count}; }

private:
    /// Moves the view to `now` (`last = now`, `into` = how far `now` is into the key's window):
    /// after a step back no time passed, so the window shifts by the step; a window that is
    /// over gives way to the aligned one holding `now`, unless that would overlap the shifted
    /// one, which the next window then follows; a fresh key starts in the aligned window.
    /// Returns whether it rebased.
    RATELIMIT_INLINE static bool rebaseAndRoll(State& s, const Quota& q, Tick now) noexcept {
        const bool steppedBack = s.used > 0 && now < s.last;
        if (s.used == 0) {
            s.into = detail::alignedInto(now, q.perPeriod);
        } else if (!steppedBack) {
            const Tick e = detail::windowElapsed(s.into, s.last, now);
            if (e >= q.period) {
                s.used = 0;
                const Tick aligned = detail::alignedInto(now, q.perPeriod);
                s.into = aligned < e - q.period ? aligned : e - q.period;
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
