// Tests of the sliding counter (include/ratelimit/algorithms/sliding_counter.hpp) through the
// public limiter, driven by ManualClock only: its own scenarios. Expected values come from the
// formulas of docs/semantics.md, evaluated here in exact integers, and from the reference of
// tests/support/algorithm_references.hpp. What every algorithm does (and the worked scenarios)
// is in contract_test.cpp.

#include <chrono>
#include <cstdint>
#include <map>
#include <random>
#include <stdexcept>
#include <string>

#include <ratelimit/algorithms/sliding_counter.hpp>

#include "algorithms/common.hpp"
#include "support/algorithm_references.hpp"
#include "support/catch.hpp"
#include "support/limiters.hpp"
#include "support/random_traffic.hpp"

using namespace std::chrono_literals;

namespace ratelimit_test {

namespace {

using Counter = MemorySlidingCounter;

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

}  // namespace

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
    for (const Limit& limit : sampleLimits()) {
        ManualClock clock;
        auto limiter = makeLimiter<Counter>(limit, clock);
        const Params params{limit.count, limit.period.count(), limit.burst};
        std::map<std::string, KeyRef<SlidingCounterRef>> references;
        Rng rng(seed++);
        std::int64_t now = uniform(rng, -1'000'000'000'000, 1'000'000'000'000);
        int admitted = 0;
        int refused = 0;
        for (int i = 0; i < 3000; ++i) {
            now += randomForwardStep(rng, limit).count();
            const std::string key(
                1, static_cast<char>('a' + std::uniform_int_distribution<int>(0, 2)(rng)));
            const std::int64_t cost = randomCost(rng, limit.count);
            const Decision expected = toDecision(references[key].call(params, now, cost).expected);
            const Decision d = limiter.tryAcquire(key, cost, at(Nanos{now}));
            RLTEST_REQUIRE(d == expected, describe(limit) + " call " + std::to_string(i) + " key " +
                                              key + " at " + std::to_string(now) + "ns cost " +
                                              std::to_string(cost) + ": got " + describe(d) +
                                              ", expected " + describe(expected));
            admitted += d.allowed ? 1 : 0;
            refused += d.allowed ? 0 : 1;
        }
        INFO(describe(limit));
        CHECK(admitted > 0);
        CHECK(refused > 0);
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

TEST_CASE("SlidingCounter: two windows of 2^62 ns or more are refused at construction",
          "[sliding_counter][memory]") {
    // Its longest span is two windows: 2W < 2^62.
    ManualClock clock;
    const Limit tooLong = Limit::per(1, std::chrono::nanoseconds{std::int64_t{1} << 61});
    CHECK_THROWS_AS((Counter{tooLong, {}, clock}), std::invalid_argument);
    CHECK_THROWS_WITH((Counter{tooLong, {}, clock}), Contains("2^62") && Contains("period"));
    const std::int64_t w = (std::int64_t{1} << 61) - 1;
    Counter limiter{Limit::per(Limit::kMaxCount, std::chrono::nanoseconds{w}), {}, clock};
    // prev·(W − e) reaches 2^48·2^61 = 2^109: still exact in 128 bits.
    REQUIRE(limiter.tryAcquire("k", Limit::kMaxCount, at(std::chrono::nanoseconds{w - 1})).allowed);
    const Decision d = limiter.tryAcquire("k", 1, at(std::chrono::nanoseconds{w + 1}));
    CHECK(!d.allowed);
    // At e = 1 the previous 2^48 weigh 2^48·(W − 1) > (2^48 − 1)·W; the wait is
    // ceil((2^48·(W − 1) − (2^48 − 1)·W) / 2^48), about W / 2^48 = 8192 ns.
    const Int128 expected = ceilDiv(
        Int128{Limit::kMaxCount} * (w - 1) - Int128{Limit::kMaxCount - 1} * w, Limit::kMaxCount);
    CHECK(d.retryAfter.count() == static_cast<std::int64_t>(expected));
    CHECK(limiter.tryAcquire("k", 1, at(std::chrono::nanoseconds{w + 1}) + d.retryAfter).allowed);
}

}  // namespace ratelimit_test
