// Tests of the token bucket (include/ratelimit/algorithms/token_bucket.hpp) through the public
// limiter, driven by ManualClock only.

#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include <ratelimit/algorithms/token_bucket.hpp>

#include "algorithms/common.hpp"
#include "support/catch.hpp"

namespace {

using namespace std::chrono_literals;
using ratelimit::Decision;
using ratelimit::Limit;
using ratelimit::ManualClock;
using rltest::at;
using Bucket = ratelimit::TokenBucket<ratelimit::MemoryStorage, ratelimit::ManualClock>;

/// Sends `n` requests of cost 1 at the clock's time; returns how many were allowed and the
/// last decision.
std::pair<int, Decision> send(Bucket& limiter, int n, std::string_view key = "client") {
    int allowed = 0;
    Decision last;
    for (int i = 0; i < n; ++i) {
        last = limiter.tryAcquire(key);
        allowed += last.allowed ? 1 : 0;
    }
    return {allowed, last};
}

}  // namespace

TEST_CASE("TokenBucket: a burst, a half-minute and a refill of 10/min", "[token_bucket][memory]") {
    // Scenario 1 of the design: rule 10/min, empty at 00:00.
    ManualClock clock;
    Bucket limiter{Limit::perMinute(10), {}, clock};

    const auto [burst, afterBurst] = send(limiter, 10);
    CHECK(burst == 10);
    CHECK(afterBurst.remaining == 0);
    CHECK(afterBurst.resetAfter == 60s);  // 10 tokens at 6 s each
    const Decision eleventh = limiter.tryAcquire("client");
    CHECK(!eleventh.allowed);
    CHECK(eleventh.retryAfter == 6s);

    clock.set(at(30s));  // 5 tokens back
    const auto [half, afterHalf] = send(limiter, 5);
    CHECK(half == 5);
    CHECK(afterHalf.remaining == 0);
    CHECK(afterHalf.resetAfter == 60s);

    clock.set(at(1min + 10s));  // 40 s: 6.67 tokens back
    const auto [late, afterLate] = send(limiter, 5);
    CHECK(late == 5);
    CHECK(afterLate.allowed);
    CHECK(afterLate.remaining == 1);  // 1.67 tokens left, rounded down
    // Time to full: 8.33 tokens at 6 s each = 50 s exactly.
    CHECK(afterLate.resetAfter == 50s);
    CHECK(limiter.peek("client", 0, at(1min + 10s + 50s)).remaining == 10);
    CHECK(limiter.peek("client", 0, at(1min + 10s + 50s - 1ns)).remaining == 9);
    // The 1.67 tokens: one more now, then the next needs the missing third of a token (2 s).
    CHECK(limiter.tryAcquire("client").allowed);
    const Decision dry = limiter.tryAcquire("client");
    CHECK(!dry.allowed);
    CHECK(dry.retryAfter == 2s);
}

TEST_CASE("TokenBucket: five, five after 30 s and five after 40 s all pass at 10/min",
          "[token_bucket][memory]") {
    // Scenario 2 of the design, where the windows refuse the last five.
    ManualClock clock;
    Bucket limiter{Limit::perMinute(10), {}, clock};
    CHECK(send(limiter, 5).first == 5);
    clock.set(at(30s));
    CHECK(send(limiter, 5).first == 5);  // refilled to full (capped at 10), five used
    clock.set(at(40s));
    const auto [n, last] = send(limiter, 5);
    CHECK(n == 5);  // 5 + 10 s of refill = 6.67
    CHECK(last.remaining == 1);
    CHECK(last.resetAfter == 50s);
}

TEST_CASE("TokenBucket: 100 at 00:59 and 100 at 01:00 admit 101 at 100/min",
          "[token_bucket][memory]") {
    // Scenario 3 of the design: a bucket has no window edge to exploit.
    ManualClock clock;
    Bucket limiter{Limit::perMinute(100), {}, clock};
    clock.set(at(59s));
    CHECK(send(limiter, 100).first == 100);
    clock.set(at(60s));  // 1 s of refill = 1.67 tokens
    const auto [n, last] = send(limiter, 100);
    CHECK(n == 1);
    CHECK(!last.allowed);
    CHECK(last.remaining == 0);
    CHECK(last.retryAfter == 200ms);  // from 0.67 to 1 token at 0.6 s per token
}

TEST_CASE("TokenBucket: a burst below the count caps the bucket, the count sets the rate",
          "[token_bucket][memory]") {
    ManualClock clock;
    Bucket limiter{Limit::perMinute(10).withBurst(3), {}, clock};
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

TEST_CASE("TokenBucket: a burst above the count is available at once, then the count per period",
          "[token_bucket][memory]") {
    ManualClock clock;
    Bucket limiter{Limit::perMinute(10).withBurst(25), {}, clock};
    CHECK(send(limiter, 30).first == 25);
    clock.set(at(1min));
    CHECK(send(limiter, 30).first == 10);
    clock.set(at(2min + 30s));
    CHECK(send(limiter, 30).first == 15);
    CHECK(limiter.tryAcquire("x", 25).allowed);
    CHECK(limiter.tryAcquire("y", 26).never());
}

TEST_CASE("TokenBucket: a denied request does not consume tokens", "[token_bucket][memory]") {
    rltest::checkRefusalsConsumeNothing<Bucket>(Limit::perMinute(10));
    rltest::checkRefusalsConsumeNothing<Bucket>(Limit::per(3, 10s));
    rltest::checkRefusalsConsumeNothing<Bucket>(Limit::perSecond(7).withBurst(2));
}

TEST_CASE("TokenBucket: a cost of zero is a peek", "[token_bucket][memory]") {
    rltest::checkCostZeroIsAPeek<Bucket>();
}

TEST_CASE("TokenBucket: a cost above the burst is never allowed and consumes nothing",
          "[token_bucket][memory]") {
    rltest::checkImpossibleCosts<Bucket>(Limit::perMinute(10));
    rltest::checkImpossibleCosts<Bucket>(Limit::perMinute(10).withBurst(4));
    rltest::checkImpossibleCosts<Bucket>(Limit::perHour(999'999));
    rltest::checkImpossibleCosts<Bucket>(
        Limit::per(Limit::kMaxCount, 1ms).withBurst(Limit::kMaxCount));
}

TEST_CASE("TokenBucket: a negative cost throws std::invalid_argument", "[token_bucket][memory]") {
    rltest::checkNegativeCostThrows<Bucket>();
}

TEST_CASE("TokenBucket: the decision's limit is the burst", "[token_bucket][memory]") {
    rltest::checkLimitField<Bucket>();
}

TEST_CASE("TokenBucket: any byte string is a key of its own", "[token_bucket][memory]") {
    rltest::checkKeysAreBytes<Bucket>();
}

TEST_CASE("TokenBucket: reset forgets one key", "[token_bucket][memory]") {
    rltest::checkReset<Bucket>(Limit::perMinute(10).withBurst(4));
}

TEST_CASE("TokenBucket: random traffic keeps every rule of a decision", "[token_bucket][memory]") {
    std::uint64_t seed = 1;
    for (const Limit& limit : rltest::sampleLimits()) {
        rltest::checkRandomTraffic<Bucket>(limit, seed++, 1500);
    }
}

TEST_CASE("TokenBucket: a clock stepping back refills nothing and keeps the wait",
          "[token_bucket][memory]") {
    std::uint64_t seed = 100;
    for (const Limit limit :
         {Limit::perMinute(10), Limit::per(3, 10s), Limit::perHour(999'999),
          Limit::perSecond(7).withBurst(3), Limit::per(10, 90s).withBurst(20)}) {
        for (const auto step : {rltest::Nanos{1s}, rltest::Nanos{1h}, rltest::Nanos{24h}}) {
            rltest::checkStepBackAroundExhaustedKey<Bucket>(limit, step, seed++);
            rltest::checkStepBackKeepsRemaining<Bucket>(limit, step);
        }
    }
}

TEST_CASE("TokenBucket: the wait after a step back equals the wait before it",
          "[token_bucket][memory]") {
    // 10/min, exhausted at 10:00:00; the clock steps back one hour.
    ManualClock clock;
    Bucket limiter{Limit::perMinute(10), {}, clock};
    clock.set(at(10h));
    CHECK(send(limiter, 10).first == 10);
    const Decision before = limiter.tryAcquire("client");
    CHECK(before.retryAfter == 6s);
    clock.set(at(9h));
    const Decision after = limiter.tryAcquire("client");
    CHECK(!after.allowed);
    CHECK(after.retryAfter == 6s);
    CHECK(after.resetAfter == 60s);
    clock.set(at(9h + 6s - 1ns));
    CHECK(!limiter.tryAcquire("client").allowed);
    clock.set(at(9h + 6s));
    CHECK(limiter.tryAcquire("client").allowed);
    // Back at 10:00:00 + 1 min the bucket holds what a minute from 09:00:06 refilled, no more.
    clock.set(at(10h + 1min));
    CHECK(limiter.peek("client", 0).remaining == 10);
}

TEST_CASE("TokenBucket: works at both ends of the clock's range", "[token_bucket][memory]") {
    rltest::checkClockRangeEnds<Bucket>(Limit::perMinute(10));
    rltest::checkClockRangeEnds<Bucket>(Limit::per(3, 10s).withBurst(5));
    rltest::checkClockRangeEnds<Bucket>(Limit::perHour(999'999));
}

namespace {

/// The no-drift runs, `requests` in total split over the rates of the design.
void noDrift(std::int64_t requests) {
    const std::int64_t share = requests / 6;
    std::uint64_t seed = 7;
    for (const Limit limit : {Limit::perSecond(7), Limit::per(3, 10s), Limit::perHour(999'999)}) {
        // Costs below the burst: the total is exactly burst + floor(t·count/period).
        rltest::checkBucketNoDrift<Bucket>(limit, share, limit.burst - 1, seed++);
        // Costs up to the burst: exactly the rational model, never ahead of the formula.
        rltest::checkBucketNoDrift<Bucket>(limit, share, limit.burst, seed++);
    }
    rltest::checkBucketNoDrift<Bucket>(Limit::perSecond(7).withBurst(20), share / 4, 19, seed++);
    rltest::checkBucketNoDrift<Bucket>(Limit::per(3, 10s).withBurst(1), share / 4, 1, seed++);
}

}  // namespace

TEST_CASE("TokenBucket: a client retrying at retryAfter gets exactly the rate, no drift",
          "[token_bucket][memory]") {
    noDrift(10'000'000);  // over 10^7 requests in all
}

TEST_CASE("TokenBucket: a limit beyond the 2^62 unit bound is refused at construction",
          "[token_bucket][memory]") {
    ManualClock clock;
    // burst·period/gcd(count, period): 2^48 · 2^14 = 2^62 units.
    const Limit tooBig =
        Limit::per(1, std::chrono::nanoseconds{std::int64_t{1} << 14}).withBurst(Limit::kMaxCount);
    try {
        Bucket limiter{tooBig, {}, clock};
        FAIL("constructed a limiter for " << rltest::describe(tooBig));
    } catch (const std::invalid_argument& e) {
        const std::string what = e.what();
        INFO(what);
        CHECK(what.find("2^62") != std::string::npos);
        CHECK(what.find("burst") != std::string::npos);
    }
    // One nanosecond less is accepted.
    const Limit largest = Limit::per(1, std::chrono::nanoseconds{(std::int64_t{1} << 14) - 1})
                              .withBurst(Limit::kMaxCount);
    CHECK_NOTHROW(Bucket{largest, {}, clock});
    // The gcd counts: 2^48 per 2^14 ns reduces to 2^34 per ns, 2^48 units.
    CHECK_NOTHROW(
        Bucket{Limit::per(Limit::kMaxCount, std::chrono::nanoseconds{std::int64_t{1} << 14})
                   .withBurst(Limit::kMaxCount),
               {},
               clock});
    // Periods of a century with a large burst.
    CHECK_THROWS_AS(
        (Bucket{Limit::per(1, std::chrono::hours{24 * 365 * 100}).withBurst(1'000'000), {}, clock}),
        std::invalid_argument);
    // 3 per 146 years: 4.604e18 units, below 2^62 = 4.612e18; 3 per 147 years is above.
    CHECK_NOTHROW(Bucket{Limit::per(3, std::chrono::hours{24 * 365 * 146}), {}, clock});
    CHECK_THROWS_AS((Bucket{Limit::per(3, std::chrono::hours{24 * 365 * 147}), {}, clock}),
                    std::invalid_argument);
}

TEST_CASE("TokenBucket: the unit bound names the largest accepted burst",
          "[token_bucket][memory]") {
    // 2^20 per (2^42 + 1) ns: gcd 1, so one token is 2^42 + 1 units and the capacity is
    // burst·(2^42 + 1) units, while the longest span (burst·period/count) stays near 2^42 ticks:
    // only the unit bound applies. The largest burst below 2^62 units is 1048575.
    ManualClock clock;
    const Limit base =
        Limit::per(std::int64_t{1} << 20, std::chrono::nanoseconds{(std::int64_t{1} << 42) + 1});
    const std::string what = [&] {
        try {
            Bucket limiter{base.withBurst(1048576), {}, clock};
        } catch (const std::invalid_argument& e) {
            return std::string(e.what());
        }
        return std::string("<accepted>");
    }();
    INFO(what);
    CHECK(what.find("2^62") != std::string::npos);
    CHECK(what.find("burst") != std::string::npos);
    CHECK(what.find("1048575") != std::string::npos);
    Bucket largest{base.withBurst(1048575), {}, clock};
    REQUIRE(largest.tryAcquire("k", 1048575).allowed);
    // A token takes (2^42 + 1) / 2^20 = 4194304.000001 ns: the first after 4194305 ns.
    const Decision d = largest.tryAcquire("k");
    CHECK(d.retryAfter == 4194305ns);
    CHECK(largest.peek("k", 0, at(4194304ns)).remaining == 0);
    CHECK(largest.peek("k", 0, at(4194305ns)).remaining == 1);
}

TEST_CASE("TokenBucket: extreme accepted limits compute without overflow",
          "[token_bucket][memory]") {
    using rltest::Int128;
    ManualClock clock;
    SECTION("2^48 per nanosecond, burst 2^48") {
        const Limit limit = Limit::per(Limit::kMaxCount, 1ns).withBurst(Limit::kMaxCount);
        Bucket limiter{limit, {}, clock};
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
        Bucket limiter{limit, {}, clock};
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
        CHECK_THROWS_AS((Bucket{Limit::per(1, std::chrono::nanoseconds{period + 1}), {}, clock}),
                        std::invalid_argument);
        const Limit limit = Limit::per(1, std::chrono::nanoseconds{period});
        Bucket limiter{limit, {}, clock};
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
        Bucket limiter{limit, {}, clock};
        clock.set(at(std::chrono::nanoseconds{std::int64_t{1} << 61}));
        REQUIRE(limiter.tryAcquire("k", 7).allowed);
        clock.advance(std::chrono::nanoseconds{std::int64_t{1} << 61});
        const Decision d = limiter.tryAcquire("k", 7);
        CHECK(d.allowed);
        CHECK(d.resetAfter == 1s);
    }
}
