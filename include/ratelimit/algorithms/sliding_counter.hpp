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

/// Sliding counter (weighted two-window estimate, as Cloudflare does it): the previous
/// window's count weighs by the share of it still inside the sliding window. O(1) memory,
/// smooths the fixed window's edge burst; an estimate, not an exact log.
///
/// With `e = now − start`, allowed iff `prev·(W − e) ≤ (count − curr − cost)·W`, in integers.
/// At exactly a window start the previous window weighs fully.
/// State (32 bytes): last write, how far into its window that write was (not the window's
/// start, which may lie below INT64_MIN), previous and current counts. Redis encoding version 1
/// held the window's start instead of `into`; version 2 was a hash of decimal fields.
struct SlidingCounterModel
    : WindowKind,
      ModelNames<"sliding_counter", 3, "last", "into", "previous", "current"> {
    struct State {
        Tick last = 0;
        Tick into = 0;  ///< `last` − the current window's start: 0 <= into < period
        std::int64_t previous = 0;
        std::int64_t current = 0;
    };
    /// The memory table may keep the state in 16 bytes (`detail::CounterWords`): a fresh state
    /// is all zeros, both counts are at most count, `into` matters only while a count is above
    /// 0, and a step (or a refund) at a time no earlier than the last write leaves it
    /// `alignedInto(last, period)` if it was (`rebaseAndRoll`): only a clock step back shifts it.
    static constexpr bool kStateInCounterWords = true;

    RATELIMIT_INLINE static Decision step(State& state, const Quota& q, Tick now,
                                          std::int64_t cost) noexcept {
        using detail::Int128;
        State view = state;
        const bool steppedBack = rebaseAndRoll(view, q, now);
        const Tick w = q.period;
        const Tick e = view.into;  // 0 <= e < w after the roll
        const Int128 weighted = Int128{view.previous} * (w - e);
        // floor((count·W − weighted) / W) = count − ceil(weighted / W); weighted / W <= previous,
        // so the quotient fits 64 bits, and a key with no previous window divides nothing.
        const std::int64_t carried = view.previous == 0 ? 0 : perPeriodCeil(weighted, q);
        const std::int64_t remaining = q.count - carried - view.current;
        const Tick reset = view.current > 0 ? 2 * w - e : (view.previous > 0 ? w - e : 0);
        if (cost > q.count) {
            return detail::refusedForever(q, remaining, reset);
        }
        if (cost == 0 || weighted <= Int128{q.count - view.current - cost} * w) {
            if (cost > 0) {
                view.current += cost;
                state = view;
            }
            return detail::admitted(q, remaining - cost, view.current > 0 ? 2 * w - e : reset);
        }
        if (steppedBack) {
            state = view;
        }
        return detail::refused(q, remaining, retryTicks(view, q, e, cost), reset);
    }

    /// Gives back up to `cost` at `now` (`Limiter::refund`): from the current window's count
    /// first, then the previous one's, never below 0.
    static void refund(State& state, const Quota& q, Tick now, std::int64_t cost) noexcept {
        if ((state.previous == 0 && state.current == 0) || cost == 0) {
            return;
        }
        State view = state;
        rebaseAndRoll(view, q, now);
        const std::int64_t fromCurrent = cost < view.current ? cost : view.current;
        view.current -= fromCurrent;
        const std::int64_t rest = cost - fromCurrent;
        view.previous -= rest < view.previous ? rest : view.previous;
        state = view;
    }

    /// The same model in Lua, line by line (composed into a script by the Redis storage): a
    /// step returns the state to store (nil when nothing changed), then the decision. The
    /// state a script loaded is its own, so the view is that state, not a copy.
    /// Bounds: previous, current <= count, so every product (`previous·(W − e)`,
    /// `(count − current − cost)·W`, `W·(current + cost − count)`) stays within
    /// count·W < 2^53, and 2W < 2^53.
    static constexpr std::string_view kLuaModel = R"lua(
local sliding_counter = {}
function sliding_counter.step(state, q, now, cost)
  local view = state
  local steppedBack = sliding_counter.rebaseAndRoll(view, q, now)
  local w = q.period
  local e = view.into
  local weighted = view.previous * (w - e)
  local carried = view.previous == 0 and 0 or ceildiv(weighted, w)
  local remaining = q.count - carried - view.current
  local reset = view.current > 0 and 2 * w - e or (view.previous > 0 and w - e or 0)
  if cost > q.count then
    return nil, refusedForever(remaining, reset)
  end
  if cost == 0 or weighted <= (q.count - view.current - cost) * w then
    local written = nil
    if cost > 0 then
      view.current = view.current + cost
      written = view
    end
    return written, admitted(remaining - cost, view.current > 0 and 2 * w - e or reset)
  end
  local written = nil
  if steppedBack then
    written = view
  end
  return written, refused(remaining, sliding_counter.retryTicks(view, q, e, cost), reset)
end
function sliding_counter.refund(state, q, now, cost)
  if (state.previous == 0 and state.current == 0) or cost == 0 then return nil end
  sliding_counter.rebaseAndRoll(state, q, now)
  local fromCurrent = math.min(cost, state.current)
  state.current = state.current - fromCurrent
  state.previous = state.previous - math.min(cost - fromCurrent, state.previous)
  return state
end
function sliding_counter.lastWrite(state)
  if state.previous > 0 or state.current > 0 then return state.last end
  return nil
end
function sliding_counter.rebaseAndRoll(s, q, now)
  local steppedBack = (s.previous > 0 or s.current > 0) and now < s.last
  if not steppedBack then
    local e = windowElapsed(s.into, s.last, now)
    if e >= 2 * q.period then
      s.previous = 0
      s.current = 0
    elseif e >= q.period then
      s.previous = s.current
      s.current = 0
      s.into = e - q.period
    else
      s.into = e
    end
  end
  if s.previous == 0 and s.current == 0 then
    s.into = alignedInto(now, q.period)
  end
  s.last = now
  return steppedBack
end
function sliding_counter.retryTicks(s, q, e, cost)
  local w = q.period
  if s.current + cost <= q.count then
    -- Within this window, once the previous window's weight has decayed enough.
    local excess = s.previous * (w - e) - (q.count - s.current - cost) * w
    return ceildiv(excess, s.previous)
  end
  -- In the next window, where the current count becomes the decaying previous one.
  local into = w * (s.current + cost - q.count)
  return (w - e) + ceildiv(into, s.current)
end
)lua";
    /// The script's Lua, in the pieces the script joins: the shared window measures, then the
    /// model.
    static constexpr std::array<std::string_view, 2> kLua{detail::kWindowLua, kLuaModel};

    static bool isFresh(const State& state, const Quota& q, Tick now) noexcept {
        if (state.previous == 0 && state.current == 0) {
            return true;
        }
        const Tick span = state.current > 0 ? 2 * q.period : q.period;
        return now >= state.last && detail::windowElapsed(state.into, state.last, now) >= span;
    }

    static Tick lastWrite(const State& state) noexcept {
        return (state.previous > 0 || state.current > 0) ? state.last : detail::kInt64Min;
    }

    static ModelRange range(const Quota& q) noexcept {
        return {detail::Int128{q.period} * 2, q.count};
    }

private:
    /// Moves the view to `now` (`last = now`, `into` = how far `now` is into the current
    /// window): after a step back no time passed, so the windows shift by the step; windows
    /// that are over roll forward; a fresh key starts in the epoch-aligned window holding `now`.
    /// Returns whether it rebased.
    RATELIMIT_INLINE static bool rebaseAndRoll(State& s, const Quota& q, Tick now) noexcept {
        const bool steppedBack = (s.previous > 0 || s.current > 0) && now < s.last;
        if (!steppedBack) {
            const Tick e = detail::windowElapsed(s.into, s.last, now);
            if (e >= 2 * q.period) {
                s.previous = 0;
                s.current = 0;
            } else if (e >= q.period) {
                s.previous = s.current;
                s.current = 0;
                s.into = e - q.period;
            } else {
                s.into = e;
            }
        }
        if (s.previous == 0 && s.current == 0) {
            s.into = detail::alignedInto(now, q.perPeriod);
        }
        s.last = now;
        return steppedBack;
    }

    static Tick retryTicks(const State& s, const Quota& q, Tick e, std::int64_t cost) noexcept {
        using detail::Int128;
        const Tick w = q.period;
        if (s.current + cost <= q.count) {
            // Within this window, once the previous window's weight has decayed enough.
            // 0 < excess <= previous·(W − e): the quotient is at most W − e.
            const Int128 excess =
                Int128{s.previous} * (w - e) - Int128{q.count - s.current - cost} * w;
            return ceilNarrow(excess, static_cast<std::uint64_t>(s.previous));
        }
        // In the next window, where the current count becomes the decaying previous one;
        // cost <= count makes current + cost − count <= current, so the quotient is at most W.
        const Int128 into = Int128{w} * (s.current + cost - q.count);
        return (w - e) + ceilNarrow(into, static_cast<std::uint64_t>(s.current));
    }

    /// ceil(n / period) for 0 <= n whose quotient is below 2^62: by the period's divisor (a
    /// multiply) where n + period fits 63 bits, as it does under any count whose product with
    /// the period does.
    RATELIMIT_INLINE static std::int64_t perPeriodCeil(detail::Int128 n, const Quota& q) noexcept {
        if (n <= detail::Int128{detail::kInt64Max} - q.period) [[likely]] {
            return q.perPeriod.ceil(static_cast<std::int64_t>(n));
        }
        return ceilNarrow(n, static_cast<std::uint64_t>(q.period));
    }

    /// ceil(n / d) for 0 <= n whose quotient is below 2^62.
    static std::int64_t ceilNarrow(detail::Int128 n, std::uint64_t d) noexcept {
        const auto un = static_cast<detail::UInt128>(n);
        return static_cast<std::int64_t>(detail::narrowDivide(un + d - 1, d));
    }
};

}  // namespace v1
}  // namespace ratelimit
