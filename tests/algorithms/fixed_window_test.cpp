// Tests of the fixed window (include/ratelimit/algorithms/fixed_window.hpp) through the public
// limiter, driven by ManualClock only.

#include <chrono>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>

#include <ratelimit/algorithms/fixed_window.hpp>

#include "algorithms/common.hpp"
#include "support/catch.hpp"

namespace {

using namespace std::chrono_literals;
using ratelimit::Decision;
using ratelimit::Limit;
using ratelimit::ManualClock;
using rltest::at;
using rltest::Nanos;
using Window = ratelimit::FixedWindow<ratelimit::MemoryStorage, ratelimit::ManualClock>;

std::pair<int, Decision> send(Window& limiter, int n, std::string_view key = "client") {
    int allowed = 0;
    Decision last;
    for (int i = 0; i < n; ++i) {
        last = limiter.tryAcquire(key);
        allowed += last.allowed ? 1 : 0;
    }
    return {allowed, last};
}

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
    auto limiter = rltest::makeLimiter<Window>(limit, clock);
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<std::int64_t> costs(1, limit.count);
    const std::int64_t w = limit.period.count();
    std::int64_t t = 0;
    std::int64_t window = 0;
    std::int64_t used = 0;
    std::int64_t windows = 0;
    std::int64_t known = 0;  // what the client was last told remains; 0: unknown
    rltest::Int128 admitted = 0;
    const auto nextCost = [&] {
        if (mode == Costs::kOne) {
            return std::int64_t{1};
        }
        const std::int64_t c = costs(rng);
        return mode == Costs::kTopUp && known > 0 ? std::min(c, known) : c;
    };
    std::int64_t cost = nextCost();
    const auto context = [&](std::int64_t i, const Decision& d) {
        return rltest::describe(limit) + " request " + std::to_string(i) + " at " +
               std::to_string(t) + "ns cost " + std::to_string(cost) + " used " +
               std::to_string(used) + " -> " + rltest::describe(d);
    };
    for (std::int64_t i = 0; i < requests; ++i) {
        const Decision d = limiter.tryAcquire("client", cost, at(Nanos{t}));
        const auto k = static_cast<std::int64_t>(rltest::floorDiv(t, w));
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
    INFO(rltest::describe(limit) + " windows " + std::to_string(windows));
    if (mode != Costs::kRandom) {
        // Every window before the current one gave exactly `count`.
        CHECK(admitted == rltest::Int128{windows} * limit.count + used);
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

TEST_CASE("FixedWindow: a burst, a half-minute and the next window of 10/min",
          "[fixed_window][memory]") {
    // Scenario 1 of the design: rule 10/min, empty at 00:00.
    ManualClock clock;
    Window limiter{Limit::perMinute(10), {}, clock};
    const auto [burst, afterBurst] = send(limiter, 10);
    CHECK(burst == 10);
    CHECK(afterBurst.remaining == 0);
    CHECK(afterBurst.resetAfter == 60s);

    clock.set(at(30s));
    const auto [half, afterHalf] = send(limiter, 5);
    CHECK(half == 0);
    CHECK(!afterHalf.allowed);
    CHECK(afterHalf.retryAfter == 30s);
    CHECK(afterHalf.resetAfter == 30s);

    clock.set(at(1min + 10s));
    const auto [late, afterLate] = send(limiter, 5);
    CHECK(late == 5);
    CHECK(afterLate.remaining == 5);
    CHECK(afterLate.resetAfter == 50s);
}

TEST_CASE("FixedWindow: five, five after 30 s and five after 40 s: the last five are refused",
          "[fixed_window][memory]") {
    ManualClock clock;
    Window limiter{Limit::perMinute(10), {}, clock};
    CHECK(send(limiter, 5).first == 5);
    clock.set(at(30s));
    CHECK(send(limiter, 5).first == 5);
    clock.set(at(40s));
    const auto [n, last] = send(limiter, 5);
    CHECK(n == 0);
    CHECK(last.retryAfter == 20s);
    CHECK(last.remaining == 0);
}

TEST_CASE("FixedWindow: 100 at 00:59 and 100 at 01:00 admit all 200 at 100/min",
          "[fixed_window][memory]") {
    // Scenario 3 of the design: the edge burst a fixed window allows.
    ManualClock clock;
    Window limiter{Limit::perMinute(100), {}, clock};
    clock.set(at(59s));
    const auto [first, afterFirst] = send(limiter, 100);
    CHECK(first == 100);
    CHECK(afterFirst.resetAfter == 1s);
    clock.set(at(60s));
    const auto [second, afterSecond] = send(limiter, 100);
    CHECK(second == 100);
    CHECK(afterSecond.resetAfter == 60s);
    CHECK(!limiter.tryAcquire("client").allowed);
}

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

TEST_CASE("FixedWindow: a denied request does not consume the window", "[fixed_window][memory]") {
    rltest::checkRefusalsConsumeNothing<Window>(Limit::perMinute(10));
    rltest::checkRefusalsConsumeNothing<Window>(Limit::per(3, 10s));
    rltest::checkRefusalsConsumeNothing<Window>(Limit::perSecond(7));
}

TEST_CASE("FixedWindow: a cost of zero is a peek", "[fixed_window][memory]") {
    rltest::checkCostZeroIsAPeek<Window>();
}

TEST_CASE("FixedWindow: a cost above the count is never allowed and consumes nothing",
          "[fixed_window][memory]") {
    rltest::checkImpossibleCosts<Window>(Limit::perMinute(10));
    rltest::checkImpossibleCosts<Window>(Limit::perMinute(10).withBurst(40));  // burst is ignored
    rltest::checkImpossibleCosts<Window>(Limit::perHour(999'999));
    rltest::checkImpossibleCosts<Window>(Limit::per(Limit::kMaxCount, 1h));
}

TEST_CASE("FixedWindow: a negative cost throws std::invalid_argument", "[fixed_window][memory]") {
    rltest::checkNegativeCostThrows<Window>();
}

TEST_CASE("FixedWindow: the decision's limit is the count, whatever the burst",
          "[fixed_window][memory]") {
    rltest::checkLimitField<Window>();
}

TEST_CASE("FixedWindow: any byte string is a key of its own", "[fixed_window][memory]") {
    rltest::checkKeysAreBytes<Window>();
}

TEST_CASE("FixedWindow: reset forgets one key", "[fixed_window][memory]") {
    rltest::checkReset<Window>(Limit::perMinute(10));
}

TEST_CASE("FixedWindow: random traffic keeps every rule of a decision", "[fixed_window][memory]") {
    std::uint64_t seed = 21;
    for (const Limit& limit : rltest::sampleLimits()) {
        rltest::checkRandomTraffic<Window>(limit, seed++, 1500);
    }
}

TEST_CASE("FixedWindow: a clock stepping back admits nothing extra and keeps the wait",
          "[fixed_window][memory]") {
    std::uint64_t seed = 300;
    for (const Limit limit : {Limit::perMinute(10), Limit::per(3, 10s), Limit::perHour(999'999),
                              Limit::perSecond(7), Limit::per(10, 90s)}) {
        for (const auto step : {Nanos{1s}, Nanos{1h}, Nanos{24h}}) {
            rltest::checkStepBackAroundExhaustedKey<Window>(limit, step, seed++);
            rltest::checkStepBackKeepsRemaining<Window>(limit, step);
        }
    }
}

TEST_CASE("FixedWindow: after a step back the windows keep their shift until the key is idle",
          "[fixed_window][memory]") {
    // 10/min, exhausted at 10:00:40 (window [10:00, 10:01), 20 s left).
    ManualClock clock;
    Window limiter{Limit::perMinute(10), {}, clock};
    clock.set(at(10h + 40s));
    REQUIRE(send(limiter, 10).first == 10);
    CHECK(limiter.tryAcquire("client").retryAfter == 20s);
    for (const Nanos step : {Nanos{1s}, Nanos{1h}, Nanos{24h}}) {
        INFO("step back " << step.count() << "ns");
        ManualClock c;
        Window l{Limit::perMinute(10), {}, c};
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

TEST_CASE("FixedWindow: works at both ends of the clock's range", "[fixed_window][memory]") {
    rltest::checkClockRangeEnds<Window>(Limit::perMinute(10));
    rltest::checkClockRangeEnds<Window>(Limit::per(3, 10s));
    rltest::checkClockRangeEnds<Window>(Limit::perHour(999'999));
}

TEST_CASE("FixedWindow: a client retrying at retryAfter gets exactly count per window, no drift",
          "[fixed_window][memory]") {
    noDriftRuns(10'000'000);  // over 10^7 requests in all
}

TEST_CASE("FixedWindow: a window of 2^62 ns or more is refused at construction",
          "[fixed_window][memory]") {
    ManualClock clock;
    const Limit tooLong = Limit::per(1, std::chrono::nanoseconds{std::int64_t{1} << 62});
    try {
        Window limiter{tooLong, {}, clock};
        FAIL("constructed a limiter for " << rltest::describe(tooLong));
    } catch (const std::invalid_argument& e) {
        const std::string what = e.what();
        INFO(what);
        CHECK(what.find("2^62") != std::string::npos);
        CHECK(what.find("period") != std::string::npos);
    }
    const Limit longest =
        Limit::per(Limit::kMaxCount, std::chrono::nanoseconds{(std::int64_t{1} << 62) - 1});
    Window limiter{longest, {}, clock};
    clock.set(at(std::chrono::nanoseconds{std::int64_t{1} << 62}));
    CHECK(limiter.tryAcquire("k", Limit::kMaxCount).allowed);
    const Decision d = limiter.tryAcquire("k");
    CHECK(!d.allowed);
    CHECK(d.retryAfter.count() == (std::int64_t{1} << 62) - 1 - 1);  // window [2^62 - 1, 2^63 - 2)
}
