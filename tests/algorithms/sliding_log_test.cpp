// Tests of the sliding log (include/ratelimit/algorithms/sliding_log.hpp) through the public
// limiter, driven by ManualClock only, and held against the brute-force log of
// tests/support/algorithm_references.hpp: its own scenarios. What every algorithm does (and the
// worked scenarios) is in contract_test.cpp.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>

#include <ratelimit/algorithms/sliding_log.hpp>

#include "algorithms/common.hpp"
#include "support/algorithm_references.hpp"
#include "support/catch.hpp"

using namespace std::chrono_literals;

namespace ratelimit_test {

namespace {

using Log = MemorySlidingLog;

/// Random traffic on one key, held against two brute-force logs: `exactLog` of every request
/// the limiter admitted (no merging), and `mergedLog`, the reference with the limiter's own
/// maxRunsPerKey, which must make every decision the limiter makes. With `exact`, the times are
/// spread so that at most 60 distinct times fall in one window (below the default 64 runs): every
/// field must equal the exact log's. Otherwise (few runs, merging) the limiter must never admit
/// what the exact log would refuse and never report more remaining than it.
void holdAgainstExactLog(const Limit& limit, LimiterOptions options, bool exact, std::uint64_t seed,
                         int calls) {
    ManualClock clock;
    auto limiter = makeLimiter<Log>(limit, clock, options);
    const Params exactParams{limit.count, limit.period.count(), limit.burst,
                             std::numeric_limits<std::int64_t>::max()};
    const Params mergedParams{limit.count, limit.period.count(), limit.burst,
                              options.maxRunsPerKey};
    SlidingLogRef::State exactLog;
    SlidingLogRef::State mergedLog;
    std::mt19937_64 rng(seed);
    const std::int64_t w = limit.period.count();
    std::int64_t now = 1'000'000'000'000;
    int admitted = 0;
    for (int i = 0; i < calls; ++i) {
        const int pick = std::uniform_int_distribution<int>(0, 9)(rng);
        if (exact) {
            now += pick < 3 ? 0 : std::uniform_int_distribution<std::int64_t>(w / 60, w / 10)(rng);
        } else {
            now += pick < 3 ? 0 : std::uniform_int_distribution<std::int64_t>(1, w / 8)(rng);
        }
        const std::int64_t cost = std::uniform_int_distribution<std::int64_t>(
            1, std::max<std::int64_t>(1, limit.count / 3))(rng);
        // The exact log's answer, applied below only if the limiter admitted.
        SlidingLogRef::State exactAfter = exactLog;
        const Expected e = SlidingLogRef::decide(exactAfter, exactParams, now, cost);
        const std::int64_t exactUsed =
            limit.count - static_cast<std::int64_t>(e.remaining) - (e.allowed ? cost : 0);
        const Decision merged =
            toDecision(SlidingLogRef::decide(mergedLog, mergedParams, now, cost));
        const Decision d = limiter.tryAcquire("k", cost, at(Nanos{now}));
        const auto context = [&] {
            return describe(limit) + " maxRuns " + std::to_string(options.maxRunsPerKey) +
                   " seed " + std::to_string(seed) + " call " + std::to_string(i) + " at " +
                   std::to_string(now) + "ns cost " + std::to_string(cost) + " exact used " +
                   std::to_string(exactUsed) + " -> " + describe(d) + ", merged log " +
                   describe(merged);
        };
        RLTEST_REQUIRE(d == merged, context());
        if (exact) {
            RLTEST_REQUIRE(d == toDecision(e), context());
        } else {
            // Conservative: never over-admits, never reports more than is left.
            RLTEST_REQUIRE(!d.allowed || e.allowed, context());
            RLTEST_REQUIRE(d.remaining <= limit.count - exactUsed - (d.allowed ? cost : 0),
                           context());
            if (!d.allowed) {
                // Still honest about its own wait.
                RLTEST_REQUIRE(limiter.peek("k", cost, at(Nanos{now}) + d.retryAfter).allowed,
                               context());
                RLTEST_REQUIRE(
                    !limiter.peek("k", cost, at(Nanos{now}) + d.retryAfter - 1ns).allowed,
                    context());
            }
        }
        if (d.allowed) {
            exactLog = exactAfter;
            ++admitted;
        }
    }
    CHECK(admitted > calls / 10);
}

}  // namespace

TEST_CASE("SlidingLog: an entry made at t stops counting at exactly t + W",
          "[sliding_log][memory]") {
    ManualClock clock;
    Log limiter{Limit::per(3, 10s), {}, clock};
    for (const Nanos t : {Nanos{0}, Nanos{7ns}, Nanos{-25s}, Nanos{1h + 3ns}}) {
        INFO("t = " << t.count() << "ns");
        const std::string key = "k" + std::to_string(t.count());
        REQUIRE(limiter.tryAcquire(key, 3, at(t)).allowed);
        const Decision edge = limiter.tryAcquire(key, 1, at(t + 10s - 1ns));
        CHECK(!edge.allowed);
        CHECK(edge.retryAfter == 1ns);
        CHECK(edge.resetAfter == 1ns);
        const Decision fresh = limiter.peek(key, 0, at(t + 10s));
        CHECK(fresh.remaining == 3);
        CHECK(fresh.resetAfter == 0ns);
        CHECK(limiter.tryAcquire(key, 3, at(t + 10s)).allowed);
    }
}

TEST_CASE("SlidingLog: retryAfter waits for the oldest entries that make room",
          "[sliding_log][memory]") {
    ManualClock clock;
    Log limiter{Limit::perMinute(10), {}, clock};
    REQUIRE(limiter.tryAcquire("k", 3, at(0s)).allowed);
    REQUIRE(limiter.tryAcquire("k", 3, at(10s)).allowed);
    REQUIRE(limiter.tryAcquire("k", 4, at(20s)).allowed);
    // At 00:30 a cost of 5 needs the 3 of 00:00 and the 3 of 00:10 gone: 01:10.
    const Decision five = limiter.tryAcquire("k", 5, at(30s));
    CHECK(!five.allowed);
    CHECK(five.retryAfter == 40s);
    CHECK(five.resetAfter == 50s);
    // A cost of 3 needs only the oldest: 01:00. A cost of 10 needs all: 01:20.
    CHECK(limiter.tryAcquire("k", 3, at(30s)).retryAfter == 30s);
    CHECK(limiter.tryAcquire("k", 10, at(30s)).retryAfter == 50s);
    CHECK(!limiter.tryAcquire("k", 5, at(70s - 1ns)).allowed);
    CHECK(limiter.tryAcquire("k", 5, at(70s)).allowed);
}

TEST_CASE("SlidingLog: merged runs expire at the later time, never earlier",
          "[sliding_log][memory]") {
    // Two runs at most: 1 at 00:00, 1 at 00:10, 1 at 00:20 keep (00:10: 2), (00:20: 1).
    ManualClock clock;
    LimiterOptions options;
    options.maxRunsPerKey = 2;
    Log limiter{Limit::perMinute(3), {}, clock, options};
    REQUIRE(limiter.tryAcquire("k", 1, at(0s)).allowed);
    REQUIRE(limiter.tryAcquire("k", 1, at(10s)).allowed);
    REQUIRE(limiter.tryAcquire("k", 1, at(20s)).allowed);
    // An exact log would have room at 01:00; the merged one only at 01:10.
    const Decision d = limiter.tryAcquire("k", 1, at(60s));
    CHECK(!d.allowed);
    CHECK(d.retryAfter == 10s);
    CHECK(!limiter.tryAcquire("k", 1, at(70s - 1ns)).allowed);
    CHECK(limiter.tryAcquire("k", 2, at(70s)).allowed);
    CHECK(!limiter.tryAcquire("k", 1, at(70s)).allowed);
}

TEST_CASE("SlidingLog: with few distinct times it is exactly the brute-force log",
          "[sliding_log][memory]") {
    std::uint64_t seed = 40;
    for (const Limit limit : {Limit::perMinute(10), Limit::perMinute(100), Limit::perMinute(7)}) {
        holdAgainstExactLog(limit, LimiterOptions{}, true, seed++, 5000);
    }
}

TEST_CASE("SlidingLog: merging runs (maxRunsPerKey) never over-admits", "[sliding_log][memory]") {
    std::uint64_t seed = 50;
    for (const std::int64_t maxRuns :
         {std::int64_t{1}, std::int64_t{2}, std::int64_t{4}, std::int64_t{5}}) {
        for (const Limit limit :
             {Limit::perMinute(10), Limit::perMinute(100), Limit::per(1000, 1s)}) {
            LimiterOptions options;
            options.maxRunsPerKey = maxRuns;
            holdAgainstExactLog(limit, options, false, seed++, 4000);
        }
    }
    // The designated-initializer form the options are meant to be written in.
    holdAgainstExactLog(Limit::perMinute(50), LimiterOptions{.maxRunsPerKey = 4}, false, seed,
                        4000);
}

TEST_CASE("SlidingLog: maxRunsPerKey outside 1..2^20 is refused at construction",
          "[sliding_log][memory]") {
    ManualClock clock;
    for (const std::int64_t bad :
         {std::int64_t{0}, std::int64_t{-1}, (std::int64_t{1} << 20) + 1}) {
        INFO("maxRunsPerKey " << bad);
        LimiterOptions options;
        options.maxRunsPerKey = bad;
        CHECK_THROWS_AS((Log{Limit::perMinute(10), {}, clock, options}), std::invalid_argument);
        CHECK_THROWS_WITH((Log{Limit::perMinute(10), {}, clock, options}),
                          Contains("maxRunsPerKey"));
    }
    for (const std::int64_t good : {std::int64_t{1}, std::int64_t{1} << 20}) {
        LimiterOptions options;
        options.maxRunsPerKey = good;
        CHECK_NOTHROW(Log{Limit::perMinute(10), {}, clock, options});
    }
}

TEST_CASE("SlidingLog: after a step back the log shifts with the clock", "[sliding_log][memory]") {
    // 10/min: 5 at 10:00:00 and 5 at 10:00:30, then the clock steps back one hour.
    ManualClock clock;
    Log limiter{Limit::perMinute(10), {}, clock};
    REQUIRE(limiter.tryAcquire("k", 5, at(10h)).allowed);
    REQUIRE(limiter.tryAcquire("k", 5, at(10h + 30s)).allowed);
    const Decision before = limiter.tryAcquire("k", 5, at(10h + 30s));
    CHECK(before.retryAfter == 30s);
    CHECK(before.resetAfter == 60s);
    const Decision after = limiter.tryAcquire("k", 5, at(9h + 30s));
    CHECK(!after.allowed);
    CHECK(after.retryAfter == 30s);
    CHECK(after.resetAfter == 60s);
    CHECK(!limiter.tryAcquire("k", 1, at(9h + 1min - 1ns)).allowed);
    CHECK(limiter.tryAcquire("k", 5, at(9h + 1min)).allowed);
    CHECK(!limiter.tryAcquire("k", 1, at(9h + 1min)).allowed);
    CHECK(limiter.tryAcquire("k", 5, at(9h + 1min + 30s)).allowed);
}

TEST_CASE("SlidingLog: near the clock's smallest time, a step back keeps now + retryAfter",
          "[sliding_log][memory]") {
    // 10/min: 6 at the smallest time, 4 five seconds later, then the clock steps back one second.
    // Moved back by a second, the oldest entry would fall below the clock's range: it stays at
    // the floor (younger, so it expires later), and the wait counts from where it stays.
    const ManualClock::time_point min = ManualClock::time_point::min();
    for (const LimiterOptions& options :
         {LimiterOptions{.lateCallTolerance = 0ns}, LimiterOptions{}}) {
        INFO("late-call tolerance " << options.lateCallTolerance.count() << "ns");
        ManualClock clock;
        Log limiter{Limit::perMinute(10), {}, clock, options};
        REQUIRE(limiter.tryAcquire("k", 6, min).allowed);
        REQUIRE(limiter.tryAcquire("k", 4, min + 5s).allowed);
        const ManualClock::time_point back = min + 4s;
        const Decision refused = limiter.tryAcquire("k", 1, back);
        REQUIRE(!refused.allowed);
        CHECK(refused.retryAfter <= 1min);
        CHECK(!limiter.tryAcquire("k", 1, back + refused.retryAfter - 1ns).allowed);
        const Decision onTime = limiter.tryAcquire("k", 1, back + refused.retryAfter);
        INFO("at back + retryAfter: " << describe(onTime));
        CHECK(onTime.allowed);
    }
}

TEST_CASE("SlidingLog: a window of 2^62 ns or more is refused at construction",
          "[sliding_log][memory]") {
    ManualClock clock;
    const Limit tooLong = Limit::per(1, std::chrono::nanoseconds{std::int64_t{1} << 62});
    CHECK_THROWS_AS((Log{tooLong, {}, clock}), std::invalid_argument);
    CHECK_THROWS_WITH((Log{tooLong, {}, clock}), Contains("2^62") && Contains("period"));
    CHECK_NOTHROW(
        Log{Limit::per(Limit::kMaxCount, std::chrono::nanoseconds{(std::int64_t{1} << 62) - 1}),
            {},
            clock});
}

TEST_CASE("SlidingLog: a key's one run is held in its state, its runs after that on the heap",
          "[sliding_log][memory]") {
    using Model = ratelimit::SlidingLogModel;
    using ratelimit::Quota;
    using ratelimit::Tick;
    STATIC_REQUIRE(sizeof(Model::State) == 16);
    const Quota q = Quota::make<Model>(Limit::per(5, std::chrono::seconds{1}), 1, 64);
    const auto inState = [](const Model::State& s) {
        const auto* const self = reinterpret_cast<const std::byte*>(&s);  // NOLINT: an address
        const auto* const first = reinterpret_cast<const std::byte*>(s.runs.begin());  // NOLINT
        return first >= self && first < self + sizeof s;
    };
    const Tick second = q.period;
    Model::State state;
    CHECK(Model::step(state, q, 0, 2).allowed);
    CHECK(Model::step(state, q, 0, 1).allowed);  // the same time: the same run
    REQUIRE(state.runs.size() == 1);
    CHECK(inState(state));
    CHECK(Model::lastWrite(state) == 0);
    Model::refund(state, q, 0, 3);  // to empty, and the next run in place again
    CHECK(state.runs.empty());
    CHECK(Model::step(state, q, 1, 4).allowed);
    CHECK(inState(state));
    CHECK(Model::step(state, q, 2, 1).allowed);  // a second time: both runs to the heap
    CHECK_FALSE(inState(state));
    CHECK(state.runs.size() == 2);
    const Decision full = Model::step(state, q, 3, 1);
    CHECK_FALSE(full.allowed);
    CHECK(full.remaining == 0);
    const Decision freed = Model::step(state, q, second + 1, 4);  // the first run expired: 4 free
    CHECK(freed.allowed);
    CHECK(freed.remaining == 0);
    CHECK(state.runs.size() == 2);
    const Decision bothExpired = Model::step(state, q, 3 * second, 5);
    CHECK(bothExpired.allowed);
    CHECK(bothExpired.remaining == 0);
    CHECK(state.runs.size() == 1);
    CHECK(Model::isFresh(state, q, 4 * second));
    Model::State moved = std::move(state);
    CHECK(moved.runs.back().count == 5);
}

}  // namespace ratelimit_test
