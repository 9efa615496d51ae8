// Tests of the leaky bucket as a meter, GCRA (include/ratelimit/algorithms/leaky_bucket.hpp),
// through the public limiter, driven by ManualClock only; and the design's promise that it makes
// exactly the token bucket's decisions while the clock moves forward.

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

namespace {

using namespace std::chrono_literals;
using ratelimit::Decision;
using ratelimit::Limit;
using ratelimit::ManualClock;
using rltest::at;
using rltest::Nanos;
using Leaky = ratelimit::LeakyBucket<ratelimit::MemoryStorage, ratelimit::ManualClock>;
using Token = ratelimit::TokenBucket<ratelimit::MemoryStorage, ratelimit::ManualClock>;

static_assert(
    std::is_same_v<ratelimit::Gcra<ratelimit::MemoryStorage, ratelimit::ManualClock>, Leaky>,
    "Gcra is another name for LeakyBucket");

std::pair<int, Decision> send(Leaky& limiter, int n, std::string_view key = "client") {
    int allowed = 0;
    Decision last;
    for (int i = 0; i < n; ++i) {
        last = limiter.tryAcquire(key);
        allowed += last.allowed ? 1 : 0;
    }
    return {allowed, last};
}

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
        if (rltest::representable(limit)) {
            return limit;
        }
    }
}

/// Replays the same random calls on a leaky and a token bucket with a forward clock and
/// requires equal decisions, every field.
void holdAgainstTokenBucket(const Limit& limit, std::uint64_t seed, int calls) {
    ManualClock clock;
    auto leaky = rltest::makeLimiter<Leaky>(limit, clock);
    auto token = rltest::makeLimiter<Token>(limit, clock);
    std::mt19937_64 rng(seed);
    const std::array<std::string, 3> keys = {"a", "b", "c"};
    auto now = at(Nanos{std::uniform_int_distribution<std::int64_t>(-1'000'000'000'000'000,
                                                                    1'000'000'000'000'000)(rng)});
    int admitted = 0;
    int refused = 0;
    for (int i = 0; i < calls; ++i) {
        now += rltest::randomForwardStep(rng, limit);
        const std::string& key = keys.at(std::uniform_int_distribution<std::size_t>(0, 2)(rng));
        const std::int64_t cost = rltest::randomCost(rng, limit.burst);
        const bool peekOnly = std::uniform_int_distribution<int>(0, 9)(rng) == 0;
        const Decision l = peekOnly ? leaky.peek(key, cost, now) : leaky.tryAcquire(key, cost, now);
        const Decision t = peekOnly ? token.peek(key, cost, now) : token.tryAcquire(key, cost, now);
        RLTEST_REQUIRE(l == t, rltest::describe(limit) + " seed " + std::to_string(seed) +
                                   " call " + std::to_string(i) + " key " + key + " at " +
                                   std::to_string(rltest::ticks(now)) + "ns cost " +
                                   std::to_string(cost) + (peekOnly ? " (peek)" : "") + ": leaky " +
                                   rltest::describe(l) + ", token " + rltest::describe(t));
        admitted += l.allowed ? 1 : 0;
        refused += l.allowed ? 0 : 1;
    }
    INFO(rltest::describe(limit) + " seed " + std::to_string(seed));
    CHECK(admitted + refused == calls);
    CHECK(admitted > 0);
    CHECK(refused > 0);
}

}  // namespace

TEST_CASE("LeakyBucket: a burst, a half-minute and a refill of 10/min", "[leaky_bucket][memory]") {
    // Scenario 1 of the design: the token bucket's numbers.
    ManualClock clock;
    Leaky limiter{Limit::perMinute(10), {}, clock};
    const auto [burst, afterBurst] = send(limiter, 10);
    CHECK(burst == 10);
    CHECK(afterBurst.resetAfter == 60s);
    const Decision eleventh = limiter.tryAcquire("client");
    CHECK(!eleventh.allowed);
    CHECK(eleventh.retryAfter == 6s);
    clock.set(at(30s));
    CHECK(send(limiter, 5).first == 5);
    clock.set(at(1min + 10s));
    const auto [late, afterLate] = send(limiter, 5);
    CHECK(late == 5);
    CHECK(afterLate.remaining == 1);
    CHECK(afterLate.resetAfter == 50s);
    CHECK(limiter.peek("client", 0, at(2min)).remaining == 10);
    CHECK(limiter.peek("client", 0, at(2min - 1ns)).remaining == 9);
    CHECK(limiter.tryAcquire("client").allowed);
    const Decision dry = limiter.tryAcquire("client");
    CHECK(!dry.allowed);
    CHECK(dry.retryAfter == 2s);
}

TEST_CASE("LeakyBucket: five, five after 30 s and five after 40 s all pass at 10/min",
          "[leaky_bucket][memory]") {
    ManualClock clock;
    Leaky limiter{Limit::perMinute(10), {}, clock};
    CHECK(send(limiter, 5).first == 5);
    clock.set(at(30s));
    CHECK(send(limiter, 5).first == 5);
    clock.set(at(40s));
    const auto [n, last] = send(limiter, 5);
    CHECK(n == 5);
    CHECK(last.remaining == 1);
    CHECK(last.resetAfter == 50s);
}

TEST_CASE("LeakyBucket: 100 at 00:59 and 100 at 01:00 admit 101 at 100/min",
          "[leaky_bucket][memory]") {
    ManualClock clock;
    Leaky limiter{Limit::perMinute(100), {}, clock};
    clock.set(at(59s));
    CHECK(send(limiter, 100).first == 100);
    clock.set(at(60s));
    const auto [n, last] = send(limiter, 100);
    CHECK(n == 1);
    CHECK(last.retryAfter == 200ms);
}

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

TEST_CASE("LeakyBucket: a burst below the count caps the bucket, the count sets the rate",
          "[leaky_bucket][memory]") {
    ManualClock clock;
    Leaky limiter{Limit::perMinute(10).withBurst(3), {}, clock};
    const auto [n, last] = send(limiter, 5);
    CHECK(n == 3);
    CHECK(last.limit == 3);
    CHECK(last.retryAfter == 6s);
    CHECK(last.resetAfter == 18s);
    clock.set(at(12s));
    CHECK(send(limiter, 5).first == 2);
    clock.set(at(10min));
    CHECK(send(limiter, 10).first == 3);
    CHECK(limiter.tryAcquire("other", 4).never());
}

TEST_CASE("LeakyBucket: a denied request does not push the arrival time",
          "[leaky_bucket][memory]") {
    rltest::checkRefusalsConsumeNothing<Leaky>(Limit::perMinute(10));
    rltest::checkRefusalsConsumeNothing<Leaky>(Limit::per(3, 10s));
    rltest::checkRefusalsConsumeNothing<Leaky>(Limit::perSecond(7).withBurst(2));
}

TEST_CASE("LeakyBucket: a cost of zero is a peek", "[leaky_bucket][memory]") {
    rltest::checkCostZeroIsAPeek<Leaky>();
}

TEST_CASE("LeakyBucket: a cost above the burst is never allowed and consumes nothing",
          "[leaky_bucket][memory]") {
    rltest::checkImpossibleCosts<Leaky>(Limit::perMinute(10));
    rltest::checkImpossibleCosts<Leaky>(Limit::perMinute(10).withBurst(4));
    rltest::checkImpossibleCosts<Leaky>(Limit::perHour(999'999));
    rltest::checkImpossibleCosts<Leaky>(
        Limit::per(Limit::kMaxCount, 1ms).withBurst(Limit::kMaxCount));
}

TEST_CASE("LeakyBucket: a negative cost throws std::invalid_argument", "[leaky_bucket][memory]") {
    rltest::checkNegativeCostThrows<Leaky>();
}

TEST_CASE("LeakyBucket: the decision's limit is the burst", "[leaky_bucket][memory]") {
    rltest::checkLimitField<Leaky>();
}

TEST_CASE("LeakyBucket: any byte string is a key of its own", "[leaky_bucket][memory]") {
    rltest::checkKeysAreBytes<Leaky>();
}

TEST_CASE("LeakyBucket: reset forgets one key", "[leaky_bucket][memory]") {
    rltest::checkReset<Leaky>(Limit::perMinute(10).withBurst(4));
}

TEST_CASE("LeakyBucket: random traffic keeps every rule of a decision", "[leaky_bucket][memory]") {
    std::uint64_t seed = 11;
    for (const Limit& limit : rltest::sampleLimits()) {
        rltest::checkRandomTraffic<Leaky>(limit, seed++, 1500);
    }
}

TEST_CASE("LeakyBucket: makes exactly the token bucket's decisions while the clock moves forward",
          "[leaky_bucket][token_bucket][memory]") {
    std::uint64_t seed = 1000;
    for (const Limit& limit : rltest::sampleLimits()) {
        holdAgainstTokenBucket(limit, seed++, 3000);
    }
    std::mt19937_64 rng(2024);  // NOLINT(cert-msc32-c,cert-msc51-cpp): reproducible test data
    for (int i = 0; i < 150; ++i) {
        holdAgainstTokenBucket(randomLimit(rng), seed++, 1000);
    }
}

TEST_CASE("LeakyBucket: a clock stepping back admits nothing extra and waits at most one refill",
          "[leaky_bucket][memory]") {
    std::uint64_t seed = 200;
    for (const Limit limit :
         {Limit::perMinute(10), Limit::per(3, 10s), Limit::perHour(999'999),
          Limit::perSecond(7).withBurst(3), Limit::per(10, 90s).withBurst(20)}) {
        for (const auto step : {Nanos{1s}, Nanos{1h}, Nanos{24h}}) {
            rltest::checkStepBackAroundExhaustedKey<Leaky>(limit, step, seed++);
            rltest::checkStepBackKeepsRemaining<Leaky>(limit, step);
        }
    }
}

TEST_CASE("LeakyBucket: after a step back it admits what the token bucket admits",
          "[leaky_bucket][token_bucket][memory]") {
    // DESIGN.md: after a step back the two "may differ in wait, never in admissions".
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
    // waits may differ (DESIGN.md), the admissions may not; and each bucket's own
    // now + retryAfter passes.
    std::uint64_t seed = 3000;
    for (const Limit limit :
         {Limit::perMinute(10), Limit::per(3, 10s), Limit::perSecond(7).withBurst(3),
          Limit::perHour(999'999), Limit::per(10, 90s).withBurst(20)}) {
        ManualClock clock;
        auto leaky = rltest::makeLimiter<Leaky>(limit, clock);
        auto token = rltest::makeLimiter<Token>(limit, clock);
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
                return rltest::describe(limit) + " call " + std::to_string(i) + " at " +
                       std::to_string(rltest::ticks(now)) + "ns cost " + std::to_string(cost) +
                       ": leaky " + rltest::describe(l) + ", token " + rltest::describe(t);
            };
            RLTEST_REQUIRE(l.allowed == t.allowed, context());
            RLTEST_REQUIRE(l.remaining >= 0 && l.remaining <= limit.burst, context());
            if (!l.allowed) {
                RLTEST_REQUIRE(l.retryAfter <= rltest::longestWait<Leaky>(limit), context());
                RLTEST_REQUIRE(leaky.peek("k", cost, now + l.retryAfter).allowed, context());
                RLTEST_REQUIRE(token.peek("k", cost, now + t.retryAfter).allowed, context());
            }
            admitted += l.allowed ? 1 : 0;
        }
        INFO(rltest::describe(limit));
        CHECK(admitted > 0);
        CHECK(admitted < 20'000);
    }
}

TEST_CASE("LeakyBucket: works at both ends of the clock's range", "[leaky_bucket][memory]") {
    // Near time_point::max() the theoretical arrival time (now + burst intervals) is not
    // representable; the key must still get its burst and no more.
    rltest::checkClockRangeEnds<Leaky>(Limit::perMinute(10));
    rltest::checkClockRangeEnds<Leaky>(Limit::per(3, 10s).withBurst(5));
    rltest::checkClockRangeEnds<Leaky>(Limit::perHour(999'999));
}

namespace {

void noDrift(std::int64_t requests) {
    const std::int64_t share = requests / 6;
    std::uint64_t seed = 17;
    for (const Limit limit : {Limit::perSecond(7), Limit::per(3, 10s), Limit::perHour(999'999)}) {
        rltest::checkBucketNoDrift<Leaky>(limit, share, limit.burst - 1, seed++);
        rltest::checkBucketNoDrift<Leaky>(limit, share, limit.burst, seed++);
    }
    rltest::checkBucketNoDrift<Leaky>(Limit::perSecond(7).withBurst(20), share / 4, 19, seed++);
    rltest::checkBucketNoDrift<Leaky>(Limit::per(3, 10s).withBurst(1), share / 4, 1, seed++);
}

}  // namespace

TEST_CASE("LeakyBucket: a client retrying at retryAfter gets exactly the rate, no drift",
          "[leaky_bucket][memory]") {
    noDrift(10'000'000);  // over 10^7 requests in all
}

TEST_CASE("LeakyBucket: a limit beyond the 2^62 unit bound is refused at construction",
          "[leaky_bucket][memory]") {
    ManualClock clock;
    const Limit tooBig =
        Limit::per(1, std::chrono::nanoseconds{std::int64_t{1} << 14}).withBurst(Limit::kMaxCount);
    try {
        Leaky limiter{tooBig, {}, clock};
        FAIL("constructed a limiter for " << rltest::describe(tooBig));
    } catch (const std::invalid_argument& e) {
        const std::string what = e.what();
        INFO(what);
        CHECK(what.find("2^62") != std::string::npos);
        CHECK(what.find("burst") != std::string::npos);
    }
    CHECK_NOTHROW(Leaky{Limit::per(1, std::chrono::nanoseconds{(std::int64_t{1} << 14) - 1})
                            .withBurst(Limit::kMaxCount),
                        {},
                        clock});
}

TEST_CASE("LeakyBucket: the unit bound names the largest accepted burst",
          "[leaky_bucket][memory]") {
    // 2^20 per (2^42 + 1) ns: gcd 1, so one token is 2^42 + 1 units and the capacity is
    // burst·(2^42 + 1) units, while the longest span (burst·period/count) stays near 2^42 ticks:
    // only the unit bound applies. The largest burst below 2^62 units is 1048575.
    ManualClock clock;
    const Limit base =
        Limit::per(std::int64_t{1} << 20, std::chrono::nanoseconds{(std::int64_t{1} << 42) + 1});
    const std::string what = [&] {
        try {
            Leaky limiter{base.withBurst(1048576), {}, clock};
        } catch (const std::invalid_argument& e) {
            return std::string(e.what());
        }
        return std::string("<accepted>");
    }();
    INFO(what);
    CHECK(what.find("2^62") != std::string::npos);
    CHECK(what.find("burst") != std::string::npos);
    CHECK(what.find("1048575") != std::string::npos);
    Leaky largest{base.withBurst(1048575), {}, clock};
    REQUIRE(largest.tryAcquire("k", 1048575).allowed);
    // A token takes (2^42 + 1) / 2^20 = 4194304.000001 ns: the first after 4194305 ns.
    const Decision d = largest.tryAcquire("k");
    CHECK(d.retryAfter == 4194305ns);
    CHECK(largest.peek("k", 0, at(4194304ns)).remaining == 0);
    CHECK(largest.peek("k", 0, at(4194305ns)).remaining == 1);
}

TEST_CASE("LeakyBucket: extreme accepted limits compute without overflow",
          "[leaky_bucket][memory]") {
    ManualClock clock;
    const std::int64_t period = (std::int64_t{1} << 14) - 1;
    const Limit limit =
        Limit::per(Limit::kMaxCount, std::chrono::nanoseconds{period}).withBurst(Limit::kMaxCount);
    Leaky limiter{limit, {}, clock};
    REQUIRE(limiter.tryAcquire("k", Limit::kMaxCount).allowed);
    for (const std::int64_t t : {std::int64_t{1}, std::int64_t{1000}, period - 1, period}) {
        INFO("t = " << t << "ns");
        const rltest::Int128 tokens = rltest::Int128{t} * Limit::kMaxCount / period;
        const Decision d = limiter.peek("k", 0, at(std::chrono::nanoseconds{t}));
        CHECK(d.remaining == static_cast<std::int64_t>(tokens));
        CHECK(d.resetAfter.count() == period - t);
    }
    const Decision half = limiter.tryAcquire("k", Limit::kMaxCount / 2);
    CHECK(half.retryAfter == 8192ns);
    CHECK(!limiter.tryAcquire("k", Limit::kMaxCount / 2, at(8191ns)).allowed);
    CHECK(limiter.tryAcquire("k", Limit::kMaxCount / 2, at(8192ns)).allowed);
}
