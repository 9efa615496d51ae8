#pragma once

#include <cstdint>
#include <string_view>

#include <ratelimit/algorithms/model.hpp>
#include <ratelimit/decision.hpp>
#include <ratelimit/detail/checked_math.hpp>

namespace ratelimit {
inline namespace v1 {

/// Sliding counter (weighted two-window estimate, as Cloudflare does it): the previous
/// window's count weighs by the share of it still inside the sliding window. O(1) memory,
/// smooths the fixed window's edge burst; an estimate, not an exact log.
///
/// With `e = now − start`, allowed iff `prev·(W − e) ≤ (count − curr − cost)·W`, in integers.
/// At exactly a window start the previous window weighs fully.
/// State (32 bytes): last write, how far into its window that write was (not the window's
/// start, which may lie below INT64_MIN), previous and current counts.
/// Thread safety: stateless; `step` is a pure function of its arguments.
struct SlidingCounterModel {
    static constexpr std::string_view kName = "sliding_counter";
    static constexpr bool kBucket = false;

    struct State {
        Tick last = 0;
        Tick into = 0;  ///< `last` − the current window's start: 0 <= into < period
        std::int64_t previous = 0;
        std::int64_t current = 0;
    };

    RATELIMIT_ALWAYS_INLINE static Decision step(State& state, const Quota& q, Tick now,
                                                 std::int64_t cost) noexcept {
        using detail::Int128;
        State view = state;
        const bool steppedBack = rebaseAndRoll(view, q, now);
        const Tick w = q.period;
        const Tick e = view.into;  // 0 <= e < w after the roll
        const Int128 weighted = Int128{view.previous} * (w - e);
        // floor((count·W − weighted) / W) = count − ceil(weighted / W); weighted / W <= previous,
        // so the quotient fits 64 bits, and a key with no previous window divides nothing.
        const std::int64_t carried =
            view.previous == 0 ? 0 : ceilNarrow(weighted, static_cast<std::uint64_t>(w));
        const std::int64_t remaining = q.count - carried - view.current;
        const Tick reset = view.current > 0 ? 2 * w - e : (view.previous > 0 ? w - e : 0);
        if (cost > q.count) {
            return detail::decision(q, false, q.count, remaining, detail::kNeverTicks, reset);
        }
        if (cost == 0 || weighted <= Int128{q.count - view.current - cost} * w) {
            if (cost > 0) {
                view.current += cost;
                state = view;
            }
            return detail::decision(q, true, q.count, remaining - cost, 0,
                                    view.current > 0 ? 2 * w - e : reset);
        }
        if (steppedBack) {
            state = view;
        }
        return detail::decision(q, false, q.count, remaining, retryTicks(view, q, e, cost), reset);
    }

    /// The same step in Redis Lua (composed by `detail::composeScript`): the table
    /// `sliding_counter` over the hash fields `start`, `last`, `prev` and `curr`, in µs ticks.
    /// A missing key is the fresh state. Bounds: prev, curr <= count, so every product
    /// (`prev·(W − e)`, `(count − curr − cost)·W`, `W·(curr + cost − count)`) stays within
    /// count·W < 2^53; `2W − e` is written `W + (W − e)` (exact while 2W < 2^53).
    static constexpr std::string_view kLua = R"lua(
local sliding_counter = {}
function sliding_counter.load(key)
  local v = redis.call('HMGET', key, 'start', 'last', 'prev', 'curr')
  local start = v[1] and tonumber(v[1])
  local last = v[2] and tonumber(v[2])
  local prev = v[3] and tonumber(v[3])
  local curr = v[4] and tonumber(v[4])
  if not start or not last or not prev or not curr then
    return {start = 0, last = 0, prev = 0, curr = 0}
  end
  return {start = start, last = last, prev = prev, curr = curr}
end
function sliding_counter.rebaseAndRoll(s, now, p)
  local steppedBack = (s.prev > 0 or s.curr > 0) and now < s.last
  if steppedBack then
    s.start = s.start - (s.last - now)
    s.last = now
  end
  local e = now - s.start
  if e - p.period >= p.period then
    s.prev = 0
    s.curr = 0
  elseif e >= p.period then
    s.prev = s.curr
    s.curr = 0
    s.start = s.start + p.period
  end
  if s.prev == 0 and s.curr == 0 then
    s.start = idiv(now, p.period) * p.period
  end
  return steppedBack
end
function sliding_counter.lastWrite(s)
  if s.prev > 0 or s.curr > 0 then return s.last end
  return nil
end
function sliding_counter.step(s, now, cost, p)
  local steppedBack = sliding_counter.rebaseAndRoll(s, now, p)
  local w = p.period
  local e = now - s.start
  local weighted = s.prev * (w - e)
  local remaining = idiv(p.count * w - weighted, w) - s.curr
  local reset = 0
  if s.curr > 0 then
    reset = w + (w - e)
  elseif s.prev > 0 then
    reset = w - e
  end
  if cost > p.count then
    return false, remaining, -1, reset, false
  end
  if cost == 0 then
    return true, remaining, 0, reset, false
  end
  if weighted <= (p.count - s.curr - cost) * w then
    s.curr = s.curr + cost
    s.last = now
    return true, remaining - cost, 0, w + (w - e), true
  end
  local retry
  if s.curr + cost <= p.count then
    -- Within this window, once the previous window's weight has decayed enough.
    retry = ceildiv(weighted - (p.count - s.curr - cost) * w, s.prev)
  else
    -- In the next window, where the current count becomes the decaying previous one.
    retry = (w - e) + ceildiv(w * (s.curr + cost - p.count), s.curr)
  end
  return false, remaining, retry, reset, steppedBack
end
function sliding_counter.store(key, s, reset)
  if reset <= 0 then
    redis.call('DEL', key)
    return
  end
  redis.call('HSET', key, 'start', fmt(s.start), 'last', fmt(s.last), 'prev', fmt(s.prev),
    'curr', fmt(s.curr))
  keepFor(key, reset)
end
)lua";

    static bool isFresh(const State& state, const Quota& q, Tick now) noexcept {
        if (state.previous == 0 && state.current == 0) {
            return true;
        }
        const Tick span = state.current > 0 ? 2 * q.period : q.period;
        return now >= state.last && elapsed(state, now) >= span;
    }

    static Tick lastWrite(const State& state) noexcept {
        return (state.previous > 0 || state.current > 0) ? state.last : detail::kInt64Min;
    }

    static ModelRange range(const Quota& q) noexcept {
        return {detail::Int128{q.period} * 2, q.count};
    }

private:
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

    /// ceil(n / d) for 0 <= n whose quotient is below 2^62.
    static std::int64_t ceilNarrow(detail::Int128 n, std::uint64_t d) noexcept {
        const auto un = static_cast<detail::UInt128>(n);
        return static_cast<std::int64_t>(detail::narrowDivide(un + d - 1, d));
    }

    /// How far `now` lies into the window of the key's last write (saturated).
    static Tick elapsed(const State& s, Tick now) noexcept {
        return detail::satAdd(s.into, detail::satSub(now, s.last));
    }

    /// Moves the view to `now` (`last = now`, `into` = how far `now` is into the current
    /// window): after a step back no time passed, so the windows shift by the step; windows
    /// that are over roll forward; a fresh key starts in the epoch-aligned window holding `now`.
    /// Returns whether it rebased.
    static bool rebaseAndRoll(State& s, const Quota& q, Tick now) noexcept {
        const bool steppedBack = (s.previous > 0 || s.current > 0) && now < s.last;
        if (!steppedBack) {
            const Tick e = elapsed(s, now);
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
            s.into = detail::floorMod(now, q.period);
        }
        s.last = now;
        return steppedBack;
    }
};

}  // namespace v1
}  // namespace ratelimit
