#pragma once

// What the dry-run tests check on every storage: a limiter in dry-run beside an enforcing one of
// the same limit, both given the same random traffic, admits everything, yet reports on each call
// exactly what the enforcing one decided, and counts its refusals.

#include <cstdint>
#include <string>

#include <ratelimit/clock.hpp>
#include <ratelimit/decision.hpp>

#include "support/catch.hpp"
#include "support/random_traffic.hpp"

namespace ratelimit_test {

/// Replays `calls` random calls (keys of 4, costs around the capacity, 1 in 8 a peek, the clock
/// moving forward) on `enforcing` and `dryRun`, which must keep their keys apart and share
/// `clock`. Fails the test at the first call where `dryRun` does not admit, or reports other
/// figures than `enforcing` decided. Returns the refusals of `enforcing`'s `tryAcquire` calls.
template <class Enforcing, class DryRun>
std::uint64_t replayBesideEnforcing(Enforcing& enforcing, DryRun& dryRun,
                                    ratelimit::ManualClock& clock, Rng& rng, int calls) {
    const std::int64_t capacity = enforcing.tryAcquire("", 0).limit;
    std::uint64_t refusals = 0;
    for (int call = 0; call < calls; ++call) {
        clock.advance(randomForwardStep(rng, enforcing.limit(), std::chrono::microseconds{1}));
        const std::string key = "k" + std::to_string(uniform(rng, 0, 3));
        const std::int64_t cost = uniform(rng, 0, capacity + 1);
        const bool peek = uniform(rng, 0, 7) == 0;
        const ratelimit::Decision e =
            peek ? enforcing.peek(key, cost) : enforcing.tryAcquire(key, cost);
        const ratelimit::Decision d = peek ? dryRun.peek(key, cost) : dryRun.tryAcquire(key, cost);
        INFO("call " << call << ", key " << key << ", cost " << cost << (peek ? ", a peek" : ""));
        REQUIRE(d.allowed);
        REQUIRE_FALSE(e.wouldRefuse);
        REQUIRE(d.wouldRefuse == !e.allowed);
        REQUIRE(d.limit == e.limit);
        REQUIRE(d.remaining == e.remaining);
        REQUIRE(d.retryAfter == e.retryAfter);
        REQUIRE(d.resetAfter == e.resetAfter);
        if (!e.allowed && !peek) {
            ++refusals;
        }
    }
    return refusals;
}

}  // namespace ratelimit_test
