// Tests of ratelimit::Decision (include/ratelimit/decision.hpp).

#include <chrono>
#include <cstdint>
#include <type_traits>

#include <ratelimit/clock.hpp>
#include <ratelimit/decision.hpp>

#include "support/catch.hpp"

namespace {

using namespace std::chrono_literals;
using ratelimit::Decision;
using ManualTime = ratelimit::ManualClock::time_point;
using SystemSeconds = std::chrono::time_point<std::chrono::system_clock, std::chrono::seconds>;
using SystemMicros = std::chrono::time_point<std::chrono::system_clock, std::chrono::microseconds>;

constexpr Decision withRetry(std::chrono::nanoseconds retryAfter) {
    Decision d;
    d.retryAfter = retryAfter;
    return d;
}

constexpr Decision allowedWith(std::int64_t remaining) {
    Decision d;
    d.allowed = true;
    d.limit = 10;
    d.remaining = remaining;
    return d;
}

}  // namespace

TEST_CASE("Decision: a default decision refuses, with no wait and nothing degraded", "[decision]") {
    constexpr Decision kDefault{};
    STATIC_REQUIRE(!kDefault.allowed);
    STATIC_REQUIRE(!kDefault.never());
    STATIC_REQUIRE(kDefault.retryAfter == 0ns);
    STATIC_REQUIRE(kDefault.resetAfter == 0ns);
    STATIC_REQUIRE(!kDefault.degraded);
    STATIC_REQUIRE(kDefault.policy == 0);
    // Durations are nanoseconds whatever the clock.
    STATIC_REQUIRE(std::is_same_v<decltype(Decision::retryAfter), std::chrono::nanoseconds>);
    STATIC_REQUIRE(std::is_same_v<decltype(Decision::resetAfter), std::chrono::nanoseconds>);
}

TEST_CASE("Decision: never() is exactly retryAfter == kNever", "[decision]") {
    STATIC_REQUIRE(Decision::kNever == std::chrono::nanoseconds::max());
    STATIC_REQUIRE(withRetry(Decision::kNever).never());
    STATIC_REQUIRE(!withRetry(Decision::kNever - 1ns).never());
    STATIC_REQUIRE(!withRetry(0ns).never());
    STATIC_REQUIRE(!withRetry(24h * 365 * 200).never());
    CHECK(withRetry(std::chrono::nanoseconds::max()).never());
    CHECK_FALSE(withRetry(1ns).never());
}

TEST_CASE("Decision: converts to bool explicitly, as allowed", "[decision]") {
    STATIC_REQUIRE(!std::is_convertible_v<Decision, bool>);
    STATIC_REQUIRE(std::is_constructible_v<bool, Decision>);
    STATIC_REQUIRE(static_cast<bool>(allowedWith(3)));
    STATIC_REQUIRE(!static_cast<bool>(withRetry(1s)));
    const Decision yes = allowedWith(0);
    const Decision no = withRetry(1s);
    CHECK(yes);
    CHECK_FALSE(no);
    bool branched = false;
    if (yes) {
        branched = true;
    }
    CHECK(branched);
    CHECK((!no && yes));
}

TEST_CASE("Decision: equality compares every field", "[decision]") {
    STATIC_REQUIRE(allowedWith(3) == allowedWith(3));
    STATIC_REQUIRE(allowedWith(3) != allowedWith(2));
    Decision a = allowedWith(3);
    Decision b = a;
    b.degraded = true;
    CHECK(a != b);
    b = a;
    b.policy = 2;
    CHECK(a != b);
    b = a;
    b.resetAfter = 1ns;
    CHECK(a != b);
}

TEST_CASE("Decision: retryAt adds the wait to a time point", "[decision]") {
    STATIC_REQUIRE(withRetry(1500ms).retryAt(ManualTime{5s}) == ManualTime{6500ms});
    STATIC_REQUIRE(withRetry(0ns).retryAt(ManualTime{5s}) == ManualTime{5s});
    CHECK(withRetry(1ns).retryAt(ManualTime{0ns}) == ManualTime{1ns});
    CHECK(withRetry(3s).retryAt(ManualTime{24h}) == ManualTime{24h + 3s});
    const auto now = std::chrono::system_clock::now();
    CHECK(withRetry(2s).retryAt(now) ==
          now + std::chrono::duration_cast<std::chrono::system_clock::duration>(2s));
}

TEST_CASE("Decision: retryAt rounds up to a coarser time point's tick", "[decision]") {
    const SystemSeconds t{10s};
    CHECK(withRetry(1500ms).retryAt(t) == SystemSeconds{12s});
    CHECK(withRetry(1ns).retryAt(t) == SystemSeconds{11s});
    CHECK(withRetry(2s).retryAt(t) == SystemSeconds{12s});
    CHECK(withRetry(0ns).retryAt(t) == t);
    CHECK(withRetry(1001ns).retryAt(SystemMicros{0us}) == SystemMicros{2us});
    // Never earlier than now + retryAfter: a call at the returned time passes.
    for (const std::chrono::nanoseconds wait :
         {1ns, std::chrono::nanoseconds{999ms}, std::chrono::nanoseconds{1s}, 1s + 1ns,
          59min + 59s + 999999999ns}) {
        INFO("wait " << wait.count() << "ns");
        CHECK(withRetry(wait).retryAt(t).time_since_epoch() >= t.time_since_epoch() + wait);
        CHECK(withRetry(wait).retryAt(t).time_since_epoch() < t.time_since_epoch() + wait + 1s);
    }
}

TEST_CASE("Decision: retryAt saturates at the time point's maximum", "[decision]") {
    SECTION("never") {
        CHECK(withRetry(Decision::kNever).retryAt(ManualTime{0ns}) == ManualTime::max());
        CHECK(withRetry(Decision::kNever).retryAt(ManualTime{5s}) == ManualTime::max());
        CHECK(withRetry(Decision::kNever).retryAt(ManualTime{-5s}) == ManualTime::max());
        CHECK(withRetry(Decision::kNever).retryAt(ManualTime::min()) == ManualTime::max());
        CHECK(withRetry(Decision::kNever).retryAt(SystemSeconds{10s}) == SystemSeconds::max());
        CHECK(withRetry(Decision::kNever).retryAt(SystemMicros{10s}) == SystemMicros::max());
        STATIC_REQUIRE(withRetry(Decision::kNever).retryAt(ManualTime{1s}) == ManualTime::max());
    }
    SECTION("a finite wait past the end") {
        CHECK(withRetry(2ns).retryAt(ManualTime::max() - 1ns) == ManualTime::max());
        CHECK(withRetry(1ns).retryAt(ManualTime::max() - 1ns) == ManualTime::max());
        CHECK(withRetry(1ns).retryAt(ManualTime::max()) == ManualTime::max());
        CHECK(withRetry(0ns).retryAt(ManualTime::max()) == ManualTime::max());
        CHECK(withRetry(Decision::kNever - 1ns).retryAt(ManualTime{1ns}) == ManualTime::max());
        CHECK(withRetry(1h).retryAt(SystemSeconds::max() - 10s) == SystemSeconds::max());
        STATIC_REQUIRE(withRetry(2ns).retryAt(ManualTime::max() - 1ns) == ManualTime::max());
    }
    SECTION("just inside the end") {
        CHECK(withRetry(1ns).retryAt(ManualTime::max() - 2ns) == ManualTime::max() - 1ns);
        CHECK(withRetry(Decision::kNever - 1ns).retryAt(ManualTime{0ns}) ==
              ManualTime::max() - 1ns);
    }
}

TEST_CASE("Decision: retryAt works for time points before the epoch", "[decision]") {
    // ManualClock counts from its own zero and may be set below it; system_clock reads
    // before 1970 are negative too. Saturation must not treat them as overflowing.
    CHECK(withRetry(1ns).retryAt(ManualTime{-1ns}) == ManualTime{0ns});
    CHECK(withRetry(0ns).retryAt(ManualTime{-5s}) == ManualTime{-5s});
    CHECK(withRetry(2s).retryAt(ManualTime{-5s}) == ManualTime{-3s});
    CHECK(withRetry(1s).retryAt(ManualTime::min()) == ManualTime::min() + 1s);
    CHECK(withRetry(1500ms).retryAt(SystemSeconds{-10s}) == SystemSeconds{-8s});
    CHECK(withRetry(Decision::kNever - 1ns).retryAt(ManualTime{-1ns}) == ManualTime::max() - 2ns);
}

TEST_CASE("Decision stays 48 bytes on 64-bit targets", "[decision]") {
    // Every call returns one: its flags share one word, so a new flag costs no bytes
    // (bench/README.md, "Listeners": at 56 bytes the given-now rows were 1.06-1.23x).
    if constexpr (sizeof(void*) == 8) {
        STATIC_REQUIRE(sizeof(ratelimit::Decision) == 48);
    }
}
