#pragma once

// Brute-force references for the five algorithms, written from docs/semantics.md ("Semantics
// every algorithm keeps") and never from the library's code: every quantity is an exact integer
// or an exact rational in 128 bits, and state is kept the slow, obvious way (the list of
// admitted requests, tokens scaled by the period). One reference per algorithm, shared by the
// fuzz targets (tests/fuzz/algorithm_fuzz.hpp) and the unit tests that compare the limiter with
// it decision by decision. Standard library only: the fuzz targets have no Catch2.
//
// Each reference works in the key's own time ("key time"), which `KeyRef` maps from clock time:
// while the clock moves forward, key time moves with it; a call earlier than the key's last
// write is "no time passed" (key time stands still). A late call (at most the late-call
// tolerance earlier) is answered at the last write, its waits counted from its own time; an
// earlier call is a clock step and, when it writes, moves the key's origin back to it (the
// rebase). A window key that is fresh again returns to epoch-aligned windows, so its key time
// is clock time again.

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <vector>

namespace ratelimit_test {

__extension__ using Int128 = __int128;

/// A reference found its own state inconsistent (a bug of the reference, not of the library).
class ReferenceError : public std::logic_error {
public:
    using std::logic_error::logic_error;
};

/// Floor division for any sign of `n` (d > 0).
inline Int128 floorDiv(Int128 n, Int128 d) {
    const Int128 q = n / d;
    return (n % d != 0 && n < 0) ? q - 1 : q;
}

/// Ceiling division for any sign of `n` (d > 0).
inline Int128 ceilDiv(Int128 n, Int128 d) { return -floorDiv(-n, d); }

inline Int128 atLeastZero(Int128 v) { return v < 0 ? 0 : v; }

/// The limit as the references read it, in ticks.
struct Params {
    Int128 count = 1;
    Int128 period = 1;
    Int128 burst = 1;
    std::int64_t maxRuns = 64;  ///< sliding log only
    Int128 lateTolerance = 0;   ///< ticks: how much earlier than the last write a late call is
};

inline constexpr Int128 kNever = -1;

/// What docs/semantics.md says one call answers.
struct Expected {
    bool allowed = false;
    Int128 limit = 0;
    Int128 remaining = 0;
    Int128 retry = 0;  ///< ticks, or kNever
    Int128 reset = 0;  ///< ticks
};

/// One admitted request, at a key time.
struct Event {
    Int128 time = 0;
    Int128 cost = 0;
};

/// Windows `[k·W, (k+1)·W)` counted from the key's window start, which is epoch-aligned while
/// the key has never stepped back. Shared by the fixed window and the sliding counter.
struct WindowState {
    bool open = false;  ///< false: never written, or fresh and not yet realigned
    Int128 start = 0;   ///< start of the key's window holding its last write (key time)
    std::vector<Event> events;

    /// The start of the window holding key time `v`, on the key's grid of windows.
    [[nodiscard]] Int128 windowAt(Int128 v, Int128 w) const {
        return start + w * floorDiv(v - start, w);
    }

    [[nodiscard]] Int128 sumIn(Int128 from, Int128 to) const {
        Int128 sum = 0;
        for (const Event& e : events) {
            if (e.time >= from && e.time < to) {
                sum += e.cost;
            }
        }
        return sum;
    }

    void realign(Int128 t, Int128 w) {
        open = true;
        start = floorDiv(t, w) * w;
        events.clear();
    }
};

/// `admittedBound` for "no bound is checked".
inline constexpr Int128 kUnchecked = -1;

/// Fixed window: the sum of the costs admitted in the window holding `now`.
struct FixedWindowRef {
    static constexpr bool kBucket = false;
    using State = WindowState;

    /// Fresh when the window holding key time `v` has nothing admitted and the aligned window
    /// holding clock time `t` starts at or after the end (in clock time, `t - v` ahead of key
    /// time) of the key's last window with admissions: before that its windows follow its own
    /// grid, so a shifted key never re-enters an aligned window it already used.
    static bool fresh(const State& s, const Params& p, Int128 v, Int128 t) {
        if (!s.open) {
            return true;
        }
        const Int128 w = p.period;
        const Int128 at = s.windowAt(v, w);
        if (s.sumIn(at, at + w) != 0) {
            return false;
        }
        if (s.events.empty()) {
            return true;
        }
        const Int128 lastEnd = s.windowAt(s.events.back().time, w) + w + (t - v);
        return floorDiv(t, w) * w >= lastEnd;
    }

    static void realign(State& s, const Params& p, Int128 t) { s.realign(t, p.period); }

    static Expected decide(State& s, const Params& p, Int128 v, Int128 cost) {
        const Int128 w = p.period;
        s.start = s.windowAt(v, w);
        Int128 used = s.sumIn(s.start, s.start + w);
        const Int128 left = w - (v - s.start);
        const Int128 reset = used > 0 ? left : 0;
        if (cost > p.count) {
            return {false, p.count, p.count - used, kNever, reset};
        }
        if (used + cost <= p.count) {
            if (cost > 0) {
                s.events.push_back({v, cost});
                used += cost;
            }
            return {true, p.count, p.count - used, 0, used > 0 ? left : 0};
        }
        return {false, p.count, p.count - used, left, reset};
    }

    static Int128 maxWait(const Params& p) { return p.period; }
    /// Most admitted in one period of key time: each window holds `count` and its windows,
    /// shifted or aligned, never overlap, so a period meets two of them, steps back included.
    static Int128 admittedBound(const Params& p, bool /*steppedBack*/) { return 2 * p.count; }
};

/// Sliding counter: docs/semantics.md's weighted formula over the two windows' sums.
struct SlidingCounterRef {
    static constexpr bool kBucket = false;
    using State = WindowState;

    static bool fresh(const State& s, const Params& p, Int128 v, Int128 /*t*/) {
        if (!s.open) {
            return true;
        }
        const Int128 at = s.windowAt(v, p.period);
        return s.sumIn(at - p.period, at + p.period) == 0;
    }

    static void realign(State& s, const Params& p, Int128 t) { s.realign(t, p.period); }

    static Expected decide(State& s, const Params& p, Int128 v, Int128 cost) {
        const Int128 w = p.period;
        const Int128 count = p.count;
        s.start = s.windowAt(v, w);
        const Int128 prev = s.sumIn(s.start - w, s.start);
        const Int128 curr = s.sumIn(s.start, s.start + w);
        const Int128 e = v - s.start;
        const Int128 weighted = prev * (w - e);
        const Int128 remaining = floorDiv(count * w - weighted, w) - curr;
        const Int128 reset = curr > 0 ? 2 * w - e : (prev > 0 ? w - e : 0);
        if (cost > count) {
            return {false, count, atLeastZero(remaining), kNever, reset};
        }
        if (cost == 0) {
            return {true, count, atLeastZero(remaining), 0, reset};
        }
        if (weighted <= (count - curr - cost) * w) {
            s.events.push_back({v, cost});
            return {true, count, atLeastZero(remaining - cost), 0, 2 * w - e};
        }
        Int128 retry = 0;
        if (curr + cost <= count) {
            retry = ceilDiv(weighted - (count - curr - cost) * w, prev);
        } else {
            retry = (w - e) + ceilDiv(w * (curr + cost - count), curr);
        }
        return {false, count, atLeastZero(remaining), retry, reset};
    }

    static Int128 maxWait(const Params& p) { return 2 * p.period; }
    /// Two windows' worth in one period of key time, steps back included: each window holds
    /// `count`, and the key returns to epoch-aligned windows only after a whole empty window
    /// of key time, so a period never meets more than two windows with admissions.
    static Int128 admittedBound(const Params& p, bool /*steppedBack*/) { return 2 * p.count; }
};

/// Sliding log: every admitted request with its time; a request at `t` counts in `(t, t + W)`.
/// Beyond `maxRuns` distinct times the oldest time's requests move to the next oldest time.
struct SlidingLogRef {
    static constexpr bool kBucket = false;
    struct State {
        std::vector<Event> events;  ///< oldest first
    };

    static bool fresh(const State& /*s*/, const Params& /*p*/, Int128 /*v*/, Int128 /*t*/) {
        return false;
    }
    static void realign(State& /*s*/, const Params& /*p*/, Int128 /*t*/) {}

    static Expected decide(State& s, const Params& p, Int128 v, Int128 cost) {
        const Int128 w = p.period;
        const auto live = [&](const Event& e) { return v - e.time < w; };
        Int128 used = 0;
        bool any = false;
        Int128 newest = 0;
        for (const Event& e : s.events) {
            if (live(e)) {
                used += e.cost;
                any = true;
                newest = e.time;
            }
        }
        const Int128 reset = any ? w - (v - newest) : 0;
        if (cost > p.count) {
            return {false, p.count, atLeastZero(p.count - used), kNever, reset};
        }
        if (used + cost <= p.count) {
            if (cost > 0) {
                std::vector<Event> kept;
                for (const Event& e : s.events) {
                    if (live(e)) {
                        kept.push_back(e);
                    }
                }
                kept.push_back({v, cost});
                mergeOldest(kept, p.maxRuns);
                s.events = kept;
            }
            return {true, p.count, atLeastZero(p.count - used - cost), 0, cost > 0 ? w : reset};
        }
        // Let the oldest times expire, one time at a time, until the cost fits.
        Int128 freed = 0;
        Int128 wait = kNever;
        for (std::size_t i = 0; i < s.events.size() && wait == kNever; ++i) {
            const Event& e = s.events[i];
            if (!live(e)) {
                continue;
            }
            freed += e.cost;
            const bool lastOfItsTime = i + 1 == s.events.size() || s.events[i + 1].time != e.time;
            if (lastOfItsTime && used - freed + cost <= p.count) {
                wait = e.time + w - v;
            }
        }
        if (wait == kNever) {
            throw ReferenceError(
                "reference: sliding log found no wait for a cost within the count");
        }
        return {false, p.count, atLeastZero(p.count - used), wait, reset};
    }

    static Int128 maxWait(const Params& p) { return p.period; }
    static Int128 admittedBound(const Params& p, bool /*steppedBack*/) { return p.count; }

private:
    static void mergeOldest(std::vector<Event>& events, std::int64_t maxRuns) {
        std::vector<Int128> times;
        for (const Event& e : events) {
            if (times.empty() || times.back() != e.time) {
                times.push_back(e.time);
            }
        }
        if (static_cast<std::int64_t>(times.size()) <= maxRuns) {
            return;
        }
        for (Event& e : events) {
            if (e.time == times[0]) {
                e.time = times[1];
            }
        }
    }
};

/// Token bucket (and the GCRA, its meter): tokens as an exact rational with the period as
/// denominator, so refill adds `elapsed·count` and nothing is ever rounded.
struct BucketRef {
    static constexpr bool kBucket = true;
    struct State {
        bool touched = false;  ///< false: full
        Int128 scaled = 0;     ///< tokens · period at `at`
        Int128 at = 0;         ///< key time of the last write
    };

    static bool fresh(const State& /*s*/, const Params& /*p*/, Int128 /*v*/, Int128 /*t*/) {
        return false;
    }
    static void realign(State& /*s*/, const Params& /*p*/, Int128 /*t*/) {}

    static Int128 scaledAt(const State& s, const Params& p, Int128 v) {
        const Int128 full = p.burst * p.period;
        if (!s.touched) {
            return full;
        }
        const Int128 elapsed = v - s.at;
        if (elapsed >= ceilDiv(full - s.scaled, p.count)) {
            return full;
        }
        return s.scaled + elapsed * p.count;
    }

    static Expected decide(State& s, const Params& p, Int128 v, Int128 cost) {
        const Int128 full = p.burst * p.period;
        const Int128 have = scaledAt(s, p, v);
        const Int128 remaining = floorDiv(have, p.period);
        const Int128 reset = ceilDiv(full - have, p.count);
        if (cost > p.burst) {
            return {false, p.burst, remaining, kNever, reset};
        }
        const Int128 need = cost * p.period;
        if (need <= have) {
            const Int128 after = have - need;
            if (cost > 0) {
                s = {true, after, v};
            }
            return {true, p.burst, floorDiv(after, p.period), 0, ceilDiv(full - after, p.count)};
        }
        return {false, p.burst, remaining, ceilDiv(need - have, p.count), reset};
    }

    static Int128 maxWait(const Params& p) { return ceilDiv(p.burst * p.period, p.count); }
};

/// One key of a reference: its model state plus the mapping from clock time to key time.
template <class Ref>
struct KeyRef {
    bool written = false;  ///< has a last write (a step back is measured against it)
    Int128 lastReal = 0;   ///< clock time of the last write
    Int128 offset = 0;     ///< clock time minus key time
    typename Ref::State state{};

    struct Call {
        Expected expected;
        Int128 lateness = 0;  ///< ticks before the last write, for a late call
        bool steppedBack = false;
        bool writes = false;
    };

    /// Decides a call at clock time `t` and applies it as docs/semantics.md says: a late call is
    /// answered at the last write; an admission with a cost writes; a refusal writes only the
    /// rebase after a step back; a cost of zero or above the limit writes nothing.
    Call call(const Params& p, Int128 t, Int128 cost) {
        if (written && t < lastReal && lastReal - t <= p.lateTolerance) {
            Call c = answeredAt(p, lastReal, cost);
            c.lateness = lastReal - t;
            if (c.expected.retry > 0) {
                c.expected.retry += c.lateness;
            }
            if (c.expected.reset > 0) {
                c.expected.reset += c.lateness;
            }
            return c;
        }
        return answeredAt(p, t, cost);
    }

private:
    Call answeredAt(const Params& p, Int128 t, Int128 cost) {
        Call c;
        c.steppedBack = written && t < lastReal;
        KeyRef view = *this;
        Int128 v = c.steppedBack ? lastReal - offset : t - offset;
        if (Ref::fresh(view.state, p, v, v + view.offset)) {
            if (c.steppedBack) {
                throw ReferenceError("reference: a key that stepped back is fresh");
            }
            Ref::realign(view.state, p, t);
            view.offset = 0;
            v = t;
        }
        c.expected = Ref::decide(view.state, p, v, cost);
        const Int128 limit = Ref::kBucket ? p.burst : p.count;
        c.writes =
            (c.expected.allowed && cost > 0) || (c.steppedBack && cost >= 1 && cost <= limit);
        if (c.writes) {
            *this = view;
            written = true;
            lastReal = t;
            offset = t - v;
        }
        return c;
    }
};

}  // namespace ratelimit_test
