// Tests of the fixed window (include/ratelimit/algorithms/fixed_window.hpp) through the public
// limiter, driven by ManualClock only: its own scenarios. What every algorithm does (and the
// worked scenarios) is in contract_test.cpp.

#include <chrono>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>

#include <ratelimit/algorithms/fixed_window.hpp>

#include "algorithms/common.hpp"
#include "support/catch.hpp"
#include "support/limiters.hpp"

using namespace std::chrono_literals;

namespace ratelimit_test {

namespace {

using Window = MemoryFixedWindow;

/// How the saturating client of the no-drift runs picks its costs.
enum class Costs {
    kOne,     ///< always 1: every window gets exactly `count`
    kTopUp,   ///< random, but never more than the `remaining` it was last told: exactly `count`
    kRandom,  ///< random in 1..count: at most `count`, refused only when it would not fit
};

/// A saturating client on one key that, when refused, retries exactly at now + retryAfter; the
/// expectation is the window arithmetic done here: window k = floor(t / W), at most `count` per
/// window, the wait runs to the next window's start, and (kOne, kTopUp) every window that ends
/// got exactly `count`.
void noDrift(const Limit& limit, std::int64_t requests, Costs mode, std::uint64_t seed) {
    ManualClock clock;
    auto limiter = makeLimiter<Window>(limit, clock);
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<std::int64_t> costs(1, limit.count);
    const std::int64_t w = limit.period.count();
    std::int64_t t = 0;
    std::int64_t window = 0;
    std::int64_t used = 0;
    std::int64_t windows = 0;
    std::int64_t known = 0;  // what the client was last told remains; 0: unknown
    Int128 admitted = 0;
    const auto nextCost = [&] {
        if (mode == Costs::kOne) {
            return std::int64_t{1};
        }
        const std::int64_t c = costs(rng);
        return mode == Costs::kTopUp && known > 0 ? std::min(c, known) : c;
    };
    std::int64_t cost = nextCost();
    const auto context = [&](std::int64_t i, const Decision& d) {
        return describe(limit) + " request " + std::to_string(i) + " at " + std::to_string(t) +
               "ns cost " + std::to_string(cost) + " used " + std::to_string(used) + " -> " +
               describe(d);
    };
    for (std::int64_t i = 0; i < requests; ++i) {
        const Decision d = limiter.tryAcquire("client", cost, at(Nanos{t}));
        const auto k = static_cast<std::int64_t>(floorDiv(t, w));
        if (k != window) {
            // The window that just ended: never more than `count`; exactly `count` unless the
            // costs are purely random.
            RLTEST_REQUIRE(used <= limit.count, context(i, d));
            RLTEST_REQUIRE(mode == Costs::kRandom || used == limit.count, context(i, d));
            RLTEST_REQUIRE(k == window + 1, context(i, d));  // the client never skips a window
            window = k;
            used = 0;
            ++windows;
        }
        const std::int64_t windowEnd = (k + 1) * w;
        const bool allowed = used + cost <= limit.count;
        RLTEST_REQUIRE(d.allowed == allowed, context(i, d));
        if (allowed) {
            used += cost;
            admitted += cost;
            RLTEST_REQUIRE(d.remaining == limit.count - used, context(i, d));
            RLTEST_REQUIRE(d.resetAfter.count() == windowEnd - t, context(i, d));
            known = d.remaining;
        } else {
            RLTEST_REQUIRE(d.retryAfter.count() == windowEnd - t, context(i, d));
            RLTEST_REQUIRE(d.remaining == limit.count - used, context(i, d));
            t += d.retryAfter.count();
            known = 0;
        }
        if (allowed || mode != Costs::kRandom) {
            cost = nextCost();
        }
    }
    INFO(describe(limit) + " windows " + std::to_string(windows));
    if (mode != Costs::kRandom) {
        // Every window before the current one gave exactly `count`.
        CHECK(admitted == Int128{windows} * limit.count + used);
    }
}

void noDriftRuns(std::int64_t requests) {
    const std::int64_t unit = requests / 22;
    std::uint64_t seed = 3;
    for (const Limit limit : {Limit::perSecond(7), Limit::per(3, 10s)}) {
        noDrift(limit, 4 * unit, Costs::kOne, seed++);
        noDrift(limit, unit, Costs::kTopUp, seed++);
        noDrift(limit, unit, Costs::kRandom, seed++);
    }
    const Limit perHour = Limit::perHour(999'999);
    noDrift(perHour, 6 * unit, Costs::kOne, seed++);  // 2.7 M requests: 2 full windows
    noDrift(perHour, 2 * unit, Costs::kTopUp, seed++);
    noDrift(perHour, 2 * unit, Costs::kRandom, seed++);
}

}  // namespace

TEST_CASE("FixedWindow: a request at exactly k·W opens a new window", "[fixed_window][memory]") {
    ManualClock clock;
    Window limiter{Limit::perMinute(3), {}, clock};
    for (const std::int64_t k : {std::int64_t{1}, std::int64_t{2}, std::int64_t{1000},
                                 std::int64_t{-1}, std::int64_t{-7}}) {
        INFO("k = " << k);
        const std::string key = "k" + std::to_string(k);
        const auto edge = at(k * Nanos{1min});
        // The tick before the edge belongs to the previous window.
        REQUIRE(limiter.tryAcquire(key, 3, edge - 1ns).allowed);
        const Decision last = limiter.tryAcquire(key, 1, edge - 1ns);
        CHECK(!last.allowed);
        CHECK(last.retryAfter == 1ns);
        CHECK(last.resetAfter == 1ns);
        const Decision next = limiter.tryAcquire(key, 3, edge);
        CHECK(next.allowed);
        CHECK(next.resetAfter == 1min);
        CHECK(!limiter.tryAcquire(key, 1, edge + 1min - 1ns).allowed);
        CHECK(limiter.tryAcquire(key, 3, edge + 1min).allowed);
    }
}

TEST_CASE("FixedWindow: windows count from the clock's zero, floored below it",
          "[fixed_window][memory]") {
    ManualClock clock;
    Window limiter{Limit::per(10, 90s), {}, clock};
    // 100 s lies in [90 s, 180 s): 80 s left.
    CHECK(limiter.tryAcquire("a", 1, at(100s)).resetAfter == 80s);
    // -1 s lies in [-90 s, 0): 1 s left; -90 s starts that window, 90 s left.
    CHECK(limiter.tryAcquire("b", 1, at(-1s)).resetAfter == 1s);
    CHECK(limiter.tryAcquire("c", 1, at(-90s)).resetAfter == 90s);
    CHECK(limiter.tryAcquire("d", 1, at(-91s)).resetAfter == 1s);  // [-180 s, -90 s)
    // 7 ns with a 3 ns window: [6, 9).
    Window tiny{Limit::per(1, 3ns), {}, clock};
    CHECK(tiny.tryAcquire("e", 1, at(7ns)).resetAfter == 2ns);
    CHECK(tiny.tryAcquire("f", 1, at(-7ns)).resetAfter == 1ns);  // [-9, -6)
}

TEST_CASE("FixedWindow: after a step back the windows keep their shift until the key is idle",
          "[fixed_window][memory]") {
    // 10/min, exhausted at 10:00:40 (window [10:00, 10:01), 20 s left).
    ManualClock clock;
    Window limiter{Limit::perMinute(10), {}, clock};
    clock.set(at(10h + 40s));
    REQUIRE(send(limiter, 10).first == 10);
    CHECK(limiter.tryAcquire("client").retryAfter == 20s);
    // With a late-call tolerance of 0 every step back is a clock step; by default only those
    // beyond 1 s are.
    for (const Nanos step : {Nanos{1s}, Nanos{1h}, Nanos{24h}}) {
        INFO("step back " << step.count() << "ns");
        ManualClock c;
        Window l{Limit::perMinute(10), {}, c, {.lateCallTolerance = 0ns}};
        c.set(at(10h + 40s));
        REQUIRE(send(l, 10, "k").first == 10);
        c.set(at(10h + 40s) - step);
        const Decision after = l.tryAcquire("k");
        CHECK(!after.allowed);
        CHECK(after.retryAfter == 20s);
        CHECK(after.resetAfter == 20s);
        CHECK(after.remaining == 0);
        c.advance(20s - 1ns);
        CHECK(!l.tryAcquire("k").allowed);
        c.advance(1ns);
        // The shifted window is over. The next one follows it: an aligned window here would
        // overlap the one the key already used (a clock stepping back and forth would then
        // reopen it again and again).
        const Decision next = l.tryAcquire("k");
        CHECK(next.allowed);
        CHECK(next.remaining == 9);
        CHECK(next.resetAfter == 1min);
        // Idle past the next aligned edge, the key is fresh and back on epoch-aligned windows.
        c.advance(2min);
        const Decision fresh = l.tryAcquire("k");
        CHECK(fresh.allowed);
        CHECK(fresh.remaining == 9);
        const auto sinceZero = c.now().time_since_epoch();
        CHECK(fresh.resetAfter == 1min - sinceZero % 1min);
    }
}

TEST_CASE("FixedWindow: a client retrying at retryAfter gets exactly count per window, no drift",
          "[fixed_window][memory]") {
    noDriftRuns(10'000'000);  // over 10^7 requests in all
}

TEST_CASE("FixedWindow: a window of 2^62 ns or more is refused at construction",
          "[fixed_window][memory]") {
    ManualClock clock;
    const Limit tooLong = Limit::per(1, std::chrono::nanoseconds{std::int64_t{1} << 62});
    CHECK_THROWS_AS((Window{tooLong, {}, clock}), std::invalid_argument);
    CHECK_THROWS_WITH((Window{tooLong, {}, clock}), Contains("2^62") && Contains("period"));
    const Limit longest =
        Limit::per(Limit::kMaxCount, std::chrono::nanoseconds{(std::int64_t{1} << 62) - 1});
    Window limiter{longest, {}, clock};
    clock.set(at(std::chrono::nanoseconds{std::int64_t{1} << 62}));
    CHECK(limiter.tryAcquire("k", Limit::kMaxCount).allowed);
    const Decision d = limiter.tryAcquire("k");
    CHECK(!d.allowed);
    CHECK(d.retryAfter.count() == (std::int64_t{1} << 62) - 1 - 1);  // window [2^62 - 1, 2^63 - 2)
}

}  // namespace ratelimit_test
