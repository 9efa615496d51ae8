// Regression tests for library bugs the fuzzers (tests/fuzz/) found. Each reproduces one
// finding with the smallest input; while the bug is open the test is tagged [!shouldfail], so
// the suite stays green and the test turns red the day the bug is fixed: then drop the tag
// (and the matching skip in tests/fuzz/, if the test names one).

#include <chrono>
#include <cstdint>
#include <limits>
#include <stdexcept>

#include <ratelimit/clock.hpp>
#include <ratelimit/limit.hpp>
#include <ratelimit/limiter.hpp>
#include <ratelimit/storage/memory.hpp>

#include "support/catch.hpp"

namespace {

using ratelimit::Limit;
using ratelimit::ManualClock;
using ratelimit::MemoryStorage;
using Nanos = std::chrono::nanoseconds;

constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
constexpr std::int64_t k62 = std::int64_t{1} << 62;

}  // namespace

// ratelimit_fuzz_limit_parse: toNanoseconds checks only the upper end, so a period far below
// zero is cast to 64 bits, wraps, and may come out as a valid positive period. docs/semantics.md:
// `period` < 1 ns throws std::invalid_argument. (Skip to drop: limit_parse_fuzz.cpp, fuzzPer.)
TEST_CASE("Limit: per with a duration below -2^63 ns throws", "[limit]") {
    CHECK_THROWS_AS(Limit::per(28, std::chrono::microseconds{-2098939144314028032}),
                    std::invalid_argument);
    CHECK_THROWS_AS(Limit::per(1, std::chrono::seconds{-9223372037}), std::invalid_argument);
}

// ratelimit_fuzz_fixed_window and _sliding_counter at the bottom of the clock's range: the
// epoch-aligned window holding INT64_MIN starts below INT64_MIN when the period does not divide
// 2^63. The window start was clamped to INT64_MIN, so the window ran up to a whole period past
// docs/semantics.md's `[k·W, (k+1)·W)`; the state now holds the offset into the window instead.
// With W = 2^62 − 1 the window holding -2^63 is [-3W, -2W), which ends 2 ticks later.
TEST_CASE(
    "FixedWindow and SlidingCounter: windows at INT64_MIN end where epoch-aligned windows end",
    "[fixed_window][sliding_counter][memory]") {
    const Limit limit = Limit::per(1, Nanos{k62 - 1});
    ManualClock clock;
    clock.set(Nanos{kMin});
    ratelimit::FixedWindow<MemoryStorage, ManualClock> fixed{limit, MemoryStorage{}, clock};
    const ratelimit::Decision first = fixed.tryAcquire("k");
    CHECK(first.allowed);
    CHECK(first.resetAfter == Nanos{2});
    const ratelimit::Decision second = fixed.tryAcquire("k");
    CHECK_FALSE(second.allowed);
    CHECK(second.retryAfter == Nanos{2});
    clock.advance(Nanos{2});  // -2W: the next aligned window, fresh
    const ratelimit::Decision next = fixed.tryAcquire("k");
    CHECK(next.allowed);
    CHECK(next.resetAfter == Nanos{k62 - 1});
    clock.set(Nanos{kMin});

    // The sliding counter's windows: W = 2^61 − 1, the window holding -2^63 starts at -5W,
    // so e = 2^61 − 5 and resetAfter = 2W − e = 2^61 + 3.
    ratelimit::SlidingCounter<MemoryStorage, ManualClock> counter{
        Limit::per(1, Nanos{(k62 / 2) - 1}), MemoryStorage{}, clock};
    CHECK(counter.tryAcquire("k").resetAfter == Nanos{(k62 / 2) + 3});
}

// ratelimit_fuzz_sliding_log: a step back of exactly 2^63 ticks saturates the shift at
// 2^63 − 1, so the log lands one tick in the future of `now` and the wait grows by one tick.
// docs/semantics.md: after a step back "the waits after the step are the waits before it" and
// "now + retryAfter still passes".
TEST_CASE("SlidingLog: a step back of 2^63 ticks keeps the wait", "[sliding_log][memory]") {
    ManualClock clock;
    ratelimit::SlidingLog<MemoryStorage, ManualClock> log{Limit::per(1, Nanos{1}), MemoryStorage{},
                                                          clock};
    clock.set(Nanos{k62 + 5});
    REQUIRE(log.tryAcquire("k").allowed);
    clock.set(Nanos{-k62 + 5});  // 2^63 ticks back
    const ratelimit::Decision refused = log.tryAcquire("k");
    CHECK_FALSE(refused.allowed);
    CHECK(refused.retryAfter == Nanos{1});
    CHECK(refused.resetAfter == Nanos{1});
    clock.advance(Nanos{1});
    CHECK(log.tryAcquire("k").allowed);
}

// ratelimit_fuzz_fixed_window (rolling bound): a refused call after a step back rebases the key,
// so its shifted window ends at the clock time it had before the step; there the key is fresh
// and returns to the epoch-aligned window holding that time — the window it already used. A
// clock oscillating by one tick thus opens a new window per oscillation: 10 per 5 ns admits 10
// per tick. docs/semantics.md: a step back is "no time passed ... nothing extra admitted"; in the
// key's own time (3 ticks here) a fixed window admits at most two windows' worth, 2·count.
TEST_CASE("FixedWindow: a clock oscillating by a tick admits no more", "[fixed_window][memory]") {
    ManualClock clock;
    ratelimit::FixedWindow<MemoryStorage, ManualClock> window{Limit::per(10, Nanos{5}),
                                                              MemoryStorage{}, clock};
    std::int64_t admitted = 0;
    for (int i = 0; i < 3; ++i) {
        clock.set(Nanos{4});
        admitted += window.tryAcquire("k", 10).allowed ? 10 : 0;
        clock.set(Nanos{3});
        CHECK_FALSE(window.tryAcquire("k", 1).allowed);  // refused; rebases the key
    }
    CHECK(admitted <= 20);
}
