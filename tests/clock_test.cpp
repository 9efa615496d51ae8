// Tests of the clocks (include/ratelimit/clock.hpp). Clocks are read into named locals: the
// operands of one comparison are unsequenced, so `c.now() <= c.now()` may read them in either
// order.

#include <chrono>
#include <cstdint>
#include <thread>
#include <type_traits>
#include <vector>

#include <ratelimit/clock.hpp>

#include "support/catch.hpp"

namespace {

using namespace std::chrono_literals;
using ratelimit::ManualClock;
using ratelimit::SteadyClock;
using ratelimit::SystemClock;

/// |a - b| for two readings in nanoseconds since the Unix epoch.
std::chrono::nanoseconds distance(std::chrono::nanoseconds a, std::chrono::nanoseconds b) {
    return a > b ? a - b : b - a;
}

std::chrono::nanoseconds systemNow() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::chrono::system_clock::now().time_since_epoch());
}

}  // namespace

TEST_CASE("ManualClock: starts at its own zero and moves only when told", "[clock]") {
    const ManualClock clock;
    const auto first = clock.now();
    const auto second = clock.now();
    CHECK(first.time_since_epoch() == 0ns);
    CHECK(second == first);
    STATIC_REQUIRE(std::is_same_v<ManualClock::duration, std::chrono::nanoseconds>);
    STATIC_REQUIRE(std::is_same_v<ManualClock::time_point::clock, ManualClock>);
    STATIC_REQUIRE(!ManualClock::is_steady);
}

TEST_CASE("ManualClock: advance moves forwards and backwards", "[clock]") {
    ManualClock clock;
    clock.advance(5s);
    CHECK(clock.now().time_since_epoch() == 5s);
    clock.advance(1ns);
    CHECK(clock.now().time_since_epoch() == 5s + 1ns);
    clock.advance(-7s);
    CHECK(clock.now().time_since_epoch() == -2s + 1ns);
    clock.advance(0ns);
    CHECK(clock.now().time_since_epoch() == -2s + 1ns);
    clock.advance(-24h);
    CHECK(clock.now().time_since_epoch() == -24h - 2s + 1ns);
}

TEST_CASE("ManualClock: set jumps to any time, earlier ones included", "[clock]") {
    ManualClock clock;
    clock.set(ManualClock::time_point{1h});
    CHECK(clock.now() == ManualClock::time_point{1h});
    clock.set(30min);  // the duration-since-zero overload
    CHECK(clock.now().time_since_epoch() == 30min);
    clock.set(ManualClock::time_point{-3s});
    CHECK(clock.now().time_since_epoch() == -3s);
    clock.set(ManualClock::time_point::max());
    CHECK(clock.now() == ManualClock::time_point::max());
    clock.set(ManualClock::time_point::min());
    CHECK(clock.now() == ManualClock::time_point::min());
    clock.set(0ns);
    CHECK(clock.now().time_since_epoch() == 0ns);
}

TEST_CASE("ManualClock: copies share one time", "[clock]") {
    ManualClock original;
    ManualClock copy = original;  // NOLINT(performance-unnecessary-copy-initialization)
    original.advance(10s);
    CHECK(copy.now().time_since_epoch() == 10s);
    copy.set(1h);
    CHECK(original.now().time_since_epoch() == 1h);
    copy.advance(-2h);
    CHECK(original.now().time_since_epoch() == -1h);

    ManualClock assigned;
    assigned.advance(5s);
    assigned = original;  // joins original's timeline, leaves its own
    CHECK(assigned.now().time_since_epoch() == -1h);
    original.advance(1s);
    CHECK(assigned.now().time_since_epoch() == -1h + 1s);

    // Clocks built separately do not share.
    const ManualClock other;
    CHECK(other.now().time_since_epoch() == 0ns);

    // A const copy can still read the shared time.
    const ManualClock constCopy = original;
    original.advance(1ms);
    CHECK(constCopy.now().time_since_epoch() == -1h + 1s + 1ms);
}

TEST_CASE("ManualClock: advances from several threads all count", "[clock]") {
    ManualClock clock;
    constexpr int kThreads = 4;
    std::vector<std::thread> threads;
    threads.reserve(kThreads);
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([copy = clock]() mutable {
            for (int i = 0; i < 10'000; ++i) {
                copy.advance(1ns);
            }
        });
    }
    for (auto& t : threads) {
        t.join();
    }
    CHECK(clock.now().time_since_epoch() == 40'000ns);
}

TEST_CASE("SteadyClock: reads UTC, within a few seconds of the system clock", "[clock]") {
    const SteadyClock clock;
    const std::chrono::nanoseconds before = systemNow();
    const std::chrono::nanoseconds reading = clock.now().time_since_epoch();
    const std::chrono::nanoseconds after = systemNow();
    INFO("system " << before.count() << ".." << after.count() << ", steady " << reading.count());
    CHECK(distance(reading, before) < 5s);
    CHECK(distance(reading, after) < 5s);
    // Well after 2020-01-01: an epoch offset was applied.
    CHECK(reading > std::chrono::nanoseconds{1'577'836'800'000'000'000});
    STATIC_REQUIRE(SteadyClock::is_steady);
    STATIC_REQUIRE(SteadyClock::kHostLocalEpoch);
    STATIC_REQUIRE(std::is_same_v<SteadyClock::duration, std::chrono::nanoseconds>);
}

TEST_CASE("SteadyClock: never goes backwards", "[clock]") {
    const SteadyClock clock;
    auto previous = clock.now();
    for (int i = 0; i < 100'000; ++i) {
        const auto next = clock.now();
        REQUIRE(previous <= next);
        previous = next;
    }
}

TEST_CASE("SteadyClock: advances as std::chrono::steady_clock does, to the nanosecond", "[clock]") {
    // Each interval of one clock holds the other's read within it, and lies within the other's
    // read around it: a coarser clock, or one read in other units, strays out. (A clock of
    // another source that ticks at the same rate would pass: `SteadyClock`'s source is its
    // code's to say.)
    using std::chrono::steady_clock;
    const SteadyClock clock;
    for (int i = 0; i < 1000; ++i) {
        const steady_clock::time_point outerStart = steady_clock::now();
        const SteadyClock::time_point start = clock.now();
        const steady_clock::time_point innerStart = steady_clock::now();
        const steady_clock::time_point innerEnd = steady_clock::now();
        const SteadyClock::time_point end = clock.now();
        const steady_clock::time_point outerEnd = steady_clock::now();
        REQUIRE(end - start >= innerEnd - innerStart);
        REQUIRE(end - start <= outerEnd - outerStart);
    }
}

TEST_CASE("SteadyClock: copies share the offset captured at construction", "[clock]") {
    const SteadyClock clock;
    const SteadyClock copy = clock;  // NOLINT(performance-unnecessary-copy-initialization)
    for (int i = 0; i < 1000; ++i) {
        const auto a = clock.now();
        const auto b = copy.now();
        const auto c = clock.now();
        REQUIRE(a <= b);
        REQUIRE(b <= c);
    }
    // Two clocks built separately agree closely (each captures the offset once).
    const SteadyClock other;
    const auto mine = clock.now().time_since_epoch();
    const auto theirs = other.now().time_since_epoch();
    CHECK(distance(mine, theirs) < 1s);
}

TEST_CASE("SystemClock: reads wall time since the Unix epoch", "[clock]") {
    const SystemClock clock;
    const std::chrono::nanoseconds before = systemNow();
    const std::chrono::nanoseconds reading = clock.now().time_since_epoch();
    const std::chrono::nanoseconds after = systemNow();
    CHECK(distance(reading, before) < 5s);
    CHECK(distance(reading, after) < 5s);
    CHECK(reading > std::chrono::nanoseconds{1'577'836'800'000'000'000});
    STATIC_REQUIRE(!SystemClock::is_steady);
    STATIC_REQUIRE(std::is_same_v<SystemClock::duration, std::chrono::nanoseconds>);
    STATIC_REQUIRE(std::is_same_v<SystemClock::time_point::clock, SystemClock>);
}
