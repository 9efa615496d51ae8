// Tests of the sliding log (include/ratelimit/algorithms/sliding_log.hpp) through the public
// limiter, driven by ManualClock only, and held against an exact brute-force log.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>

#include <ratelimit/algorithms/sliding_log.hpp>

#include "algorithms/common.hpp"
#include "support/catch.hpp"

namespace {

using namespace std::chrono_literals;
using ratelimit::Decision;
using ratelimit::Limit;
using ratelimit::LimiterOptions;
using ratelimit::ManualClock;
using rltest::at;
using rltest::Nanos;
using Log = ratelimit::SlidingLog<ratelimit::MemoryStorage, ratelimit::ManualClock>;

std::pair<int, Decision> send(Log& limiter, int n, std::string_view key = "client") {
    int allowed = 0;
    Decision last;
    for (int i = 0; i < n; ++i) {
        last = limiter.tryAcquire(key);
        allowed += last.allowed ? 1 : 0;
    }
    return {allowed, last};
}

/// The exact log, by brute force: every admitted request with its time; one made at t counts
/// while now < t + W. Times only move forward.
class ExactLog {
public:
    ExactLog(std::int64_t count, std::int64_t window) : count_(count), window_(window) {}

    void expire(std::int64_t now) {
        while (!entries_.empty() && now - entries_.front().first >= window_) {
            entries_.pop_front();
        }
    }
    [[nodiscard]] std::int64_t used() const {
        std::int64_t sum = 0;
        for (const auto& e : entries_) {
            sum += e.second;
        }
        return sum;
    }
    [[nodiscard]] bool fits(std::int64_t cost) const { return used() + cost <= count_; }
    void add(std::int64_t now, std::int64_t cost) { entries_.emplace_back(now, cost); }

    /// The wait until the oldest entries have expired far enough for `cost` to fit.
    [[nodiscard]] std::int64_t wait(std::int64_t now, std::int64_t cost) const {
        std::int64_t left = used();
        for (const auto& e : entries_) {
            left -= e.second;
            if (left + cost <= count_) {
                return e.first + window_ - now;
            }
        }
        return 0;
    }
    [[nodiscard]] std::int64_t resetAfter(std::int64_t now) const {
        return entries_.empty() ? 0 : entries_.back().first + window_ - now;
    }

private:
    std::int64_t count_;
    std::int64_t window_;
    std::deque<std::pair<std::int64_t, std::int64_t>> entries_;
};

/// Random traffic on one key. With `exact`, the times are spread so that at most 60 distinct
/// times fall in one window (below the default 64 runs): every field must equal the brute-force
/// log's. Otherwise (few runs, merging) the limiter must never admit what the exact log would
/// refuse and never report more remaining than it.
void holdAgainstExactLog(const Limit& limit, LimiterOptions options, bool exact, std::uint64_t seed,
                         int calls) {
    ManualClock clock;
    auto limiter = rltest::makeLimiter<Log>(limit, clock, options);
    ExactLog log(limit.count, limit.period.count());
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
        log.expire(now);
        const std::int64_t cost = std::uniform_int_distribution<std::int64_t>(
            1, std::max<std::int64_t>(1, limit.count / 3))(rng);
        const Decision d = limiter.tryAcquire("k", cost, at(Nanos{now}));
        const auto context = [&] {
            return rltest::describe(limit) + " maxRuns " + std::to_string(options.maxRunsPerKey) +
                   " seed " + std::to_string(seed) + " call " + std::to_string(i) + " at " +
                   std::to_string(now) + "ns cost " + std::to_string(cost) + " exact used " +
                   std::to_string(log.used()) + " -> " + rltest::describe(d);
        };
        if (exact) {
            RLTEST_REQUIRE(d.allowed == log.fits(cost), context());
            RLTEST_REQUIRE(d.remaining == limit.count - log.used() - (d.allowed ? cost : 0),
                           context());
            if (!d.allowed) {
                RLTEST_REQUIRE(d.retryAfter.count() == log.wait(now, cost), context());
                RLTEST_REQUIRE(d.resetAfter.count() == log.resetAfter(now), context());
            } else {
                RLTEST_REQUIRE(d.resetAfter == limit.period, context());
            }
        } else {
            // Conservative: never over-admits, never reports more than is left.
            RLTEST_REQUIRE(!d.allowed || log.fits(cost), context());
            RLTEST_REQUIRE(d.remaining <= limit.count - log.used() - (d.allowed ? cost : 0),
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
            log.add(now, cost);
            ++admitted;
        }
    }
    CHECK(admitted > calls / 10);
}

}  // namespace

TEST_CASE("SlidingLog: a burst, a half-minute and a minute later at 10/min",
          "[sliding_log][memory]") {
    // Scenario 1 of the design: rule 10/min, empty at 00:00.
    ManualClock clock;
    Log limiter{Limit::perMinute(10), {}, clock};
    const auto [burst, afterBurst] = send(limiter, 10);
    CHECK(burst == 10);
    CHECK(afterBurst.resetAfter == 60s);
    clock.set(at(30s));
    const auto [half, afterHalf] = send(limiter, 5);
    CHECK(half == 0);
    CHECK(afterHalf.retryAfter == 30s);  // the 00:00 entries stop counting at exactly 01:00
    CHECK(afterHalf.resetAfter == 30s);
    clock.set(at(1min + 10s));
    const auto [late, afterLate] = send(limiter, 5);
    CHECK(late == 5);
    CHECK(afterLate.remaining == 5);
    CHECK(afterLate.resetAfter == 60s);
}

TEST_CASE("SlidingLog: five, five after 30 s and five after 40 s: the last five are refused",
          "[sliding_log][memory]") {
    ManualClock clock;
    Log limiter{Limit::perMinute(10), {}, clock};
    CHECK(send(limiter, 5).first == 5);
    clock.set(at(30s));
    CHECK(send(limiter, 5).first == 5);
    clock.set(at(40s));
    const auto [n, last] = send(limiter, 5);
    CHECK(n == 0);
    CHECK(last.retryAfter == 20s);  // the five of 00:00 expire at 01:00
    CHECK(last.resetAfter == 50s);  // the five of 00:30 expire at 01:30
    // At 01:00 exactly five fit again.
    clock.set(at(1min));
    CHECK(send(limiter, 10).first == 5);
}

TEST_CASE("SlidingLog: 100 at 00:59 and 100 at 01:00 admit only the first 100 at 100/min",
          "[sliding_log][memory]") {
    ManualClock clock;
    Log limiter{Limit::perMinute(100), {}, clock};
    clock.set(at(59s));
    CHECK(send(limiter, 100).first == 100);
    clock.set(at(60s));
    const auto [n, last] = send(limiter, 100);
    CHECK(n == 0);
    CHECK(last.retryAfter == 59s);
    CHECK(!limiter.tryAcquire("client", 1, at(119s - 1ns)).allowed);
    CHECK(limiter.tryAcquire("client", 100, at(119s)).allowed);
}

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
        LimiterOptions options;
        options.maxRunsPerKey = bad;
        try {
            Log limiter{Limit::perMinute(10), {}, clock, options};
            FAIL("accepted maxRunsPerKey " << bad);
        } catch (const std::invalid_argument& e) {
            CHECK(std::string(e.what()).find("maxRunsPerKey") != std::string::npos);
        }
    }
    for (const std::int64_t good : {std::int64_t{1}, std::int64_t{1} << 20}) {
        LimiterOptions options;
        options.maxRunsPerKey = good;
        CHECK_NOTHROW(Log{Limit::perMinute(10), {}, clock, options});
    }
}

TEST_CASE("SlidingLog: a denied request is not logged", "[sliding_log][memory]") {
    rltest::checkRefusalsConsumeNothing<Log>(Limit::perMinute(10));
    rltest::checkRefusalsConsumeNothing<Log>(Limit::per(3, 10s));
    rltest::checkRefusalsConsumeNothing<Log>(Limit::perSecond(7));
}

TEST_CASE("SlidingLog: a cost of zero is a peek", "[sliding_log][memory]") {
    rltest::checkCostZeroIsAPeek<Log>();
}

TEST_CASE("SlidingLog: a cost above the count is never allowed and consumes nothing",
          "[sliding_log][memory]") {
    rltest::checkImpossibleCosts<Log>(Limit::perMinute(10));
    rltest::checkImpossibleCosts<Log>(Limit::perMinute(10).withBurst(40));
    rltest::checkImpossibleCosts<Log>(Limit::perHour(999'999));
    rltest::checkImpossibleCosts<Log>(Limit::per(Limit::kMaxCount, 1h));
}

TEST_CASE("SlidingLog: a negative cost throws std::invalid_argument", "[sliding_log][memory]") {
    rltest::checkNegativeCostThrows<Log>();
}

TEST_CASE("SlidingLog: the decision's limit is the count, whatever the burst",
          "[sliding_log][memory]") {
    rltest::checkLimitField<Log>();
}

TEST_CASE("SlidingLog: any byte string is a key of its own", "[sliding_log][memory]") {
    rltest::checkKeysAreBytes<Log>();
}

TEST_CASE("SlidingLog: reset forgets one key", "[sliding_log][memory]") {
    rltest::checkReset<Log>(Limit::perMinute(10));
}

TEST_CASE("SlidingLog: random traffic keeps every rule of a decision", "[sliding_log][memory]") {
    std::uint64_t seed = 31;
    for (const Limit& limit : rltest::sampleLimits()) {
        rltest::checkRandomTraffic<Log>(limit, seed++, 1500);
    }
}

TEST_CASE("SlidingLog: a clock stepping back admits nothing extra and keeps the wait",
          "[sliding_log][memory]") {
    std::uint64_t seed = 400;
    for (const Limit limit : {Limit::perMinute(10), Limit::per(3, 10s), Limit::perHour(999'999),
                              Limit::perSecond(7), Limit::per(10, 90s)}) {
        for (const auto step : {Nanos{1s}, Nanos{1h}, Nanos{24h}}) {
            rltest::checkStepBackAroundExhaustedKey<Log>(limit, step, seed++);
            rltest::checkStepBackKeepsRemaining<Log>(limit, step);
        }
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

TEST_CASE("SlidingLog: works at both ends of the clock's range", "[sliding_log][memory]") {
    rltest::checkClockRangeEnds<Log>(Limit::perMinute(10));
    rltest::checkClockRangeEnds<Log>(Limit::per(3, 10s));
    rltest::checkClockRangeEnds<Log>(Limit::perHour(999'999));
}

TEST_CASE("SlidingLog: a window of 2^62 ns or more is refused at construction",
          "[sliding_log][memory]") {
    ManualClock clock;
    try {
        Log limiter{Limit::per(1, std::chrono::nanoseconds{std::int64_t{1} << 62}), {}, clock};
        FAIL("constructed a sliding log with a 2^62 ns window");
    } catch (const std::invalid_argument& e) {
        const std::string what = e.what();
        INFO(what);
        CHECK(what.find("2^62") != std::string::npos);
        CHECK(what.find("period") != std::string::npos);
    }
    CHECK_NOTHROW(
        Log{Limit::per(Limit::kMaxCount, std::chrono::nanoseconds{(std::int64_t{1} << 62) - 1}),
            {},
            clock});
}
