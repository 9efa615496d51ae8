// Tests of the leaky bucket as a meter, GCRA (include/ratelimit/algorithms/leaky_bucket.hpp),
// through the public limiter, driven by ManualClock only: its own scenarios, and the promise of
// docs/semantics.md that it makes exactly the token bucket's decisions while the clock moves
// forward (and the same admissions when it steps back). What every algorithm does (and the worked
// scenarios) is in contract_test.cpp, what both buckets do in its "Buckets:" cases.

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <type_traits>
#include <utility>

#include <ratelimit/algorithms/leaky_bucket.hpp>

#include "algorithms/common.hpp"
#include "support/catch.hpp"
#include "support/random_traffic.hpp"

using namespace std::chrono_literals;

namespace ratelimit_test {

namespace {

using Leaky = MemoryLeakyBucket;
using Token = MemoryTokenBucket;

static_assert(
    std::is_same_v<ratelimit::Gcra<ratelimit::MemoryStorage, ratelimit::ManualClock>, Leaky>,
    "Gcra is another name for LeakyBucket");

/// A random accepted limit: counts from 1 to 2^48, periods from 1 ns to days in every unit,
/// bursts equal to, below and above the count.
Limit randomLimit(std::mt19937_64& rng) {
    const auto uniform = [&](std::int64_t lo, std::int64_t hi) {
        return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
    };
    for (;;) {
        const int countKind = static_cast<int>(uniform(0, 9));
        const std::int64_t count = countKind < 4   ? uniform(1, 20)
                                   : countKind < 8 ? uniform(1, 1'000'000)
                                                   : uniform(1, Limit::kMaxCount);
        static constexpr std::array<std::int64_t, 7> kUnits = {1,
                                                               1'000,
                                                               1'000'000,
                                                               1'000'000'000,
                                                               60'000'000'000,
                                                               3'600'000'000'000,
                                                               86'400'000'000'000};
        const std::int64_t unitKind = uniform(0, 7);
        const std::int64_t period =
            unitKind == 7 ? uniform(1, 1'000'000'000'000)
                          : kUnits.at(static_cast<std::size_t>(unitKind)) * uniform(1, 100);
        const int burstKind = static_cast<int>(uniform(0, 9));
        const std::int64_t burst = burstKind < 3   ? count
                                   : burstKind < 6 ? uniform(1, count)
                                   : burstKind < 8
                                       ? std::min(Limit::kMaxCount, count * uniform(1, 4))
                                       : uniform(1, 1 << 20);
        const Limit limit = Limit::per(count, Nanos{period}).withBurst(burst);
        if (representable(limit)) {
            return limit;
        }
    }
}

/// Replays the same random calls on a leaky and a token bucket with a forward clock and
/// requires equal decisions, every field.
void holdAgainstTokenBucket(const Limit& limit, std::uint64_t seed, int calls) {
    ManualClock clock;
    auto leaky = makeLimiter<Leaky>(limit, clock);
    auto token = makeLimiter<Token>(limit, clock);
    std::mt19937_64 rng(seed);
    const std::array<std::string, 3> keys = {"a", "b", "c"};
    auto now = at(Nanos{std::uniform_int_distribution<std::int64_t>(-1'000'000'000'000'000,
                                                                    1'000'000'000'000'000)(rng)});
    int admitted = 0;
    int refused = 0;
    for (int i = 0; i < calls; ++i) {
        now += randomForwardStep(rng, limit);
        const std::string& key = keys.at(std::uniform_int_distribution<std::size_t>(0, 2)(rng));
        const std::int64_t cost = randomCost(rng, limit.burst);
        const bool peekOnly = std::uniform_int_distribution<int>(0, 9)(rng) == 0;
        const Decision l = peekOnly ? leaky.peek(key, cost, now) : leaky.tryAcquire(key, cost, now);
        const Decision t = peekOnly ? token.peek(key, cost, now) : token.tryAcquire(key, cost, now);
        RLTEST_REQUIRE(l == t, describe(limit) + " seed " + std::to_string(seed) + " call " +
                                   std::to_string(i) + " key " + key + " at " +
                                   std::to_string(ticks(now)) + "ns cost " + std::to_string(cost) +
                                   (peekOnly ? " (peek)" : "") + ": leaky " + describe(l) +
                                   ", token " + describe(t));
        admitted += l.allowed ? 1 : 0;
        refused += l.allowed ? 0 : 1;
    }
    INFO(describe(limit) + " seed " + std::to_string(seed));
    CHECK(admitted + refused == calls);
    CHECK(admitted > 0);
    CHECK(refused > 0);
}

}  // namespace

TEST_CASE("LeakyBucket: the emission interval of 3 per 10 s is never rounded",
          "[leaky_bucket][memory]") {
    // 10/3 s = 3.333... s. With the burst taken at 0, cells fall due at 10/3 s, 20/3 s and
    // exactly 10 s (a rounded interval would drift by a tick per cell).
    ManualClock clock;
    Leaky limiter{Limit::per(3, 10s), {}, clock};
    REQUIRE(limiter.tryAcquire("k", 3).allowed);
    const Decision d = limiter.tryAcquire("k");
    CHECK(d.retryAfter == 3333333334ns);  // ceil(10 s / 3)
    CHECK(!limiter.tryAcquire("k", 1, at(3333333333ns)).allowed);
    CHECK(limiter.tryAcquire("k", 1, at(3333333334ns)).allowed);
    CHECK(!limiter.tryAcquire("k", 1, at(6666666666ns)).allowed);
    CHECK(limiter.tryAcquire("k", 1, at(6666666667ns)).allowed);
    CHECK(!limiter.tryAcquire("k", 1, at(10s - 1ns)).allowed);
    CHECK(limiter.tryAcquire("k", 1, at(10s)).allowed);
    CHECK(limiter.peek("k", 0, at(10s)).resetAfter == 10s);
    CHECK(limiter.peek("k", 0, at(20s)).remaining == 3);
}

TEST_CASE("LeakyBucket: makes exactly the token bucket's decisions while the clock moves forward",
          "[leaky_bucket][token_bucket][memory]") {
    std::uint64_t seed = 1000;
    for (const Limit& limit : sampleLimits()) {
        holdAgainstTokenBucket(limit, seed++, 3000);
    }
    std::mt19937_64 rng(2024);  // NOLINT(cert-msc32-c,cert-msc51-cpp): reproducible test data
    for (int i = 0; i < 150; ++i) {
        holdAgainstTokenBucket(randomLimit(rng), seed++, 1000);
    }
}

TEST_CASE("LeakyBucket: after a step back it admits what the token bucket admits",
          "[leaky_bucket][token_bucket][memory]") {
    // docs/semantics.md: after a step back the two "may differ in wait, never in admissions".
    // 10/min; four taken at 10:00:00, then the clock steps back by 1 s, 1 h and 1 day.
    for (const auto step : {Nanos{1s}, Nanos{1h}, Nanos{24h}}) {
        INFO("step back " << step.count() << "ns");
        ManualClock clock;
        Leaky leaky{Limit::perMinute(10), {}, clock};
        Token token{Limit::perMinute(10), {}, clock};
        clock.set(at(10h));
        REQUIRE(leaky.tryAcquire("k", 4).allowed);
        REQUIRE(token.tryAcquire("k", 4).allowed);
        clock.set(at(10h) - step);
        int leakyAdmitted = 0;
        int tokenAdmitted = 0;
        Decision lastLeaky;
        for (int i = 0; i < 20; ++i) {
            lastLeaky = leaky.tryAcquire("k");
            leakyAdmitted += lastLeaky.allowed ? 1 : 0;
            tokenAdmitted += token.tryAcquire("k").allowed ? 1 : 0;
        }
        CHECK(tokenAdmitted == 6);  // no refill: what was left before the step
        CHECK(leakyAdmitted == tokenAdmitted);
        // Waits: at most one refill from empty, and the wait it names is honoured.
        CHECK(!lastLeaky.allowed);
        CHECK(lastLeaky.retryAfter <= 60s);
        CHECK(leaky.tryAcquire("k", 1, clock.now() + lastLeaky.retryAfter).allowed);
    }
}

TEST_CASE("LeakyBucket: with a clock that steps back it still admits exactly as the token bucket",
          "[leaky_bucket][token_bucket][memory]") {
    // Random traffic where one call in ten steps the clock back by up to two periods: the
    // waits may differ (docs/semantics.md), the admissions may not; and each bucket's own
    // now + retryAfter passes. With a late-call tolerance of 0 every step back is a clock step;
    // by default the steps of up to 1 s are late calls, whose waits count from their own time.
    std::uint64_t seed = 3000;
    const LimiterOptions rebaseAll{.lateCallTolerance = 0ns};
    for (const auto& limitAndOptions :
         {std::pair{Limit::perMinute(10), rebaseAll}, std::pair{Limit::per(3, 10s), rebaseAll},
          std::pair{Limit::perSecond(7).withBurst(3), rebaseAll},
          std::pair{Limit::perHour(999'999), rebaseAll},
          std::pair{Limit::per(10, 90s).withBurst(20), rebaseAll},
          std::pair{Limit::perSecond(7).withBurst(3), LimiterOptions{}},
          std::pair{Limit::per(3, 2s), LimiterOptions{}}}) {
        // Named, not a structured binding: clang 14 cannot capture one in the lambda below.
        const Limit& limit = limitAndOptions.first;
        const LimiterOptions& options = limitAndOptions.second;
        ManualClock clock;
        auto leaky = makeLimiter<Leaky>(limit, clock, options);
        auto token = makeLimiter<Token>(limit, clock, options);
        std::mt19937_64 rng(seed++);
        auto now = at(std::chrono::hours{1000});
        const std::int64_t period = limit.period.count();
        int admitted = 0;
        for (int i = 0; i < 20'000; ++i) {
            if (std::uniform_int_distribution<int>(0, 9)(rng) == 0) {
                now -= Nanos{std::uniform_int_distribution<std::int64_t>(1, 2 * period)(rng)};
            } else {
                now += Nanos{
                    std::uniform_int_distribution<std::int64_t>(0, 2 * period / limit.count)(rng)};
            }
            const std::int64_t cost =
                std::uniform_int_distribution<std::int64_t>(1, limit.burst)(rng);
            const Decision l = leaky.tryAcquire("k", cost, now);
            const Decision t = token.tryAcquire("k", cost, now);
            const auto context = [&] {
                return describe(limit) + " call " + std::to_string(i) + " at " +
                       std::to_string(ticks(now)) + "ns cost " + std::to_string(cost) + ": leaky " +
                       describe(l) + ", token " + describe(t);
            };
            RLTEST_REQUIRE(l.allowed == t.allowed, context());
            RLTEST_REQUIRE(l.remaining >= 0 && l.remaining <= limit.burst, context());
            if (!l.allowed) {
                RLTEST_REQUIRE(l.retryAfter <= longestWait<ratelimit::LeakyBucketModel>(limit) +
                                                   options.lateCallTolerance,
                               context());
                RLTEST_REQUIRE(leaky.peek("k", cost, now + l.retryAfter).allowed, context());
                RLTEST_REQUIRE(token.peek("k", cost, now + t.retryAfter).allowed, context());
            }
            admitted += l.allowed ? 1 : 0;
        }
        INFO(describe(limit));
        CHECK(admitted > 0);
        CHECK(admitted < 20'000);
    }
}

}  // namespace ratelimit_test
