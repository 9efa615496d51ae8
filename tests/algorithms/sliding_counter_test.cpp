// Tests of the sliding counter (include/ratelimit/algorithms/sliding_counter.hpp) through the
// public limiter, driven by ManualClock only. Expected values come from the formulas of
// DESIGN.md, evaluated here in exact integers.

#include <chrono>
#include <cstdint>
#include <map>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>

#include <ratelimit/algorithms/sliding_counter.hpp>

#include "algorithms/common.hpp"
#include "support/catch.hpp"

namespace {

using namespace std::chrono_literals;
using ratelimit::Decision;
using ratelimit::Limit;
using ratelimit::ManualClock;
using rltest::at;
using rltest::Int128;
using rltest::Nanos;
using Counter = ratelimit::SlidingCounter<ratelimit::MemoryStorage, ratelimit::ManualClock>;

std::pair<int, Decision> send(Counter& limiter, int n, std::string_view key = "client") {
    int allowed = 0;
    Decision last;
    for (int i = 0; i < n; ++i) {
        last = limiter.tryAcquire(key);
        allowed += last.allowed ? 1 : 0;
    }
    return {allowed, last};
}

/// How many requests of cost 1 the weighted estimate admits one after another at `e` into a
/// window, with `prev` in the previous window and `curr` already in this one:
/// the k-th passes while prev·(W − e) ≤ (count − curr − k − 1)·W.
std::int64_t admitsOneByOne(std::int64_t count, std::int64_t w, std::int64_t e, std::int64_t prev,
                            std::int64_t curr) {
    std::int64_t k = 0;
    while (curr + k < count && Int128{prev} * (w - e) <= Int128{count - curr - k - 1} * w) {
        ++k;
    }
    return k;
}

/// The sliding counter of DESIGN.md, for one key and a forward clock, in exact integers.
class Reference {
public:
    Reference(std::int64_t count, std::int64_t w) : count_(count), w_(w) {}

    Decision step(std::int64_t now, std::int64_t cost) {
        const Int128 k = rltest::floorDiv(now, w_);
        if (k == window_ + 1) {
            prev_ = curr_;
            curr_ = 0;
        } else if (k != window_) {
            prev_ = 0;
            curr_ = 0;
        }
        window_ = k;
        const Int128 e = now - k * w_;
        const Int128 weighted = Int128{prev_} * (w_ - e);
        Decision d;
        d.limit = count_;
        const Int128 remaining = (Int128{count_} * w_ - weighted) / w_ - curr_;
        const Int128 reset = curr_ > 0 ? Int128{2} * w_ - e : (prev_ > 0 ? w_ - e : 0);
        d.resetAfter = Nanos{static_cast<std::int64_t>(reset)};
        if (cost > count_) {
            d.remaining = static_cast<std::int64_t>(remaining);
            d.retryAfter = Decision::kNever;
            return d;
        }
        if (cost == 0 || weighted <= Int128{count_ - curr_ - cost} * w_) {
            d.allowed = true;
            d.remaining = static_cast<std::int64_t>(remaining - cost);
            if (cost > 0) {
                curr_ += cost;
                d.resetAfter = Nanos{static_cast<std::int64_t>(Int128{2} * w_ - e)};
            }
            return d;
        }
        d.remaining = static_cast<std::int64_t>(remaining);
        Int128 retry = 0;
        if (curr_ + cost <= count_) {
            retry = rltest::ceilDiv(weighted - Int128{count_ - curr_ - cost} * w_, prev_);
        } else {
            retry = (w_ - e) + rltest::ceilDiv(Int128{w_} * (curr_ + cost - count_), curr_);
        }
        d.retryAfter = Nanos{static_cast<std::int64_t>(retry)};
        return d;
    }

private:
    std::int64_t count_;
    std::int64_t w_;
    Int128 window_ = -(Int128{1} << 100);
    std::int64_t prev_ = 0;
    std::int64_t curr_ = 0;
};

}  // namespace

TEST_CASE("SlidingCounter: a burst, a half-minute and the next window of 10/min",
          "[sliding_counter][memory]") {
    // Scenario 1 of the design: rule 10/min, empty at 00:00.
    ManualClock clock;
    Counter limiter{Limit::perMinute(10), {}, clock};
    const auto [burst, afterBurst] = send(limiter, 10);
    CHECK(burst == 10);
    CHECK(afterBurst.resetAfter == 2min);
    clock.set(at(30s));
    const auto [half, afterHalf] = send(limiter, 5);
    CHECK(half == 0);
    // curr + 1 > count: into the next window, where 10·(60 − e) ≤ 9·60 needs e ≥ 6 s.
    CHECK(afterHalf.retryAfter == 30s + 6s);
    clock.set(at(1min + 10s));
    // At 01:10 the previous ten weigh 50/60: 8.33 of 10.
    const auto [late, afterLate] = send(limiter, 5);
    const std::int64_t expected = admitsOneByOne(10, 60, 10, 10, 0);
    CHECK(expected == 1);
    CHECK(late == expected);
    CHECK(afterLate.remaining == 0);
}

TEST_CASE("SlidingCounter: five, five after 30 s and five after 40 s: the last five are refused",
          "[sliding_counter][memory]") {
    ManualClock clock;
    Counter limiter{Limit::perMinute(10), {}, clock};
    CHECK(send(limiter, 5).first == 5);
    clock.set(at(30s));
    CHECK(send(limiter, 5).first == 5);
    clock.set(at(40s));
    const auto [n, last] = send(limiter, 5);
    CHECK(n == 0);
    CHECK(last.retryAfter == 20s + 6s);
    CHECK(last.resetAfter == 2min - 40s);
}

TEST_CASE(
    "SlidingCounter: 100 at 00:59 then 100 at 01:00 + e admit what the weighted estimate allows",
    "[sliding_counter][memory]") {
    // Scenario 3 of the design. At exactly 01:00 (e = 0) the previous window weighs fully.
    const auto run = [](Nanos e) {
        ManualClock clock;
        Counter limiter{Limit::perMinute(100), {}, clock};
        clock.set(at(59s));
        REQUIRE(send(limiter, 100).first == 100);
        clock.set(at(60s) + e);
        return send(limiter, 100).first;
    };
    CHECK(run(0s) == 0);
    CHECK(run(15s) == 25);  // 100·45 ≤ (99 − k)·60  ⇔  k ≤ 24
    CHECK(run(30s) == 50);
    CHECK(run(45s) == 75);
    for (const Nanos e : {Nanos{1ns}, Nanos{599999999ns}, Nanos{600ms}, Nanos{7s + 123ms},
                          Nanos{59s + 999999999ns}}) {
        INFO("e = " << e.count() << "ns");
        CHECK(run(e) == admitsOneByOne(100, 60'000'000'000, e.count(), 100, 0));
    }
    // Beyond the second window nothing of 00:59 counts.
    ManualClock clock;
    Counter limiter{Limit::perMinute(100), {}, clock};
    clock.set(at(59s));
    REQUIRE(send(limiter, 100).first == 100);
    clock.set(at(2min));
    CHECK(send(limiter, 100).first == 100);
}

TEST_CASE("SlidingCounter: retryAfter and resetAfter follow the design's formulas",
          "[sliding_counter][memory]") {
    ManualClock clock;
    Counter limiter{Limit::perMinute(100), {}, clock};
    clock.set(at(59s));
    REQUIRE(send(limiter, 100).first == 100);
    clock.set(at(75s));
    REQUIRE(send(limiter, 25).first == 25);
    // prev 100, curr 25, e = 15 s. Within this window:
    // ceil((100·45 s − (100 − 25 − 1)·60 s) / 100) = ceil(60 s / 100) = 600 ms.
    const Decision one = limiter.tryAcquire("client");
    CHECK(!one.allowed);
    CHECK(one.retryAfter == 600ms);
    CHECK(one.resetAfter == 105s);  // 2W − e with curr > 0
    CHECK(one.remaining == 0);
    CHECK(!limiter.tryAcquire("client", 1, at(75s + 600ms - 1ns)).allowed);
    CHECK(limiter.peek("client", 1, at(75s + 600ms)).allowed);
    // A cost of 10: ceil((4500 s − 65·60 s) / 100) = 6 s.
    CHECK(limiter.tryAcquire("client", 10).retryAfter == 6s);
    // A cost of 80: curr + cost > count, so into the next window, where 25·(60 − e') ≤ 20·60
    // needs e' ≥ 12 s: (60 − 15) s + ceil(60 s·5/25) = 57 s.
    CHECK(limiter.tryAcquire("client", 80).retryAfter == 57s);
    CHECK(!limiter.tryAcquire("client", 80, at(75s + 57s - 1ns)).allowed);
    CHECK(limiter.peek("client", 80, at(75s + 57s)).allowed);
    // With only the previous window counting, resetAfter is W − e.
    const Decision peek = limiter.peek("client", 0, at(2min + 10s));
    CHECK(peek.resetAfter == 50s);
    CHECK(peek.remaining == 100 - 21);  // floor((100·60 − 25·50)/60) = 79
    CHECK(limiter.peek("client", 0, at(3min)).resetAfter == 0s);
}

TEST_CASE("SlidingCounter: windows count from the clock's zero, floored below it",
          "[sliding_counter][memory]") {
    ManualClock clock;
    Counter limiter{Limit::per(10, 90s), {}, clock};
    CHECK(limiter.tryAcquire("a", 1, at(100s)).resetAfter == 2 * 90s - 10s);
    CHECK(limiter.tryAcquire("b", 1, at(-1s)).resetAfter == 2 * 90s - 89s);
    CHECK(limiter.tryAcquire("c", 1, at(-90s)).resetAfter == 2 * 90s);
    // A full previous window weighs fully at the window start, by one tick less after it.
    REQUIRE(limiter.tryAcquire("d", 10, at(-1ns)).allowed);
    CHECK(!limiter.tryAcquire("d", 1, at(0ns)).allowed);
    CHECK(limiter.peek("d", 0, at(0ns)).remaining == 0);
    // 10·(90 s − e) ≤ 9·90 s  ⇔  e ≥ 9 s.
    CHECK(limiter.tryAcquire("d", 1, at(0ns)).retryAfter == 9s);
    CHECK(!limiter.tryAcquire("d", 1, at(9s - 1ns)).allowed);
    CHECK(limiter.tryAcquire("d", 1, at(9s)).allowed);
}

TEST_CASE("SlidingCounter: random traffic makes exactly the design's decisions",
          "[sliding_counter][memory]") {
    std::uint64_t seed = 60;
    for (const Limit& limit : rltest::sampleLimits()) {
        ManualClock clock;
        auto limiter = rltest::makeLimiter<Counter>(limit, clock);
        std::map<std::string, Reference> references;
        std::mt19937_64 rng(seed++);
        std::int64_t now =
            std::uniform_int_distribution<std::int64_t>(-1'000'000'000'000, 1'000'000'000'000)(rng);
        int admitted = 0;
        int refused = 0;
        for (int i = 0; i < 3000; ++i) {
            now += rltest::randomForwardStep(rng, limit).count();
            const std::string key(
                1, static_cast<char>('a' + std::uniform_int_distribution<int>(0, 2)(rng)));
            const std::int64_t cost = rltest::randomCost(rng, limit.count);
            auto it = references.try_emplace(key, limit.count, limit.period.count()).first;
            const Decision expected = it->second.step(now, cost);
            const Decision d = limiter.tryAcquire(key, cost, at(Nanos{now}));
            RLTEST_REQUIRE(d == expected, rltest::describe(limit) + " call " + std::to_string(i) +
                                              " key " + key + " at " + std::to_string(now) +
                                              "ns cost " + std::to_string(cost) + ": got " +
                                              rltest::describe(d) + ", expected " +
                                              rltest::describe(expected));
            admitted += d.allowed ? 1 : 0;
            refused += d.allowed ? 0 : 1;
        }
        INFO(rltest::describe(limit));
        CHECK(admitted > 0);
        CHECK(refused > 0);
    }
}

TEST_CASE("SlidingCounter: a denied request does not count", "[sliding_counter][memory]") {
    rltest::checkRefusalsConsumeNothing<Counter>(Limit::perMinute(10));
    rltest::checkRefusalsConsumeNothing<Counter>(Limit::per(3, 10s));
    rltest::checkRefusalsConsumeNothing<Counter>(Limit::perSecond(7));
}

TEST_CASE("SlidingCounter: a cost of zero is a peek", "[sliding_counter][memory]") {
    rltest::checkCostZeroIsAPeek<Counter>();
}

TEST_CASE("SlidingCounter: a cost above the count is never allowed and consumes nothing",
          "[sliding_counter][memory]") {
    rltest::checkImpossibleCosts<Counter>(Limit::perMinute(10));
    rltest::checkImpossibleCosts<Counter>(Limit::perMinute(10).withBurst(40));
    rltest::checkImpossibleCosts<Counter>(Limit::perHour(999'999));
    rltest::checkImpossibleCosts<Counter>(Limit::per(Limit::kMaxCount, 1h));
}

TEST_CASE("SlidingCounter: a negative cost throws std::invalid_argument",
          "[sliding_counter][memory]") {
    rltest::checkNegativeCostThrows<Counter>();
}

TEST_CASE("SlidingCounter: the decision's limit is the count, whatever the burst",
          "[sliding_counter][memory]") {
    rltest::checkLimitField<Counter>();
}

TEST_CASE("SlidingCounter: any byte string is a key of its own", "[sliding_counter][memory]") {
    rltest::checkKeysAreBytes<Counter>();
}

TEST_CASE("SlidingCounter: reset forgets one key", "[sliding_counter][memory]") {
    rltest::checkReset<Counter>(Limit::perMinute(10));
}

TEST_CASE("SlidingCounter: random traffic keeps every rule of a decision",
          "[sliding_counter][memory]") {
    std::uint64_t seed = 41;
    for (const Limit& limit : rltest::sampleLimits()) {
        rltest::checkRandomTraffic<Counter>(limit, seed++, 1500);
    }
}

TEST_CASE("SlidingCounter: a clock stepping back admits nothing extra and keeps the wait",
          "[sliding_counter][memory]") {
    std::uint64_t seed = 500;
    for (const Limit limit : {Limit::perMinute(10), Limit::per(3, 10s), Limit::perHour(999'999),
                              Limit::perSecond(7), Limit::per(10, 90s)}) {
        for (const auto step : {Nanos{1s}, Nanos{1h}, Nanos{24h}}) {
            rltest::checkStepBackAroundExhaustedKey<Counter>(limit, step, seed++);
            rltest::checkStepBackKeepsRemaining<Counter>(limit, step);
        }
    }
}

TEST_CASE("SlidingCounter: after a step back both windows shift by the step",
          "[sliding_counter][memory]") {
    // 100/min: 100 at 10:00:59, 25 at 10:01:15; the clock steps back a day.
    ManualClock clock;
    Counter limiter{Limit::perMinute(100), {}, clock};
    REQUIRE(limiter.tryAcquire("k", 100, at(10h + 59s)).allowed);
    REQUIRE(limiter.tryAcquire("k", 25, at(10h + 75s)).allowed);
    const Decision before = limiter.tryAcquire("k", 1, at(10h + 75s));
    CHECK(before.retryAfter == 600ms);
    const auto back = at(10h + 75s) - 24h;
    const Decision after = limiter.tryAcquire("k", 1, back);
    CHECK(!after.allowed);
    CHECK(after.retryAfter == 600ms);
    CHECK(after.resetAfter == before.resetAfter);
    CHECK(after.remaining == 0);
    CHECK(!limiter.tryAcquire("k", 1, back + 600ms - 1ns).allowed);
    CHECK(limiter.tryAcquire("k", 1, back + 600ms).allowed);
}

TEST_CASE("SlidingCounter: works at both ends of the clock's range", "[sliding_counter][memory]") {
    rltest::checkClockRangeEnds<Counter>(Limit::perMinute(10));
    rltest::checkClockRangeEnds<Counter>(Limit::per(3, 10s));
    rltest::checkClockRangeEnds<Counter>(Limit::perHour(999'999));
}

TEST_CASE("SlidingCounter: two windows of 2^62 ns or more are refused at construction",
          "[sliding_counter][memory]") {
    // Its longest span is two windows: 2W < 2^62.
    ManualClock clock;
    try {
        Counter limiter{Limit::per(1, std::chrono::nanoseconds{std::int64_t{1} << 61}), {}, clock};
        FAIL("constructed a sliding counter with a 2^61 ns window");
    } catch (const std::invalid_argument& e) {
        const std::string what = e.what();
        INFO(what);
        CHECK(what.find("2^62") != std::string::npos);
        CHECK(what.find("period") != std::string::npos);
    }
    const std::int64_t w = (std::int64_t{1} << 61) - 1;
    Counter limiter{Limit::per(Limit::kMaxCount, std::chrono::nanoseconds{w}), {}, clock};
    // prev·(W − e) reaches 2^48·2^61 = 2^109: still exact in 128 bits.
    REQUIRE(limiter.tryAcquire("k", Limit::kMaxCount, at(std::chrono::nanoseconds{w - 1})).allowed);
    const Decision d = limiter.tryAcquire("k", 1, at(std::chrono::nanoseconds{w + 1}));
    CHECK(!d.allowed);
    // At e = 1 the previous 2^48 weigh 2^48·(W − 1) > (2^48 − 1)·W; the wait is
    // ceil((2^48·(W − 1) − (2^48 − 1)·W) / 2^48), about W / 2^48 = 8192 ns.
    const Int128 expected = rltest::ceilDiv(
        Int128{Limit::kMaxCount} * (w - 1) - Int128{Limit::kMaxCount - 1} * w, Limit::kMaxCount);
    CHECK(d.retryAfter.count() == static_cast<std::int64_t>(expected));
    CHECK(limiter.tryAcquire("k", 1, at(std::chrono::nanoseconds{w + 1}) + d.retryAfter).allowed);
}
