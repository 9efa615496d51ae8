// Tests of include/ratelimit/any_limiter.hpp: an AnyLimiter makes exactly the decisions of the
// Limiter it wraps, for every algorithm chosen by name, and copies share one limiter.

#include <array>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>

#include <ratelimit/any_limiter.hpp>
#include <ratelimit/clock.hpp>
#include <ratelimit/storage/memory.hpp>

#include "support/catch.hpp"

using namespace std::chrono_literals;

namespace {

using ratelimit::Algorithm;
using ratelimit::AnyLimiter;
using ratelimit::Limit;
using ratelimit::ManualClock;
using ratelimit::MemoryStorage;

constexpr std::array kAll{Algorithm::kFixedWindow, Algorithm::kSlidingLog,
                          Algorithm::kSlidingCounter, Algorithm::kTokenBucket,
                          Algorithm::kLeakyBucket};

template <class Model>
void checkSameDecisions(Algorithm algorithm) {
    const Limit limit = Limit::per(5, 10s).withBurst(3);
    ManualClock clockA;
    ManualClock clockB;
    ratelimit::Limiter<Model, MemoryStorage, ManualClock> direct{limit, MemoryStorage{}, clockA};
    AnyLimiter erased = AnyLimiter::make(algorithm, limit, MemoryStorage{}, clockB);
    REQUIRE(erased.algorithm() == algorithm);
    REQUIRE(erased.limit() == limit);
    for (int i = 0; i < 40; ++i) {
        const std::int64_t cost = i % 3;
        const std::string key = "k" + std::to_string(i % 2);
        REQUIRE(erased.peek(key, cost) == direct.peek(key, cost));
        REQUIRE(erased.tryAcquire(key, cost) == direct.tryAcquire(key, cost));
        clockA.advance(700ms);
        clockB.advance(700ms);
    }
    erased.reset("k0");
    direct.reset("k0");
    REQUIRE(erased.tryAcquire("k0") == direct.tryAcquire("k0"));
}

}  // namespace

TEST_CASE("AnyLimiter: decides exactly as the Limiter of the algorithm it was made for",
          "[any_limiter]") {
    checkSameDecisions<ratelimit::FixedWindowModel>(Algorithm::kFixedWindow);
    checkSameDecisions<ratelimit::SlidingLogModel>(Algorithm::kSlidingLog);
    checkSameDecisions<ratelimit::SlidingCounterModel>(Algorithm::kSlidingCounter);
    checkSameDecisions<ratelimit::TokenBucketModel>(Algorithm::kTokenBucket);
    checkSameDecisions<ratelimit::LeakyBucketModel>(Algorithm::kLeakyBucket);
}

TEST_CASE("AnyLimiter: wraps a limiter object, and copies share its keys", "[any_limiter]") {
    ManualClock clock;
    AnyLimiter a{ratelimit::SlidingLog<MemoryStorage, ManualClock>{Limit::perMinute(2), {}, clock}};
    AnyLimiter b = a;
    REQUIRE(a.tryAcquire("x"));
    REQUIRE(b.tryAcquire("x"));
    const ratelimit::Decision refused = a.tryAcquire("x");
    REQUIRE_FALSE(refused);
    REQUIRE(refused.retryAfter == 60s);
    REQUIRE(b.algorithm() == Algorithm::kSlidingLog);
}

TEST_CASE("AnyLimiter: names of the algorithms round-trip; unknown names are nullopt",
          "[any_limiter]") {
    for (const Algorithm a : kAll) {
        REQUIRE(ratelimit::parseAlgorithm(ratelimit::toString(a)) == a);
    }
    REQUIRE(ratelimit::parseAlgorithm("gcra") == Algorithm::kLeakyBucket);
    REQUIRE(ratelimit::parseAlgorithm("token-bucket") == Algorithm::kTokenBucket);
    REQUIRE_FALSE(ratelimit::parseAlgorithm("TokenBucket").has_value());
    REQUIRE_FALSE(ratelimit::parseAlgorithm("").has_value());
    const Limit limit = Limit::perMinute(10).withBurst(3);
    REQUIRE(ratelimit::capacity(Algorithm::kLeakyBucket, limit) == 3);
    REQUIRE(ratelimit::capacity(Algorithm::kTokenBucket, limit) == 3);
    REQUIRE(ratelimit::capacity(Algorithm::kSlidingCounter, limit) == 10);
    REQUIRE(ratelimit::capacity(Algorithm::kFixedWindow, limit) == 10);
    REQUIRE(ratelimit::capacity(Algorithm::kSlidingLog, limit) == 10);
}

TEST_CASE("AnyLimiter: bad configuration throws from make, naming the field", "[any_limiter]") {
    ratelimit::LimiterOptions options;
    options.maxRunsPerKey = 0;
    REQUIRE_THROWS_WITH(
        AnyLimiter::make(Algorithm::kSlidingLog, Limit::perSecond(1), MemoryStorage{}, options),
        Catch::Matchers::Contains("maxRunsPerKey"));
    REQUIRE_THROWS_AS(
        AnyLimiter::make(static_cast<Algorithm>(42), Limit::perSecond(1), MemoryStorage{}),
        std::invalid_argument);
}
