// Tests of the token bucket (include/ratelimit/algorithms/token_bucket.hpp) through the public
// limiter, driven by ManualClock only: its own scenarios. What every algorithm does (and the
// worked scenarios) is in contract_test.cpp, what both buckets do in its "Buckets:" cases.

#include <chrono>

#include <ratelimit/algorithms/token_bucket.hpp>

#include "algorithms/common.hpp"
#include "support/catch.hpp"
#include "support/limiters.hpp"

using namespace std::chrono_literals;

namespace ratelimit_test {

namespace {

using Bucket = MemoryTokenBucket;

}  // namespace

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

}  // namespace ratelimit_test
