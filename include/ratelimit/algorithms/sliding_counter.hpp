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
/// State (32 bytes): window start, last write, previous and current counts.
/// Thread safety: stateless; `step` is a pure function of its arguments.
struct SlidingCounterModel {
    static constexpr std::string_view kName = "sliding_counter";
    static constexpr bool kBucket = false;

    struct State {
        Tick start = 0;
        Tick last = 0;
        std::int64_t previous = 0;
        std::int64_t current = 0;
    };

    static Decision step(State& state, const Quota& q, Tick now, std::int64_t cost) noexcept {
        using detail::Int128;
        State view = state;
        const bool steppedBack = rebaseAndRoll(view, q, now);
        const Tick w = q.period;
        const Tick e = now - view.start;  // 0 <= e < w after the roll
        const Int128 weighted = Int128{view.previous} * (w - e);
        const std::int64_t remaining =
            detail::clampToInt64((Int128{q.count} * w - weighted) / w) - view.current;
        const Tick reset = view.current > 0 ? 2 * w - e : (view.previous > 0 ? w - e : 0);
        if (cost > q.count) {
            return detail::decision(q, false, q.count, remaining, detail::kNeverTicks, reset);
        }
        if (cost == 0 || weighted <= Int128{q.count - view.current - cost} * w) {
            if (cost > 0) {
                view.current += cost;
                view.last = now;
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

    static bool isFresh(const State& state, const Quota& q, Tick now) noexcept {
        if (state.previous == 0 && state.current == 0) {
            return true;
        }
        const Tick span = state.current > 0 ? 2 * q.period : q.period;
        return now >= state.last && detail::satSub(now, state.start) >= span;
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
            const Int128 excess = Int128{s.previous} * (w - e) - Int128{q.count - s.current - cost} * w;
            return detail::clampToInt64(detail::ceilDiv(excess, Int128{s.previous}));
        }
        // In the next window, where the current count becomes the decaying previous one.
        const Int128 into = detail::ceilDiv(Int128{w} * (s.current + cost - q.count), Int128{s.current});
        return (w - e) + detail::clampToInt64(into);
    }

    /// Shifts the windows after a step back; moves them forward to `now`; re-aligns a fresh key
    /// to the epoch. Returns whether it rebased.
    static bool rebaseAndRoll(State& s, const Quota& q, Tick now) noexcept {
        const bool steppedBack = (s.previous > 0 || s.current > 0) && now < s.last;
        if (steppedBack) {
            const Tick step = detail::satSub(s.last, now);
            s.start = detail::satSub(s.start, step);
            s.last = now;
        }
        const Tick e = detail::satSub(now, s.start);
        if (e >= 2 * q.period) {
            s.previous = 0;
            s.current = 0;
        } else if (e >= q.period) {
            s.previous = s.current;
            s.current = 0;
            s.start += q.period;
        }
        if (s.previous == 0 && s.current == 0) {
            s.start = detail::alignedStart(now, q.period);
        }
        return steppedBack;
    }
};

}  // namespace v1
}  // namespace ratelimit
