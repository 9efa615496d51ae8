// Tests of include/ratelimit/detail/circuit_breaker.hpp with a clock the test moves: no test
// waits for a backoff.

#include <chrono>
#include <memory>
#include <optional>

#include <ratelimit/detail/circuit_breaker.hpp>
#include <ratelimit/store_error.hpp>

#include "support/catch.hpp"

namespace {

using namespace std::chrono_literals;
using ratelimit::StoreError;
using ratelimit::StoreEvent;
using ratelimit::detail::CircuitBreaker;

/// A steady time that moves only when told.
struct TestTime {
    std::shared_ptr<CircuitBreaker::TimePoint> now =
        std::make_shared<CircuitBreaker::TimePoint>(std::chrono::hours{1});
    [[nodiscard]] CircuitBreaker::Clock clock() const {
        return [t = now] { return *t; };
    }
    void advance(std::chrono::nanoseconds d) const { *now += d; }
};

/// A call let through while the breaker was closed: not a probe.
constexpr CircuitBreaker::Admission kOrdinaryCall{};

/// Opens `breaker` with the failure of an ordinary call; returns the event it reported.
std::optional<StoreEvent> open(CircuitBreaker& breaker) {
    return breaker.failed(kOrdinaryCall, StoreError::kUnreachable, "connect: refused", true);
}

/// The failure of an ordinary call that the store answered with an error (not an outage).
std::optional<StoreEvent> refuse(CircuitBreaker& breaker, StoreError error) {
    return breaker.failed(kOrdinaryCall, error, "refused", false);
}

}  // namespace

TEST_CASE("CircuitBreaker: closed, every call proceeds and none is a probe", "[circuit_breaker]") {
    const TestTime time;
    CircuitBreaker breaker{20ms, 80ms, time.clock()};
    for (int i = 0; i < 3; ++i) {
        const CircuitBreaker::Admission a = breaker.admit();
        CHECK(a.proceed);
        CHECK_FALSE(a.probe);
    }
    CHECK(breaker.untilProbe() == 20ms);  // the base backoff when closed
    CHECK_FALSE(breaker.succeeded(kOrdinaryCall).has_value());
}

TEST_CASE("CircuitBreaker: the first failure opens it and is reported once", "[circuit_breaker]") {
    const TestTime time;
    CircuitBreaker breaker{20ms, 80ms, time.clock()};
    const std::optional<StoreEvent> first = open(breaker);
    REQUIRE(first.has_value());
    CHECK(first->health == StoreEvent::Health::kFailing);
    CHECK(first->error == StoreError::kUnreachable);
    CHECK(first->message == "connect: refused");
    // Calls in flight when it opened fail too: no second event, no longer backoff.
    CHECK_FALSE(open(breaker).has_value());
    const CircuitBreaker::Admission refused = breaker.admit();
    CHECK_FALSE(refused.proceed);
    CHECK(refused.wait == 20ms);
    time.advance(5ms);
    CHECK(breaker.admit().wait == 15ms);
    CHECK(breaker.untilProbe() == 15ms);
}

TEST_CASE("CircuitBreaker: after the backoff one call probes while the others fail fast",
          "[circuit_breaker]") {
    const TestTime time;
    CircuitBreaker breaker{20ms, 80ms, time.clock()};
    REQUIRE(open(breaker).has_value());
    time.advance(20ms - 1ns);
    CHECK_FALSE(breaker.admit().proceed);
    time.advance(1ns);
    const CircuitBreaker::Admission probe = breaker.admit();
    CHECK(probe.proceed);
    CHECK(probe.probe);
    const CircuitBreaker::Admission other = breaker.admit();  // while the probe is out
    CHECK_FALSE(other.proceed);
    CHECK(other.wait == 1ns);  // the probe time has come; the probe decides
}

TEST_CASE("CircuitBreaker: each failed probe doubles the backoff up to the maximum",
          "[circuit_breaker]") {
    const TestTime time;
    CircuitBreaker breaker{20ms, 80ms, time.clock()};
    REQUIRE(open(breaker).has_value());
    for (const auto backoff : {40ms, 80ms, 80ms, 80ms}) {
        time.advance(breaker.untilProbe());
        const CircuitBreaker::Admission probe = breaker.admit();
        REQUIRE(probe.probe);
        CHECK_FALSE(breaker.failed(probe, StoreError::kTimeout, "no reply", true).has_value());
        CHECK(breaker.untilProbe() == backoff);
        CHECK_FALSE(breaker.admit().proceed);
    }
}

TEST_CASE("CircuitBreaker: only the probe's success closes it, with one healthy event",
          "[circuit_breaker]") {
    const TestTime time;
    CircuitBreaker breaker{20ms, 80ms, time.clock()};
    REQUIRE(open(breaker).has_value());
    // A call sent before the breaker opened may still succeed while the server is down.
    CHECK_FALSE(breaker.succeeded(kOrdinaryCall).has_value());
    CHECK_FALSE(breaker.admit().proceed);
    time.advance(20ms);
    const CircuitBreaker::Admission probe = breaker.admit();
    REQUIRE(probe.probe);
    const std::optional<StoreEvent> healthy = breaker.succeeded(probe);
    REQUIRE(healthy.has_value());
    CHECK(healthy->health == StoreEvent::Health::kHealthy);
    CHECK(healthy->error == StoreError::kNone);
    CHECK_FALSE(breaker.succeeded(probe).has_value());  // once
    CHECK(breaker.admit().proceed);
    // The next outage starts again from the base backoff.
    REQUIRE(open(breaker).has_value());
    CHECK(breaker.untilProbe() == 20ms);
}

TEST_CASE("CircuitBreaker: an error the store answers with is heard once and leaves it closed",
          "[circuit_breaker]") {
    const TestTime time;
    CircuitBreaker breaker{20ms, 80ms, time.clock()};
    const std::optional<StoreEvent> failing = refuse(breaker, StoreError::kOutOfMemory);
    REQUIRE(failing.has_value());
    CHECK(failing->health == StoreEvent::Health::kFailing);
    CHECK(failing->error == StoreError::kOutOfMemory);
    CHECK(breaker.admit().proceed);
    // The calls the store still serves between failing ones do not end the episode, and a
    // failure of another kind does not start a new one.
    time.advance(10ms);
    CHECK_FALSE(breaker.succeeded(kOrdinaryCall).has_value());
    CHECK_FALSE(refuse(breaker, StoreError::kReadOnly).has_value());
    time.advance(20ms - 1ns);
    CHECK_FALSE(breaker.succeeded(kOrdinaryCall).has_value());
    CHECK(breaker.admit().proceed);
    // A success once no call failed for the base backoff: healthy, once.
    time.advance(1ns);
    const std::optional<StoreEvent> healthy = breaker.succeeded(kOrdinaryCall);
    REQUIRE(healthy.has_value());
    CHECK(healthy->health == StoreEvent::Health::kHealthy);
    CHECK_FALSE(breaker.succeeded(kOrdinaryCall).has_value());
    REQUIRE(refuse(breaker, StoreError::kScript).has_value());  // a new episode
}

TEST_CASE("CircuitBreaker: a probe the store answers with an error closes it",
          "[circuit_breaker]") {
    const TestTime time;
    CircuitBreaker breaker{20ms, 80ms, time.clock()};
    REQUIRE(open(breaker).has_value());
    time.advance(20ms);
    const CircuitBreaker::Admission probe = breaker.admit();
    REQUIRE(probe.probe);
    CHECK_FALSE(breaker.failed(probe, StoreError::kNoPermission, "NOPERM", false).has_value());
    CHECK(breaker.admit().proceed);  // the server is up
    CHECK(breaker.untilProbe() == 20ms);
    // Still failing until a call succeeds a backoff after the last failure.
    CHECK_FALSE(breaker.succeeded(kOrdinaryCall).has_value());
    time.advance(20ms);
    REQUIRE(breaker.succeeded(kOrdinaryCall).has_value());
}

TEST_CASE("CircuitBreaker: a success while it is open is not healthy", "[circuit_breaker]") {
    const TestTime time;
    CircuitBreaker breaker{20ms, 80ms, time.clock()};
    REQUIRE(open(breaker).has_value());
    time.advance(1h);  // long after the failure, but nobody probed: the breaker is still open
    CHECK_FALSE(breaker.succeeded(kOrdinaryCall).has_value());
    const CircuitBreaker::Admission probe = breaker.admit();
    REQUIRE(probe.probe);
    REQUIRE(breaker.succeeded(probe).has_value());
}

TEST_CASE("CircuitBreaker: without a clock it reads the steady clock", "[circuit_breaker]") {
    CircuitBreaker breaker{1h, 1h};
    REQUIRE(open(breaker).has_value());
    const CircuitBreaker::Admission refused = breaker.admit();
    CHECK_FALSE(refused.proceed);
    CHECK(refused.wait > 59min);
    CHECK(refused.wait <= 1h);
}
