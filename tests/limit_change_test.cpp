// Tests of `Limiter::setLimit` over the memory storage (include/ratelimit/limiter.hpp,
// include/ratelimit/detail/limit_epochs.hpp): right after a change every key has left the
// smaller of what the old limit left it and what the new limit leaves after its consumption
// (against a twin limiter that kept the old limit), then the new limit applies in full; sets
// carry each member over; changes under 8 threads never admit more than the larger limit
// allows at one instant. The Redis side is in tests/storage/redis_policies_test.cpp.

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <latch>
#include <string>
#include <thread>
#include <vector>

#include <ratelimit/ratelimit.hpp>

#include "support/catch.hpp"
#include "support/decision_string.hpp"
#include "support/limiters.hpp"
#include "support/random_traffic.hpp"

using namespace std::chrono_literals;

namespace ratelimit_test {

using ratelimit::FixedWindowModel;
using ratelimit::LimitSet;
using ratelimit::TokenBucketModel;

namespace {

/// A random limit: 1 … 20 per second, minute or hour, a bucket's burst 1 … 30.
template <class Model>
Limit randomLimit(Rng& rng) {
    constexpr std::array<std::chrono::nanoseconds, 3> kPeriods{1s, 1min, 1h};
    const Limit limit =
        Limit::per(uniform(rng, 1, 20), kPeriods[static_cast<std::size_t>(uniform(rng, 0, 2))]);
    return Model::kBucket ? limit.withBurst(uniform(rng, 1, 30)) : limit;
}

}  // namespace

TEMPLATE_TEST_CASE("setLimit: right after a change a key has left what both limits leave it",
                   "[limit_change]", RATELIMIT_TEST_MODELS) {
    Rng rng(0x11'3117'c4a9'6eULL);
    for (int round = 0; round < 200; ++round) {
        const Limit before = randomLimit<TestType>(rng);
        const Limit after = randomLimit<TestType>(rng);
        INFO("round " << round << ": " << describe(before) << " to " << describe(after));
        ManualClock clock;
        MemoryLimiter<TestType> changed(before, MemoryStorage{}, clock);
        MemoryLimiter<TestType> kept(before, MemoryStorage{}, clock);  // the old limit's twin
        auto t = std::chrono::nanoseconds{uniform(rng, 0, std::int64_t{1} << 50)};
        const int calls = static_cast<int>(uniform(rng, 0, 12));
        for (int i = 0; i < calls; ++i) {
            t += randomForwardStep(rng, before);
            clock.set(t);
            const std::int64_t cost = randomCost(rng, capacityOf<TestType>(before));
            REQUIRE(changed.tryAcquire("key", cost).allowed ==
                    kept.tryAcquire("key", cost).allowed);
        }
        changed.setLimit(after);
        CHECK(changed.limit() == after);
        clock.set(t + 1us);
        const std::int64_t left = kept.peek("key", 0).remaining;
        const std::int64_t expected =
            before == after
                ? left
                : leftAfterChange(capacityOf<TestType>(before), left, capacityOf<TestType>(after));
        CHECK(changed.peek("key", 0).remaining == expected);
        // What it has left is what it is served at that instant, one at a time.
        std::int64_t served = 0;
        while (served <= capacityOf<TestType>(after) && changed.tryAcquire("key").allowed) {
            ++served;
        }
        CHECK(served == expected);
        // Once the old consumption has expired, the new limit applies in full.
        clock.set(t + 72h);
        CHECK(changed.peek("key", 0).remaining == capacityOf<TestType>(after));
        CHECK(kept.peek("key", 0).remaining == capacityOf<TestType>(before));
    }
}

TEST_CASE("setLimit: over the switch a window admits no more than the stricter limit",
          "[limit_change]") {
    ManualClock clock;
    ratelimit::FixedWindow<MemoryStorage, ManualClock> window(Limit::perMinute(10), MemoryStorage{},
                                                              clock);
    clock.set(10s);
    CHECK(send(window, 6, "k").first == 6);
    // Raised to 20 mid-window: the window holds 10 in all, as the old limit did.
    clock.set(30s);
    window.setLimit(Limit::perMinute(20));
    CHECK(send(window, 20, "k").first == 4);
    clock.set(60s);  // the next window has the new limit
    CHECK(send(window, 30, "k").first == 20);
    // Lowered to 5 with 3 used: 2 more in this window.
    clock.set(120s);
    CHECK(send(window, 3, "k").first == 3);
    window.setLimit(Limit::perMinute(5));
    clock.set(121s);
    CHECK(send(window, 10, "k").first == 2);
    const Decision refused = window.tryAcquire("k");
    CHECK_FALSE(refused.allowed);
    CHECK(refused.retryAfter == 59s);
}

TEST_CASE("setLimit: a bucket keeps its consumption and refills at the new rate",
          "[limit_change]") {
    ManualClock clock;
    ratelimit::TokenBucket<MemoryStorage, ManualClock> bucket(Limit::perMinute(10), MemoryStorage{},
                                                              clock);
    CHECK(send(bucket, 6, "k").first == 6);
    // 20 per minute with a burst of 20: the 10 the burst adds are spent, and come back with
    // the refill, one every 3 s from the key's next call, which carries it over.
    bucket.setLimit(Limit::perMinute(20));
    clock.set(1us);
    CHECK(send(bucket, 20, "k").first == 4);
    const Decision refused = bucket.tryAcquire("k");
    CHECK_FALSE(refused.allowed);
    CHECK(refused.retryAfter == 3s);
    clock.set(30s + 1us);
    CHECK(send(bucket, 20, "k").first == 10);
    // Lowered below what it holds: it has nothing left until it refills under the new rate.
    clock.set(24h);
    CHECK(send(bucket, 15, "k").first == 15);
    bucket.setLimit(Limit::perMinute(6).withBurst(4));
    clock.set(24h + 1us);
    const Decision empty = bucket.tryAcquire("k");
    CHECK_FALSE(empty.allowed);
    CHECK(empty.retryAfter == 10s);
}

TEST_CASE("setLimit: a tier's limit set carries each member over", "[limit_change][limit_set]") {
    using Set = LimitSet<TokenBucketModel, FixedWindowModel>;
    const Set::Limits free{Limit::perMinute(30).withBurst(10), Limit::perDay(1'000)};
    const Set::Limits pro{Limit::perMinute(300).withBurst(50), Limit::perDay(50'000)};
    ManualClock clock;
    MemoryLimiter<Set> limiter(free, MemoryStorage{}, clock);
    CHECK(send(limiter, 15, "api key").first == 10);
    limiter.setLimit(pro);
    clock.set(1s);
    Set::Decisions each;
    CHECK(limiter.tryAcquire("api key", 0, each).allowed);  // a zero cost carries nothing over
    // The minute's bucket had refilled half a token at 30 per minute: carried over as empty, as
    // free left it, then refilled at 300 per minute; the day keeps the 990 that the free tier
    // left, its window being the stricter until the day ends.
    CHECK(each[0].remaining == 0);
    CHECK(each[1].remaining == 990);
    CHECK_FALSE(limiter.tryAcquire("api key").allowed);  // this one carries it over
    clock.set(2s);
    (void)limiter.peek("api key", 0, each);
    CHECK(each[0].remaining == 5);
    CHECK(each[1].remaining == 990);
    clock.set(24h);
    (void)limiter.peek("api key", 0, each);
    CHECK(each[0].remaining == 50);
    CHECK(each[1].remaining == 50'000);
}

TEST_CASE(
    "setLimit: several changes before a key's next call carry it from the one it was "
    "made under",
    "[limit_change]") {
    ManualClock clock;
    ratelimit::FixedWindow<MemoryStorage, ManualClock> window(Limit::perHour(10), MemoryStorage{},
                                                              clock);
    CHECK(send(window, 4, "k").first == 4);
    window.setLimit(Limit::perHour(3));  // within one tick of the clock: three epochs
    window.setLimit(Limit::perHour(8));
    window.setLimit(Limit::perHour(12));
    // From 10 (4 used) straight to 12: 6 left, as the 10 left.
    CHECK(window.peek("k", 0).remaining == 6);
    CHECK(window.peek("other", 0).remaining == 12);
}

TEST_CASE("setLimit: limiters sharing a table all enforce the new limit", "[limit_change]") {
    ManualClock clock;
    const MemoryStorage storage;
    ratelimit::FixedWindow<MemoryStorage, ManualClock> first(Limit::perHour(10), storage, clock);
    const auto copy = first;
    first.setLimit(Limit::perHour(4));
    CHECK(copy.limit() == Limit::perHour(4));
    // A limiter of the same name now needs the new limit to share the keys.
    CHECK_THROWS_WITH(
        (ratelimit::FixedWindow<MemoryStorage, ManualClock>(Limit::perHour(10), storage, clock)),
        Catch::Matchers::Contains("another limit"));
    ratelimit::FixedWindow<MemoryStorage, ManualClock> joined(Limit::perHour(4), storage, clock);
    clock.set(1us);
    CHECK(send(first, 3, "k").first == 3);
    CHECK(send(joined, 3, "k").first == 1);
}

TEST_CASE("setLimit: a bad limit is refused, and the old one stays", "[limit_change]") {
    ManualClock clock;
    ratelimit::TokenBucket<MemoryStorage, ManualClock> bucket(Limit::perMinute(5), MemoryStorage{},
                                                              clock);
    Limit bad = Limit::perMinute(5);
    bad.count = 0;
    CHECK_THROWS_WITH(bucket.setLimit(bad), Catch::Matchers::Contains("Limit.count"));
    bad = Limit::perMinute(5);
    bad.period = 0ns;
    CHECK_THROWS_WITH(bucket.setLimit(bad), Catch::Matchers::Contains("Limit.period"));
    CHECK(bucket.limit() == Limit::perMinute(5));
    LimiterOptions spread;
    spread.spreadWindowResets = true;
    ratelimit::FixedWindow<MemoryStorage, ManualClock> phased(Limit::perMinute(5), MemoryStorage{},
                                                              clock, spread);
    CHECK_THROWS_WITH(phased.setLimit(Limit::perMinute(6)),
                      Catch::Matchers::Contains("spreadWindowResets"));
}

TEMPLATE_TEST_CASE(
    "setLimit: changes under 8 threads never admit more than the larger limit "
    "at one instant",
    "[limit_change][concurrency]", FixedWindowModel, TokenBucketModel) {
    for (int round = 0; round < 20; ++round) {
        ManualClock clock;
        clock.set(1h);
        MemoryLimiter<TestType> limiter(Limit::perDay(10), MemoryStorage{}, clock);
        std::atomic<std::int64_t> admitted{0};
        std::atomic<bool> done{false};
        std::latch start(9);
        std::vector<std::thread> threads;
        threads.reserve(8);
        for (int t = 0; t < 8; ++t) {
            threads.emplace_back([&] {
                start.arrive_and_wait();
                for (int i = 0; i < 200; ++i) {
                    admitted += limiter.tryAcquire("hot").allowed ? 1 : 0;
                }
            });
        }
        std::thread changer([&] {
            start.arrive_and_wait();
            for (int i = 0; i < 400 && !done.load(); ++i) {
                limiter.setLimit(Limit::perDay(i % 2 == 0 ? 20 : 10));
                std::this_thread::yield();
            }
        });
        for (std::thread& t : threads) {
            t.join();
        }
        done = true;
        changer.join();
        // Time stands still (each change moves the epochs one tick): the key never has more
        // than the larger limit in all. (Each change carries its consumption over toward fewer
        // admissions, so flapping between two limits may leave it fewer than the smaller.)
        CHECK(admitted.load() >= 1);
        CHECK(admitted.load() <= 20);
    }
}

}  // namespace ratelimit_test
