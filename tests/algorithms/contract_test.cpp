// The contract suite over the memory storage: every rule of docs/semantics.md ("Semantics every
// algorithm keeps") checked for the five limiters (contract_cases.hpp, shared with the Redis
// run in redis_contract_test.cpp), the rules only the memory storage can be held to, and what
// the two buckets share. Each algorithm's own file keeps only its own scenarios.

#include "algorithms/contract.hpp"

#include <chrono>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <ratelimit/algorithms/leaky_bucket.hpp>
#include <ratelimit/algorithms/token_bucket.hpp>

#include "algorithms/common.hpp"
#include "support/catch.hpp"
#include "support/limiters.hpp"

#define RATELIMIT_TEST_CONTRACT_LIMITERS ratelimit_test::MemoryLimiters
#define RATELIMIT_TEST_CONTRACT_FIXTURE ratelimit_test::MemoryFixture
#define RATELIMIT_TEST_CONTRACT_STORAGE "[memory]"
#include "algorithms/contract_cases.hpp"

using namespace std::chrono_literals;

namespace ratelimit_test {

// Memory only: Redis counts times below 2^53 µs, far inside the clock's range. Near
// time_point::max() the leaky bucket's theoretical arrival time (now + burst intervals) is not
// representable; every key must still get its capacity and no more.
TEMPLATE_LIST_TEST_CASE("Contract: works at both ends of the clock's range", "[contract][memory]",
                        MemoryLimiters) {
    runContract<MemoryFixture, TestType>([](auto& f) { checkClockRangeEnds(f); });
}

// =============================================================================================
// What the two buckets share. The leaky bucket (GCRA) is the token bucket's meter in another
// encoding and makes its decisions while the clock moves forward, so both run every check here.
// =============================================================================================

namespace {

/// No drift in the buckets: a saturating client that asks random costs in 1..maxCost and, when
/// refused, retries exactly at now + retryAfter. The expectation is an exact rational model kept
/// here in __int128 units where one token is `period` units and each tick refills `count` units
/// (no gcd, no rounding). Every decision matches it, admissions never run ahead of
/// burst + floor(t·count/period), and while the model never had to cap a refill (always, when
/// maxCost < burst and the rate is below one token per tick) every admission after a wait brings
/// the total to exactly burst + floor(t·count/period).
template <class L>
void checkBucketNoDrift(const Limit& limit, std::int64_t requests, std::int64_t maxCost,
                        std::uint64_t seed) {
    ManualClock clock;
    auto limiter = makeLimiter<L>(limit, clock);
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<std::int64_t> costs(1, maxCost);
    const Int128 count = limit.count;
    const Int128 period = limit.period.count();
    const Int128 burst = limit.burst;
    const Int128 capacity = burst * period;
    Int128 level = capacity;
    Int128 admitted = 0;
    std::int64_t t = 0;
    std::int64_t cost = costs(rng);
    std::int64_t admissionsAfterWait = 0;
    bool waited = false;
    bool capped = false;
    const auto context = [&](std::int64_t i, const Decision& d) {
        return describe(limit) + " request " + std::to_string(i) + " at " + std::to_string(t) +
               "ns cost " + std::to_string(cost) + " admitted so far " +
               std::to_string(static_cast<std::int64_t>(admitted)) + " -> " + describe(d);
    };
    for (std::int64_t i = 0; i < requests; ++i) {
        const Decision d = limiter.tryAcquire("client", cost, at(Nanos{t}));
        const bool allowed = level >= Int128{cost} * period;
        RLTEST_REQUIRE(d.allowed == allowed, context(i, d));
        if (allowed) {
            level -= Int128{cost} * period;
            admitted += cost;
            const Int128 ideal = burst + Int128{t} * count / period;
            RLTEST_REQUIRE(admitted <= ideal, context(i, d));
            if (waited && !capped) {
                RLTEST_REQUIRE(
                    admitted == ideal,
                    context(i, d) + " ideal " + std::to_string(static_cast<std::int64_t>(ideal)));
                ++admissionsAfterWait;
            }
            RLTEST_REQUIRE(d.remaining == level / period, context(i, d));
            RLTEST_REQUIRE(d.resetAfter.count() == ceilDiv(capacity - level, count), context(i, d));
            cost = costs(rng);
            waited = false;
        } else {
            const Int128 wait = ceilDiv(Int128{cost} * period - level, count);
            RLTEST_REQUIRE(d.retryAfter.count() == wait, context(i, d));
            RLTEST_REQUIRE(d.remaining == level / period, context(i, d));
            RLTEST_REQUIRE(d.resetAfter.count() == ceilDiv(capacity - level, count), context(i, d));
            RLTEST_REQUIRE(wait <= Int128{kInt64Max} - t, context(i, d));
            t += static_cast<std::int64_t>(wait);
            level += wait * count;
            if (level > capacity) {
                level = capacity;
                capped = true;
            }
            waited = true;
        }
    }
    INFO(describe(limit) + " admitted " + std::to_string(static_cast<std::int64_t>(admitted)) +
         " cost units by " + std::to_string(t) + "ns");
    CHECK(admitted <= burst + Int128{t} * count / period);
    CHECK(admitted >= Int128{requests / 2});
    if (maxCost < limit.burst && limit.count < limit.period.count()) {
        CHECK(!capped);
        CHECK(admissionsAfterWait >= requests / 2 - limit.burst - 1);
    }
}

}  // namespace

TEMPLATE_TEST_CASE("Buckets: a burst below the count caps the bucket, the count sets the rate",
                   "[token_bucket][leaky_bucket][memory]", MemoryTokenBucket, MemoryLeakyBucket) {
    ManualClock clock;
    TestType limiter{Limit::perMinute(10).withBurst(3), {}, clock};
    const auto [n, last] = send(limiter, 5);
    CHECK(n == 3);
    CHECK(last.limit == 3);
    CHECK(last.retryAfter == 6s);
    CHECK(last.resetAfter == 18s);
    clock.set(at(12s));  // 2 tokens
    CHECK(send(limiter, 5).first == 2);
    clock.set(at(10min));  // long idle: back to 3, not 10
    const Decision peek = limiter.peek("client", 0);
    CHECK(peek.remaining == 3);
    CHECK(peek.resetAfter == 0s);
    CHECK(send(limiter, 10).first == 3);
    // A cost above the burst can never pass, even though it is below the count.
    const Decision four = limiter.tryAcquire("other", 4);
    CHECK(!four.allowed);
    CHECK(four.never());
    CHECK(limiter.peek("other", 0).remaining == 3);
}

TEMPLATE_TEST_CASE(
    "Buckets: a burst above the count is available at once, then the count per "
    "period",
    "[token_bucket][leaky_bucket][memory]", MemoryTokenBucket, MemoryLeakyBucket) {
    ManualClock clock;
    TestType limiter{Limit::perMinute(10).withBurst(25), {}, clock};
    CHECK(send(limiter, 30).first == 25);
    clock.set(at(1min));
    CHECK(send(limiter, 30).first == 10);
    clock.set(at(2min + 30s));
    CHECK(send(limiter, 30).first == 15);
    CHECK(limiter.tryAcquire("x", 25).allowed);
    CHECK(limiter.tryAcquire("y", 26).never());
}

TEMPLATE_TEST_CASE("Buckets: a client retrying at retryAfter gets exactly the rate, no drift",
                   "[token_bucket][leaky_bucket][memory]", MemoryTokenBucket, MemoryLeakyBucket) {
    // Over 10^7 requests for each bucket, split over the rates docs/semantics.md names.
    constexpr std::int64_t kRequests = 10'000'000;
    const std::int64_t share = kRequests / 6;
    std::uint64_t seed = std::is_same_v<TestType, MemoryTokenBucket> ? 7 : 17;
    for (const Limit limit : {Limit::perSecond(7), Limit::per(3, 10s), Limit::perHour(999'999)}) {
        // Costs below the burst: the total is exactly burst + floor(t·count/period).
        checkBucketNoDrift<TestType>(limit, share, limit.burst - 1, seed++);
        // Costs up to the burst: exactly the rational model, never ahead of the formula.
        checkBucketNoDrift<TestType>(limit, share, limit.burst, seed++);
    }
    checkBucketNoDrift<TestType>(Limit::perSecond(7).withBurst(20), share / 4, 19, seed++);
    checkBucketNoDrift<TestType>(Limit::per(3, 10s).withBurst(1), share / 4, 1, seed++);
}

TEMPLATE_TEST_CASE("Buckets: a limit beyond the 2^62 unit bound is refused at construction",
                   "[token_bucket][leaky_bucket][memory]", MemoryTokenBucket, MemoryLeakyBucket) {
    ManualClock clock;
    // burst·period/gcd(count, period): 2^48 · 2^14 = 2^62 units.
    const Limit tooBig =
        Limit::per(1, std::chrono::nanoseconds{std::int64_t{1} << 14}).withBurst(Limit::kMaxCount);
    CHECK_THROWS_AS((TestType{tooBig, {}, clock}), std::invalid_argument);
    CHECK_THROWS_WITH((TestType{tooBig, {}, clock}), Contains("2^62") && Contains("burst"));
    // One nanosecond less is accepted.
    const Limit largest = Limit::per(1, std::chrono::nanoseconds{(std::int64_t{1} << 14) - 1})
                              .withBurst(Limit::kMaxCount);
    CHECK_NOTHROW(TestType{largest, {}, clock});
    // The gcd counts: 2^48 per 2^14 ns reduces to 2^34 per ns, 2^48 units.
    CHECK_NOTHROW(
        TestType{Limit::per(Limit::kMaxCount, std::chrono::nanoseconds{std::int64_t{1} << 14})
                     .withBurst(Limit::kMaxCount),
                 {},
                 clock});
    // Periods of a century with a large burst.
    CHECK_THROWS_AS(
        (TestType{
            Limit::per(1, std::chrono::hours{24 * 365 * 100}).withBurst(1'000'000), {}, clock}),
        std::invalid_argument);
    // 3 per 146 years: 4.604e18 units, below 2^62 = 4.612e18; 3 per 147 years is above.
    CHECK_NOTHROW(TestType{Limit::per(3, std::chrono::hours{24 * 365 * 146}), {}, clock});
    CHECK_THROWS_AS((TestType{Limit::per(3, std::chrono::hours{24 * 365 * 147}), {}, clock}),
                    std::invalid_argument);
}

TEMPLATE_TEST_CASE("Buckets: the unit bound names the largest accepted burst",
                   "[token_bucket][leaky_bucket][memory]", MemoryTokenBucket, MemoryLeakyBucket) {
    // 2^20 per (2^42 + 1) ns: gcd 1, so one token is 2^42 + 1 units and the capacity is
    // burst·(2^42 + 1) units, while the longest span (burst·period/count) stays near 2^42 ticks:
    // only the unit bound applies. The largest burst below 2^62 units is 1048575.
    ManualClock clock;
    const Limit base =
        Limit::per(std::int64_t{1} << 20, std::chrono::nanoseconds{(std::int64_t{1} << 42) + 1});
    CHECK_THROWS_AS((TestType{base.withBurst(1048576), {}, clock}), std::invalid_argument);
    CHECK_THROWS_WITH((TestType{base.withBurst(1048576), {}, clock}),
                      Contains("2^62") && Contains("burst") && Contains("1048575"));
    TestType largest{base.withBurst(1048575), {}, clock};
    REQUIRE(largest.tryAcquire("k", 1048575).allowed);
    // A token takes (2^42 + 1) / 2^20 = 4194304.000001 ns: the first after 4194305 ns.
    const Decision d = largest.tryAcquire("k");
    CHECK(d.retryAfter == 4194305ns);
    CHECK(largest.peek("k", 0, at(4194304ns)).remaining == 0);
    CHECK(largest.peek("k", 0, at(4194305ns)).remaining == 1);
}

TEMPLATE_TEST_CASE("Buckets: extreme accepted limits compute without overflow",
                   "[token_bucket][leaky_bucket][memory]", MemoryTokenBucket, MemoryLeakyBucket) {
    ManualClock clock;
    SECTION("2^48 per nanosecond, burst 2^48") {
        const Limit limit = Limit::per(Limit::kMaxCount, 1ns).withBurst(Limit::kMaxCount);
        TestType limiter{limit, {}, clock};
        const Decision all = limiter.tryAcquire("k", Limit::kMaxCount);
        CHECK(all.allowed);
        CHECK(all.remaining == 0);
        CHECK(all.resetAfter == 1ns);
        const Decision more = limiter.tryAcquire("k", Limit::kMaxCount);
        CHECK(!more.allowed);
        CHECK(more.retryAfter == 1ns);
        clock.advance(1ns);
        CHECK(limiter.tryAcquire("k", Limit::kMaxCount).allowed);
    }
    SECTION("2^48 per 16383 ns, burst 2^48: just below 2^62 units") {
        const std::int64_t period = (std::int64_t{1} << 14) - 1;
        const Limit limit = Limit::per(Limit::kMaxCount, std::chrono::nanoseconds{period})
                                .withBurst(Limit::kMaxCount);
        TestType limiter{limit, {}, clock};
        REQUIRE(limiter.tryAcquire("k", Limit::kMaxCount).allowed);
        // Tokens after t ns: floor(t·2^48/16383), computed in 128 bits.
        for (const std::int64_t t :
             {std::int64_t{1}, std::int64_t{2}, std::int64_t{1000}, period - 1, period}) {
            INFO("t = " << t << "ns");
            const Int128 tokens = Int128{t} * Limit::kMaxCount / period;
            const Decision d = limiter.peek("k", 0, at(std::chrono::nanoseconds{t}));
            CHECK(d.remaining == static_cast<std::int64_t>(tokens));
            CHECK(d.resetAfter.count() == period - t);
        }
        // A cost of 2^47 needs ceil(2^47·16383/2^48) = 8192 ns.
        const Decision half = limiter.tryAcquire("k", Limit::kMaxCount / 2);
        CHECK(!half.allowed);
        CHECK(half.retryAfter == 8192ns);
        CHECK(!limiter.tryAcquire("k", Limit::kMaxCount / 2, at(8191ns)).allowed);
        CHECK(limiter.tryAcquire("k", Limit::kMaxCount / 2, at(8192ns)).allowed);
    }
    SECTION("1 per 2^62 - 2 ns: the longest accepted refill") {
        // The bucket's longest span is burst·period/count + 1 ticks, below 2^62.
        const std::int64_t period = (std::int64_t{1} << 62) - 2;
        CHECK_THROWS_AS((TestType{Limit::per(1, std::chrono::nanoseconds{period + 1}), {}, clock}),
                        std::invalid_argument);
        const Limit limit = Limit::per(1, std::chrono::nanoseconds{period});
        TestType limiter{limit, {}, clock};
        clock.set(at(std::chrono::nanoseconds{std::int64_t{1} << 61}));
        REQUIRE(limiter.tryAcquire("k").allowed);
        const Decision d = limiter.tryAcquire("k");
        CHECK(!d.allowed);
        CHECK(d.retryAfter.count() == period);
        CHECK(d.resetAfter.count() == period);
        clock.advance(std::chrono::nanoseconds{period - 1});
        CHECK(!limiter.tryAcquire("k").allowed);
        clock.advance(1ns);
        CHECK(limiter.tryAcquire("k").allowed);
    }
    SECTION("huge times: 7/s near 2^62 ns, after an idle of 2^61 ns") {
        const Limit limit = Limit::perSecond(7);
        TestType limiter{limit, {}, clock};
        clock.set(at(std::chrono::nanoseconds{std::int64_t{1} << 61}));
        REQUIRE(limiter.tryAcquire("k", 7).allowed);
        clock.advance(std::chrono::nanoseconds{std::int64_t{1} << 61});
        const Decision d = limiter.tryAcquire("k", 7);
        CHECK(d.allowed);
        CHECK(d.resetAfter == 1s);
    }
}

}  // namespace ratelimit_test
