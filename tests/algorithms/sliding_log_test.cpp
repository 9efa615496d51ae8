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
#include <ratelimit/detail/run_log.hpp>

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
    CHECK(Model::step(state, q, 2, 1).allowed);  // a second time: both runs to the heap
    CHECK_FALSE(inState(state));
    CHECK(state.runs.size() == 2);
    const Decision full = Model::step(state, q, 3, 1);
    CHECK_FALSE(full.allowed);
    CHECK(full.remaining == 0);
    CHECK(Model::step(state, q, second + 1, 4).allowed);  // the first run expired: 4 free
    CHECK(state.runs.size() == 2);
    CHECK(Model::step(state, q, 3 * second, 5).allowed);  // both expired
    CHECK(state.runs.size() == 1);
    CHECK(Model::isFresh(state, q, 4 * second));
    Model::State moved = std::move(state);
    CHECK(moved.runs.back().count == 5);
}

}  // namespace ratelimit_test

// ---------------------------------------------------------------------------------------------
// The runs' container (include/ratelimit/detail/run_log.hpp)

namespace {

using Runs = ratelimit::detail::RunLog;
using Run = ratelimit::detail::LogRun;

/// The times in order, as a number with one digit each (times 0..9). Checks on the way that
/// the log's total is the sum of its counts.
std::int64_t digits(const Runs& v) {
    std::int64_t out = 0;
    std::int64_t sum = 0;
    for (const Run& r : v) {
        out = out * 10 + r.time;
        sum += r.count;
    }
    CHECK(v.total() == sum);
    CHECK(v.end() - v.begin() == static_cast<std::ptrdiff_t>(v.size()));
    return out;
}

/// Whether `v`'s runs are held in the log's own 16 bytes rather than on the heap.
bool heldInPlace(const Runs& v) {
    const auto* const self = reinterpret_cast<const std::byte*>(&v);  // NOLINT: an address test
    const auto* const first = reinterpret_cast<const std::byte*>(v.begin());  // NOLINT: as above
    return first >= self && first < self + sizeof v;
}

}  // namespace

TEST_CASE("RunLog: grows by doubling and keeps its runs in order", "[run_log]") {
    STATIC_REQUIRE(sizeof(Runs) == 16);
    Runs v;
    CHECK(v.empty());
    CHECK(v.total() == 0);
    CHECK(v.capacity() == 1);  // one in place
    for (std::int64_t i = 1; i <= 9; ++i) {
        v.append(Run{i, i + 1});
        CHECK(v.size() == static_cast<std::size_t>(i));
        CHECK(v.back().count == i + 1);
        CHECK(v.total() == i * (i + 3) / 2);
    }
    CHECK(v.capacity() == 16);  // 1 in place, then 2, 4, 8, 16: never more than twice the size
    CHECK(digits(v) == 123456789);
    v.addToNewest(5);
    CHECK(v.back().count == 15);
    CHECK(v.total() == 59);
}

TEST_CASE("RunLog: eraseFront drops a prefix and keeps the rest", "[run_log]") {
    Runs v;
    for (std::int64_t i = 1; i <= 6; ++i) {
        v.append(Run{i, i});
    }
    v.eraseFront(0);
    CHECK(digits(v) == 123456);
    v.eraseFront(2);
    CHECK(digits(v) == 3456);
    CHECK(v.total() == 18);
    v.eraseFront(1);
    CHECK(digits(v) == 456);
    v.eraseFront(3);
    CHECK(v.empty());
    CHECK(v.total() == 0);
    v.append(Run{7, 2});  // the room stays
    CHECK(digits(v) == 7);
    CHECK(v.total() == 2);
    CHECK(v.capacity() == 8);
}

TEST_CASE("RunLog: eraseFront of nothing, and mergeOldest of a full log", "[run_log]") {
    Runs empty;
    empty.eraseFront(0);
    CHECK(empty.empty());
    CHECK(empty.capacity() == 1);

    // A full sliding log's merge: the oldest run's count joins the next, the total stays.
    Runs v;
    for (std::int64_t i = 0; i < 65; ++i) {
        v.append(Run{i, i + 1});
    }
    const std::int64_t total = v.total();
    CHECK(total == 65 * 66 / 2);
    v.mergeOldest();
    REQUIRE(v.size() == 64);
    CHECK(v.total() == total);
    CHECK(v[0].time == 1);
    CHECK(v[0].count == 3);
    for (std::size_t i = 1; i < v.size(); ++i) {
        const auto expected = static_cast<std::int64_t>(i) + 1;
        CHECK(v[i].time == expected);
        CHECK(v[i].count == expected + 1);
    }
}

TEST_CASE("RunLog: a full log's new runs reuse the room its dropped ones left", "[run_log]") {
    // The sliding log at its cap: every new run merges the oldest into the next. The room stays
    // 128 runs for 65 at most; a drop moves nothing, and the runs move down to the room's start
    // only when an append finds its last slot taken: once every 64 calls here. The total
    // follows every drop and every move.
    Runs v;
    for (std::int64_t i = 0; i < 65; ++i) {
        v.append(Run{i, 1});
    }
    REQUIRE(v.capacity() == 128);
    const Run* const start = v.begin();
    int moves = 0;
    for (std::int64_t next = 65; next < 1000; ++next) {
        const Run* const first = v.begin();
        v.eraseFront(1);
        REQUIRE(v.begin() == first + 1);  // dropped in place
        v.append(Run{next, 1});
        if (v.begin() != first + 1) {
            REQUIRE(v.begin() == start);  // moved down to the room's start
            ++moves;
        }
        REQUIRE(v.size() == 65);
        REQUIRE(v.capacity() == 128);
        REQUIRE(v.total() == 65);
        for (std::size_t i = 0; i < v.size(); ++i) {
            REQUIRE(v[i].time == next - 64 + static_cast<std::int64_t>(i));
        }
        REQUIRE(&v.back() == &v[64]);
    }
    CHECK(moves == (1000 - 65) / 64);
}

TEST_CASE("RunLog: a room full from its first free slot on moves down, not out", "[run_log]") {
    Runs v;
    for (std::int64_t i = 1; i <= 4; ++i) {
        v.append(Run{i, 1});
    }
    REQUIRE(v.capacity() == 4);
    const Run* const start = v.begin();
    v.eraseFront(1);
    v.append(Run{5, 1});  // the last slot was taken: 2 3 4 move down, 5 after them
    CHECK(digits(v) == 2345);
    CHECK(v.capacity() == 4);
    CHECK(v.begin() == start);
    v.append(Run{6, 1});  // full with nothing free before: the room doubles
    CHECK(digits(v) == 23456);
    CHECK(v.capacity() == 8);
    const Run* const grown = v.begin();
    v.takeFromNewest(1);
    v.eraseFront(2);
    CHECK(digits(v) == 45);
    CHECK(v.begin() == grown + 2);
    v.eraseFront(2);  // empty: the whole room is free again, from its start
    CHECK(v.empty());
    CHECK(v.total() == 0);
    v.append(Run{1, 1});
    CHECK(v.begin() == grown);
    for (std::int64_t i = 2; i <= 8; ++i) {
        v.append(Run{i, 1});
    }
    CHECK(digits(v) == 12345678);
    CHECK(v.capacity() == 8);
}

TEST_CASE("RunLog: a refund's takes to empty and a reserve, with free slots before", "[run_log]") {
    Runs v;
    for (std::int64_t i = 1; i <= 7; ++i) {
        v.append(Run{i, 2});
    }
    v.eraseFront(3);
    v.reserve(8);  // the room holds 8: it stays, free slots and all
    CHECK(v.capacity() == 8);
    CHECK(digits(v) == 4567);
    v.reserve(16);  // a new room: the runs alone, at its start
    CHECK(v.capacity() == 16);
    CHECK(digits(v) == 4567);
    v.eraseFront(2);
    const Run* const third = v.begin();
    v.takeFromNewest(1);  // part of a run: it stays
    CHECK(v.size() == 2);
    CHECK(v.back().count == 1);
    CHECK(v.total() == 3);
    v.takeFromNewest(1);
    v.takeFromNewest(2);  // empty by the back, as a refund empties a log
    CHECK(v.empty());
    CHECK(v.total() == 0);
    v.append(Run{9, 1});  // from where the first run was
    CHECK(v.begin() == third);
    CHECK(digits(v) == 9);
    v.eraseFront(1);
    for (std::int64_t i = 1; i <= 9; ++i) {
        v.append(Run{i, 1});
    }
    CHECK(digits(v) == 123456789);
    CHECK(v.capacity() == 16);
}

TEST_CASE("RunLog: copies and moves of a log with free slots before its first", "[run_log]") {
    Runs v;
    for (std::int64_t i = 1; i <= 7; ++i) {
        v.append(Run{i, 1});
    }
    v.eraseFront(3);
    const Run* const first = v.begin();
    const Runs copy = v;  // only the runs: its room fits them
    CHECK(digits(copy) == 4567);
    CHECK(copy.capacity() == 4);
    Runs moved = std::move(v);  // the room and its free slots go along, freed once
    CHECK(moved.begin() == first);
    CHECK(digits(moved) == 4567);
    moved.append(Run{8, 1});
    CHECK(digits(moved) == 45678);
    CHECK(moved.capacity() == 8);
    moved = copy;
    CHECK(digits(moved) == 4567);
}

TEST_CASE("RunLog: copies are deep, moves leave the source empty", "[run_log]") {
    Runs v;
    for (std::int64_t i = 1; i <= 5; ++i) {
        v.append(Run{i, 1});
    }
    Runs copy = v;
    copy.append(Run{6, 1});
    copy.eraseFront(1);
    CHECK(digits(v) == 12345);
    CHECK(digits(copy) == 23456);

    Runs moved = std::move(copy);
    CHECK(digits(moved) == 23456);
    CHECK(copy.empty());  // NOLINT(bugprone-use-after-move,clang-analyzer-cplusplus.Move): defined
    CHECK(copy.total() == 0);  // NOLINT(bugprone-use-after-move,clang-analyzer-cplusplus.Move)

    Runs assigned;
    assigned = v;
    CHECK(digits(assigned) == 12345);
    assigned = Runs{};
    CHECK(assigned.empty());
}

TEST_CASE("RunLog: one run is held in place, the second moves both to the heap", "[run_log]") {
    Runs v;
    CHECK(heldInPlace(v));
    v.append(Run{1, std::numeric_limits<std::int64_t>::max() - 7});  // near the largest count
    CHECK(heldInPlace(v));
    CHECK(v.size() == 1);
    CHECK(v.capacity() == 1);
    CHECK(v.total() == std::numeric_limits<std::int64_t>::max() - 7);
    v.addToNewest(7);  // the largest count a run may have
    CHECK(v.back().count == std::numeric_limits<std::int64_t>::max());
    CHECK(v.size() == 1);
    v.takeFromNewest(std::numeric_limits<std::int64_t>::max() - 7);
    CHECK(v.back().count == 7);
    v.append(Run{2, 1});
    CHECK_FALSE(heldInPlace(v));
    CHECK(v.capacity() == 2);
    CHECK(digits(v) == 12);
    CHECK(v.total() == 8);
    CHECK(v[0].count == 7);
    v.eraseFront(1);  // the room stays: the key's runs come and go without a new chunk
    CHECK_FALSE(heldInPlace(v));
    CHECK(digits(v) == 2);
    v.takeFromNewest(1);
    CHECK(v.empty());
    CHECK(v.capacity() == 2);
}

TEST_CASE("RunLog: the run in place is dropped by a take or an erase, as a refund does",
          "[run_log]") {
    Runs v;
    v.append(Run{3, 2});
    v.eraseFront(0);
    CHECK(digits(v) == 3);
    v.eraseFront(1);
    CHECK(v.empty());
    CHECK(v.total() == 0);
    v.append(Run{4, 2});
    v.takeFromNewest(1);
    CHECK(v.size() == 1);
    CHECK(v.total() == 1);
    v.takeFromNewest(1);  // a refund takes the run's whole count
    CHECK(v.empty());
    CHECK(v.total() == 0);
    CHECK(heldInPlace(v));
    v.append(Run{5, 1});
    CHECK(digits(v) == 5);
    CHECK(v.size() == 1);
}

TEST_CASE("RunLog: reserve, copies and moves of the run in place", "[run_log]") {
    Runs v;
    v.reserve(1);
    CHECK(heldInPlace(v));
    v.append(Run{6, 3});
    v.reserve(1);
    CHECK(heldInPlace(v));
    Runs copy = v;
    CHECK(heldInPlace(copy));
    CHECK(digits(copy) == 6);
    Runs moved = std::move(v);
    CHECK(heldInPlace(moved));
    CHECK(digits(moved) == 6);
    CHECK(v.empty());  // NOLINT(bugprone-use-after-move,clang-analyzer-cplusplus.Move): defined
    moved.reserve(5);  // to the heap, its run and total along
    CHECK_FALSE(heldInPlace(moved));
    CHECK(moved.capacity() == 8);
    CHECK(digits(moved) == 6);
    CHECK(moved.total() == 3);

    Runs heapOfOne;  // a heap room holding one run copies into place
    heapOfOne.append(Run{1, 1});
    heapOfOne.append(Run{2, 1});
    heapOfOne.takeFromNewest(1);
    REQUIRE_FALSE(heldInPlace(heapOfOne));
    const Runs small = heapOfOne;
    CHECK(heldInPlace(small));
    CHECK(digits(small) == 1);
    moved = heapOfOne;  // and assigning one form over the other frees the heap room once
    CHECK(digits(moved) == 1);
    heapOfOne = small;
    CHECK(heldInPlace(heapOfOne));
    CHECK(digits(heapOfOne) == 1);
}
