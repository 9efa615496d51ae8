// Tests of include/ratelimit/limiter.hpp: exactness under contention (docs/semantics.md "Atomic
// or nothing"), bounds while the clock moves under contention, defaults, cost rules, explicit time
// points and clocks with coarser ticks. Time is a ManualClock (or a hand-driven millisecond
// clock); nothing sleeps. Threaded tests are tagged [concurrency] for the TSan leg; every thread
// runs a bounded number of iterations.

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <latch>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include <ratelimit/ratelimit.hpp>

#include "support/catch.hpp"
#include "support/decision_string.hpp"
#include "support/dry_run.hpp"
#include "support/limiters.hpp"

using namespace std::chrono_literals;

namespace ratelimit_test {

namespace {

constexpr int kThreads = 8;

/// Runs `body(thread)` on `threads` threads released together by a latch, and joins them.
template <class Body>
void runTogether(int threads, Body body) {
    std::latch start(threads);
    std::vector<std::thread> pool;
    pool.reserve(static_cast<std::size_t>(threads));
    for (int t = 0; t < threads; ++t) {
        pool.emplace_back([&start, &body, t] {
            start.arrive_and_wait();
            body(t);
        });
    }
    for (std::thread& thread : pool) {
        thread.join();
    }
}

std::int64_t ticksOf(ManualClock::time_point t) { return t.time_since_epoch().count(); }

/// A clock with millisecond ticks, driven by hand; copies share one time.
struct MillisecondClock {
    using duration = std::chrono::milliseconds;
    using rep = duration::rep;
    using period = duration::period;
    using time_point = std::chrono::time_point<MillisecondClock, duration>;

    [[nodiscard]] time_point now() const noexcept {
        return time_point{duration{ms_->load(std::memory_order_acquire)}};
    }
    void advance(duration d) const noexcept {
        ms_->fetch_add(d.count(), std::memory_order_acq_rel);
    }

private:
    std::shared_ptr<std::atomic<rep>> ms_ = std::make_shared<std::atomic<rep>>(0);
};

/// A ManualClock whose reads are now and then followed by a yield, as if the reading thread were
/// preempted before it used the time. Copies share the ManualClock's time. `Steady`: declared
/// steady (its tests only move the time forward).
template <bool Steady>
struct PreemptedClock
    : ratelimit::detail::ClockTypes<PreemptedClock<Steady>, ManualClock::duration> {
    using typename ratelimit::detail::ClockTypes<PreemptedClock, ManualClock::duration>::time_point;
    static constexpr bool is_steady = Steady;

    ManualClock manual;

    [[nodiscard]] time_point now() const {
        const ManualClock::time_point t = manual.now();
        thread_local unsigned reads = 0;
        if (++reads % 2 == 0) {
            std::this_thread::yield();
        }
        return time_point{t.time_since_epoch()};
    }
};

}  // namespace

// ---------------------------------------------------------------------------------------------
// Exactness under contention, time frozen

TEMPLATE_TEST_CASE("Limiter: with time frozen, 8 threads on one key admit exactly the limit",
                   "[limiter][memory][concurrency]", RATELIMIT_TEST_MODELS) {
    // count and burst differ, so a bucket enforcing count (or a window enforcing burst) fails.
    const Limit limit = Limit::perMinute(1000).withBurst(600);
    const std::int64_t capacity = capacityOf<TestType>(limit);
    ManualClock clock;
    clock.set(1h + 17s);  // never advanced below
    MemoryLimiter<TestType> limiter{limit, MemoryStorage{{.maxKeys = 64}}, clock};

    SECTION("cost 1") {
        for (int round = 0; round < 5; ++round) {
            const std::string key = "unit-" + std::to_string(round);
            std::array<std::int64_t, kThreads> admitted{};
            runTogether(kThreads, [&](int t) {
                std::int64_t mine = 0;
                for (int i = 0; i < 300; ++i) {  // 2400 attempts in all, above either capacity
                    mine += limiter.tryAcquire(key).allowed ? 1 : 0;
                }
                admitted.at(static_cast<std::size_t>(t)) = mine;
            });
            std::int64_t total = 0;
            for (const std::int64_t n : admitted) {
                total += n;
            }
            CAPTURE(round);
            CHECK(total == capacity);
            CHECK(limiter.peek(key, 0).remaining == 0);
        }
    }
    SECTION("random costs") {
        for (int round = 0; round < 5; ++round) {
            const std::string key = "random-" + std::to_string(round);
            std::array<std::int64_t, kThreads> spent{};
            runTogether(kThreads, [&](int t) {
                std::mt19937_64 rng(static_cast<std::uint64_t>(round * 100 + t));
                std::uniform_int_distribution<std::int64_t> costs(1, 7);
                std::int64_t mine = 0;
                for (int i = 0; i < 150; ++i) {
                    const std::int64_t cost = costs(rng);
                    mine += limiter.tryAcquire(key, cost).allowed ? cost : 0;
                }
                spent.at(static_cast<std::size_t>(t)) = mine;
            });
            std::int64_t total = 0;
            for (const std::int64_t n : spent) {
                total += n;
            }
            CAPTURE(round, total);
            CHECK(total <= capacity);
            // What was admitted is exactly what was consumed.
            CHECK(total + limiter.peek(key, 0).remaining == capacity);

            // Then cost 1 until refused: the rest goes, and not one unit more.
            runTogether(kThreads, [&](int t) {
                std::int64_t mine = 0;
                for (std::int64_t i = 0; i <= capacity && limiter.tryAcquire(key, 1).allowed; ++i) {
                    ++mine;
                }
                spent.at(static_cast<std::size_t>(t)) += mine;
            });
            total = 0;
            for (const std::int64_t n : spent) {
                total += n;
            }
            CHECK(total == capacity);
        }
    }
}

TEMPLATE_TEST_CASE("Limiter: with time frozen, threads on many keys give every key its limit",
                   "[limiter][memory][concurrency]", RATELIMIT_TEST_MODELS) {
    const Limit limit = Limit::perMinute(9).withBurst(5);
    const std::int64_t capacity = capacityOf<TestType>(limit);
    ManualClock clock;
    clock.set(3h);
    MemoryStorage storage{{.maxKeys = 8192}};

    SECTION("8 threads, 8 keys, one each") {
        MemoryLimiter<TestType> limiter{limit, storage, clock};
        std::array<std::int64_t, kThreads> admitted{};
        runTogether(kThreads, [&](int t) {
            const std::string key = "own-" + std::to_string(t);
            std::int64_t mine = 0;
            for (std::int64_t i = 0; i < 4 * capacity; ++i) {
                mine += limiter.tryAcquire(key).allowed ? 1 : 0;
            }
            admitted.at(static_cast<std::size_t>(t)) = mine;
        });
        for (std::size_t t = 0; t < admitted.size(); ++t) {
            CAPTURE(t);
            CHECK(admitted.at(t) == capacity);
        }
    }
    SECTION("8 threads over 2000 keys in different orders, windows spread") {
        constexpr std::size_t kKeys = 2000;
        MemoryLimiter<TestType> limiter{limit, storage, clock, {.spreadWindowResets = true}};
        std::vector<std::atomic<std::int64_t>> admitted(kKeys);
        runTogether(kThreads, [&](int t) {
            std::vector<std::size_t> order(kKeys);
            for (std::size_t i = 0; i < kKeys; ++i) {
                order[i] = i;
            }
            std::mt19937_64 rng(static_cast<std::uint64_t>(t) + 1);
            for (int pass = 0; pass < 2; ++pass) {
                std::shuffle(order.begin(), order.end(), rng);
                for (const std::size_t k : order) {
                    if (limiter.tryAcquire("many-" + std::to_string(k)).allowed) {
                        admitted[k].fetch_add(1, std::memory_order_relaxed);
                    }
                }
            }
        });
        std::size_t wrong = 0;
        std::size_t firstWrong = kKeys;
        for (std::size_t k = 0; k < kKeys; ++k) {
            if (admitted[k].load() != capacity) {
                ++wrong;
                firstWrong = std::min(firstWrong, k);
            }
        }
        CAPTURE(firstWrong);
        CHECK(wrong == 0);
        CHECK(storage.stats().spilledCalls == 0);
    }
}

// ---------------------------------------------------------------------------------------------
// Bounds while a ninth thread moves the clock

namespace {

/// What 8 hammering threads were admitted while a ninth advanced the clock.
struct MovingRun {
    std::int64_t start = 0;  ///< ticks, before any call
    std::int64_t end = 0;    ///< ticks, after every call
    /// Each admitted call: the clock read just before it and just after it returned (the time
    /// the limiter applied lies in between), sorted by the first.
    std::vector<std::pair<std::int64_t, std::int64_t>> admittedAt;
    std::int64_t admitted = 0;
};

/// 8 threads call `acquire(now)` on one key (time read from `clock` first) while a ninth thread
/// advances the clock in small steps. The two sides pace each other so the calls spread over the
/// whole run: the clock steps once the callers made `kCallsPerStep` calls, a caller makes at most
/// `kCallsPerTime` calls at one time before it waits for the next step. A caller yields between
/// reading the time and using it now and then, as a preempted thread would. Every wait is bounded
/// (`kMaxWaits` yields), and a caller stops after `kMaxCalls` calls whatever happens.
template <class Acquire>
MovingRun hammerWhileTheClockMoves(ManualClock& clock, Acquire acquire) {
    constexpr int kClockSteps = 2000;
    constexpr auto kStep = 100us;
    constexpr std::int64_t kCallsPerStep = 24;
    constexpr int kCallsPerTime = 6;
    constexpr int kMaxWaits = 10'000;
    constexpr int kMaxCalls = 100'000;
    MovingRun run;
    run.start = ticksOf(clock.now());
    std::atomic<bool> stop{false};
    std::atomic<std::int64_t> calls{0};
    std::array<std::vector<std::pair<std::int64_t, std::int64_t>>, kThreads> times;
    runTogether(kThreads + 1, [&](int t) {
        if (t == kThreads) {
            for (int i = 0; i < kClockSteps; ++i) {
                const std::int64_t seen = calls.load(std::memory_order_relaxed);
                for (int w = 0;
                     w < kMaxWaits && calls.load(std::memory_order_relaxed) - seen < kCallsPerStep;
                     ++w) {
                    std::this_thread::yield();
                }
                clock.advance(kStep);
            }
            stop.store(true, std::memory_order_release);
            return;
        }
        auto& mine = times.at(static_cast<std::size_t>(t));
        int atThisTime = 0;
        for (int i = 0; i < kMaxCalls && !stop.load(std::memory_order_acquire); ++i) {
            const ManualClock::time_point now = clock.now();
            if (i % 3 == 0) {
                std::this_thread::yield();  // as if preempted between reading the time and using it
            }
            if (acquire(now)) {
                mine.emplace_back(ticksOf(now), ticksOf(clock.now()));
            }
            calls.fetch_add(1, std::memory_order_relaxed);
            if (++atThisTime == kCallsPerTime) {
                atThisTime = 0;
                for (int w = 0;
                     w < kMaxWaits && clock.now() == now && !stop.load(std::memory_order_acquire);
                     ++w) {
                    std::this_thread::yield();
                }
            }
        }
    });
    run.end = ticksOf(clock.now());
    for (const auto& mine : times) {
        run.admittedAt.insert(run.admittedAt.end(), mine.begin(), mine.end());
    }
    std::sort(run.admittedAt.begin(), run.admittedAt.end());
    run.admitted = static_cast<std::int64_t>(run.admittedAt.size());
    return run;
}

/// An index i such that admissions i … i + count (by the time read before each) certainly fell
/// in one sliding window: the last of them returned less than W after the first was called, so
/// their times lie in a span shorter than W whatever the limiter applied. -1 if there is none.
std::int64_t firstCrowdedWindow(const Limit& limit, const MovingRun& run) {
    const auto count = static_cast<std::size_t>(limit.count);
    const std::int64_t window = limit.period.count();
    for (std::size_t i = 0; i + count < run.admittedAt.size(); ++i) {
        std::int64_t lastReturn = 0;
        for (std::size_t j = i; j <= i + count; ++j) {
            lastReturn = std::max(lastReturn, run.admittedAt[j].second);
        }
        if (lastReturn - run.admittedAt[i].first < window) {
            return static_cast<std::int64_t>(i);
        }
    }
    return -1;
}

/// What a run admitted stays within what `Model` may admit, and the sliding log never admits
/// more than `count` in one sliding window.
template <class Model>
void checkWithinBound(const Limit& limit, const MovingRun& run) {
    const std::int64_t bound = admissionBound<Model>(limit, run.start, run.end);
    CAPTURE(run.admitted, bound, run.end - run.start);
    CHECK(run.admitted <= bound);
    if (std::is_same_v<Model, ratelimit::SlidingLogModel>) {
        const std::int64_t crowded = firstCrowdedWindow(limit, run);
        CAPTURE(crowded);
        CHECK(crowded == -1);
    }
}

}  // namespace

TEMPLATE_TEST_CASE("Limiter: while the clock moves, 8 threads on one key stay within the limit",
                   "[limiter][memory][concurrency]", RATELIMIT_TEST_MODELS) {
    // 2000 steps of 100 us: 200 ms, 20 periods.
    const Limit limit = Limit::per(40, 10ms).withBurst(25);
    ManualClock clock;
    clock.set(1h + 3ms);  // not at a window edge

    SECTION("callers read the clock and pass the time, with the default options") {
        // A caller's time may be older than another's write by the time it was preempted: the
        // default late-call tolerance is above that delay, so such a call is late, not a clock
        // step that would credit the same interval twice.
        MemoryLimiter<TestType> late{limit, MemoryStorage{{.maxKeys = 64}}, clock};
        const MovingRun run = hammerWhileTheClockMoves(clock, [&](ManualClock::time_point now) {
            return late.tryAcquire("k", 1, now).allowed;
        });
        checkWithinBound<TestType>(limit, run);
    }
    SECTION("callers read the clock and pass the time, within a longer late-call tolerance") {
        // A caller's time may be older than another's write by the time it was preempted:
        // with a tolerance above that delay it is a late call, not a clock step.
        MemoryLimiter<TestType> late{limit,
                                     MemoryStorage{{.maxKeys = 64}},
                                     clock,
                                     {.lateCallTolerance = std::chrono::seconds{10}}};
        const MovingRun run = hammerWhileTheClockMoves(clock, [&](ManualClock::time_point now) {
            return late.tryAcquire("k", 1, now).allowed;
        });
        checkWithinBound<TestType>(limit, run);
    }
    SECTION("the limiter reads the clock") {
        ratelimit::Limiter<TestType, MemoryStorage, PreemptedClock<false>> reading{
            limit, MemoryStorage{{.maxKeys = 64}}, PreemptedClock<false>{{}, clock}};
        const MovingRun run = hammerWhileTheClockMoves(
            clock, [&](ManualClock::time_point) { return reading.tryAcquire("k").allowed; });
        checkWithinBound<TestType>(limit, run);
    }
    SECTION("the limiter reads a steady clock") {
        // A call that finds a later write steps at that write's time, without a second read.
        ratelimit::Limiter<TestType, MemoryStorage, PreemptedClock<true>> reading{
            limit, MemoryStorage{{.maxKeys = 64}}, PreemptedClock<true>{{}, clock}};
        const MovingRun run = hammerWhileTheClockMoves(
            clock, [&](ManualClock::time_point) { return reading.tryAcquire("k").allowed; });
        checkWithinBound<TestType>(limit, run);
    }
}

namespace {

/// A clock read from a script of times, counting its reads. Its first read lets another call
/// (`overtake`) run to the end before it returns, as if the reading thread were preempted
/// between its read and the key: the other call reads the script's next, later time and writes
/// it first. Copies share the script.
template <bool Steady>
struct OvertakenClock
    : ratelimit::detail::ClockTypes<OvertakenClock<Steady>, ManualClock::duration> {
    using typename ratelimit::detail::ClockTypes<OvertakenClock, ManualClock::duration>::duration;
    using typename ratelimit::detail::ClockTypes<OvertakenClock, ManualClock::duration>::time_point;
    static constexpr bool is_steady = Steady;

    struct Script {
        std::vector<duration> times;
        std::size_t reads = 0;
        std::function<void()> overtake;
    };
    std::shared_ptr<Script> script = std::make_shared<Script>();

    [[nodiscard]] time_point now() const {
        const duration t = script->times.at(script->reads++);
        if (auto overtake = std::exchange(script->overtake, nullptr)) {
            overtake();
        }
        return time_point{t};
    }
};

/// What the key answers the overtaken call when another call reads the clock after it and
/// takes the key first: the overtaken call reads at 10 s, the other at 10.5 s, and a third
/// read, if any, gives 10.7 s. Returns the overtaken call's decision and the clock's reads.
template <class Model, bool Steady>
std::pair<Decision, std::size_t> overtaken(LimiterOptions options) {
    OvertakenClock<Steady> clock;
    clock.script->times = {10s, 10500ms, 10700ms};
    ratelimit::Limiter<Model, MemoryStorage, OvertakenClock<Steady>> limiter{
        Limit::per(1, 1s), MemoryStorage{{.maxKeys = 64}}, clock, options};
    clock.script->overtake = [&] { CHECK(limiter.tryAcquire("k").allowed); };
    const Decision d = limiter.tryAcquire("k");
    return {d, clock.script->reads};
}

/// What a key that admitted a call at `first` answers a call at `second`.
template <class Model>
Decision answerAfter(ManualClock::duration first, ManualClock::duration second) {
    ManualClock clock;
    MemoryLimiter<Model> limiter{Limit::per(1, 1s), MemoryStorage{{.maxKeys = 64}}, clock};
    clock.set(first);
    CHECK(limiter.tryAcquire("k").allowed);
    clock.set(second);
    return limiter.tryAcquire("k");
}

}  // namespace

TEMPLATE_TEST_CASE("Limiter: a call overtaken by a later write steps in the order of the times",
                   "[limiter][memory]", RATELIMIT_TEST_MODELS) {
    SECTION("a steady clock: at the later write's time, without reading the clock again") {
        const auto [d, reads] = overtaken<TestType, true>({});
        CHECK(reads == 2);
        CHECK(describe(d) == describe(answerAfter<TestType>(10500ms, 10500ms)));
    }
    SECTION("a clock that may step back: read again") {
        const auto [d, reads] = overtaken<TestType, false>({});
        CHECK(reads == 3);
        CHECK(describe(d) == describe(answerAfter<TestType>(10500ms, 10700ms)));
    }
    SECTION("a steady clock, with a write later than a late call's tolerance: read again") {
        const auto [d, reads] = overtaken<TestType, true>({.lateCallTolerance = 100ms});
        CHECK(reads == 3);
        CHECK(describe(d) == describe(answerAfter<TestType>(10500ms, 10700ms)));
    }
}

TEMPLATE_TEST_CASE(
    "Limiter: 8 threads passing the steady clock's times stay within the limit "
    "by default",
    "[limiter][memory][concurrency]", RATELIMIT_TEST_MODELS) {
    // The common way to pass times: each request reads the clock once and hands the time on.
    // Threads preempted between the read and the call arrive late; with the default options
    // they must not be taken for clock steps (each would credit an interval twice).
    constexpr int kCallsPerThread = 40'000;
    const Limit limit = Limit::per(200, 100ms).withBurst(50);
    const ratelimit::SteadyClock clock;
    ratelimit::Limiter<TestType, MemoryStorage, ratelimit::SteadyClock> limiter{
        limit, MemoryStorage{{.maxKeys = 64}}, clock};
    const auto ticks = [](ratelimit::SteadyClock::time_point t) {
        return t.time_since_epoch().count();
    };
    MovingRun run;
    run.start = ticks(clock.now());
    std::array<std::vector<std::pair<std::int64_t, std::int64_t>>, kThreads> times;
    runTogether(kThreads, [&](int t) {
        auto& mine = times.at(static_cast<std::size_t>(t));
        for (int i = 0; i < kCallsPerThread; ++i) {
            const ratelimit::SteadyClock::time_point now = clock.now();
            if (limiter.tryAcquire("k", 1, now).allowed) {
                mine.emplace_back(ticks(now), ticks(clock.now()));
            }
        }
    });
    run.end = ticks(clock.now());
    for (const auto& mine : times) {
        run.admittedAt.insert(run.admittedAt.end(), mine.begin(), mine.end());
    }
    std::sort(run.admittedAt.begin(), run.admittedAt.end());
    run.admitted = static_cast<std::int64_t>(run.admittedAt.size());
    checkWithinBound<TestType>(limit, run);
}

// ---------------------------------------------------------------------------------------------
// Defaults and the call contract

TEST_CASE("Limiter: defaults to the memory storage and the steady clock", "[limiter][memory]") {
    using Default = ratelimit::Limiter<ratelimit::TokenBucketModel>;
    STATIC_REQUIRE(
        std::is_same_v<Default, ratelimit::Limiter<ratelimit::TokenBucketModel, MemoryStorage,
                                                   ratelimit::SteadyClock>>);
    STATIC_REQUIRE(std::is_same_v<ratelimit::TokenBucket<>, Default>);
    STATIC_REQUIRE(std::is_same_v<ratelimit::FixedWindow<>,
                                  ratelimit::Limiter<ratelimit::FixedWindowModel, MemoryStorage,
                                                     ratelimit::SteadyClock>>);
    STATIC_REQUIRE(
        std::is_same_v<ratelimit::SlidingLog<>::time_point, ratelimit::SteadyClock::time_point>);
    STATIC_REQUIRE(std::is_same_v<ratelimit::Gcra<>, ratelimit::LeakyBucket<>>);
    STATIC_REQUIRE(std::is_same_v<MemoryStorage::DefaultClock, ratelimit::SteadyClock>);

    // `TokenBucket<>` from a limit alone: one token per 12 minutes, so the fifth is the last.
    ratelimit::TokenBucket<> limiter{Limit::perHour(5)};
    CHECK(drain(limiter, "user:42", 100) == 5);
    const ratelimit::Decision refused = limiter.tryAcquire("user:42");
    CHECK_FALSE(refused.allowed);
    CHECK(refused.retryAfter > 11min);
    CHECK(refused.retryAfter <= 12min);
    CHECK(limiter.tryAcquire("user:43").allowed);
}

TEMPLATE_TEST_CASE("Limiter: a negative cost throws, peeks and cost 0 consume nothing",
                   "[limiter][memory]", RATELIMIT_TEST_MODELS) {
    const Limit limit = Limit::perMinute(4).withBurst(3);
    const std::int64_t capacity = capacityOf<TestType>(limit);
    ManualClock clock;
    clock.set(2h + 20s);
    MemoryStorage storage{{.maxKeys = 64}};
    MemoryLimiter<TestType> limiter{limit, storage, clock};
    const ManualClock::time_point now = clock.now();

    SECTION("negative cost") {
        CHECK_THROWS_AS(limiter.tryAcquire("k", -1), std::invalid_argument);
        CHECK_THROWS_AS(limiter.tryAcquire("k", -1, now), std::invalid_argument);
        CHECK_THROWS_AS(limiter.peek("k", -1), std::invalid_argument);
        CHECK_THROWS_AS(limiter.peek("k", -5, now), std::invalid_argument);
        CHECK_THROWS_AS(limiter.tryAcquire("k", -3), std::invalid_argument);
        CHECK_THROWS_WITH(limiter.tryAcquire("k", -3), Contains("cost") && Contains("-3"));
        // Nothing was consumed by the failed calls.
        CHECK(drain(limiter, "k", 100) == capacity);
    }
    SECTION("peek never consumes") {
        for (int i = 0; i < 20; ++i) {
            const ratelimit::Decision d = limiter.peek("k");
            CHECK(d.allowed);
            CHECK(d.remaining == capacity - 1);
            CHECK(limiter.peek("k", capacity).allowed);
            CHECK(limiter.peek("k", capacity, now).allowed);
        }
        CHECK(storage.stats().trackedKeys == 0);
        CHECK(drain(limiter, "k", 100) == capacity);
        const ratelimit::Decision peeked = limiter.peek("k");
        const ratelimit::Decision acquired = limiter.tryAcquire("k");
        CHECK_FALSE(peeked.allowed);
        CHECK(peeked == acquired);
        CHECK(limiter.peek("k") == acquired);
    }
    SECTION("cost 0 never consumes") {
        for (int i = 0; i < 20; ++i) {
            const ratelimit::Decision d = limiter.tryAcquire("k", 0);
            CHECK(d.allowed);
            CHECK(d.remaining == capacity);
            CHECK(d.resetAfter == 0ns);
        }
        CHECK(drain(limiter, "k", 100) == capacity);
        const ratelimit::Decision empty = limiter.tryAcquire("k", 0);
        CHECK(empty.allowed);
        CHECK(empty.remaining == 0);
        CHECK(empty.retryAfter == 0ns);
        CHECK(empty.resetAfter > 0ns);
        CHECK_FALSE(limiter.tryAcquire("k").allowed);
    }
}

TEST_CASE("Limiter: tryAcquire and peek at an explicit time point use that time",
          "[limiter][memory]") {
    ManualClock clock;  // stays at its zero: only the explicit times move
    const ManualClock::time_point t = ManualClock::time_point{10min + 15s};

    SECTION("fixed window") {
        ratelimit::FixedWindow<MemoryStorage, ManualClock> limiter{Limit::perMinute(2), {}, clock};
        const ratelimit::Decision first = limiter.tryAcquire("k", 1, t);
        CHECK(first.allowed);
        CHECK(first.resetAfter == 45s);  // window [10 min, 11 min)
        CHECK(limiter.tryAcquire("k", 1, t + 10s).allowed);
        const ratelimit::Decision refused = limiter.tryAcquire("k", 1, t + 20s);
        CHECK_FALSE(refused.allowed);
        CHECK(refused.retryAfter == 25s);
        CHECK_FALSE(limiter.peek("k", 1, t + 44s).allowed);
        CHECK(limiter.peek("k", 1, t + 45s).allowed);
        CHECK(limiter.tryAcquire("k", 1, t + 45s).allowed);
        // The clock itself never moved: another key is in the window [0, 1 min).
        CHECK(limiter.tryAcquire("other").resetAfter == 60s);
    }
    SECTION("token bucket") {
        ratelimit::TokenBucket<MemoryStorage, ManualClock> limiter{Limit::perMinute(2), {}, clock};
        CHECK(limiter.tryAcquire("k", 2, t).allowed);
        const ratelimit::Decision refused = limiter.tryAcquire("k", 1, t);
        CHECK_FALSE(refused.allowed);
        CHECK(refused.retryAfter == 30s);
        CHECK_FALSE(limiter.tryAcquire("k", 1, t + 29s).allowed);
        CHECK(limiter.peek("k", 1, t + 30s).allowed);
        CHECK(limiter.tryAcquire("k", 1, t + 30s).allowed);
        CHECK_FALSE(limiter.tryAcquire("k", 1, t + 30s).allowed);
    }
}

// ---------------------------------------------------------------------------------------------
// Dry-run

TEMPLATE_TEST_CASE("Limiter: a dry-run admits every call and reports what enforcing decides",
                   "[limiter][memory]", RATELIMIT_TEST_MODELS) {
    const Limit limit = Limit::per(5, 2s).withBurst(3);
    ManualClock clock;
    clock.set(1h + 250ms);
    MemoryStorage storage;
    MemoryLimiter<TestType> enforcing{limit, storage, clock, {.name = "enforcing"}};
    MemoryLimiter<TestType> dryRun{limit, storage, clock, {.name = "shadow", .dryRun = true}};
    const MemoryLimiter<TestType> copy = dryRun;
    ratelimit_test::Rng rng(41);
    const std::uint64_t refusals = replayBesideEnforcing(enforcing, dryRun, clock, rng, 3000);
    CHECK(refusals > 300);
    CHECK(dryRun.dryRunRefusals() == refusals);
    CHECK(copy.dryRunRefusals() == refusals);  // copies share the count
    CHECK(enforcing.dryRunRefusals() == 0);

    SECTION("explicit times, and a cost above the limit") {
        const auto at = clock.now() + 1h;
        CHECK(dryRun.tryAcquire("x", capacityOf<TestType>(limit), at).allowed);
        const Decision shadowed = dryRun.tryAcquire("x", 1, at);
        CHECK(shadowed.allowed);
        CHECK(shadowed.wouldRefuse);
        CHECK(shadowed.retryAfter > 0s);
        CHECK(dryRun.peek("x", 1, at).wouldRefuse);
        const Decision tooBig = dryRun.tryAcquire("y", 1000);
        CHECK(tooBig.allowed);
        CHECK(tooBig.never());
        CHECK(dryRun.dryRunRefusals() == refusals + 2);  // peeks are not counted
    }
}

TEST_CASE("Limiter: a dry-run through AnyLimiter counts as the limiter does", "[limiter][memory]") {
    auto any = ratelimit::AnyLimiter::make(ratelimit::Algorithm::kFixedWindow, Limit::perMinute(2),
                                           MemoryStorage{}, {.name = "shadow", .dryRun = true});
    for (int i = 0; i < 5; ++i) {
        CHECK(any.tryAcquire("k").allowed);
    }
    CHECK(any.dryRunRefusals() == 3);
    CHECK(ratelimit::AnyLimiter::make(ratelimit::Algorithm::kFixedWindow, Limit::perMinute(2),
                                      MemoryStorage{})
              .dryRunRefusals() == 0);
}

// ---------------------------------------------------------------------------------------------
// Clocks with coarser ticks

TEMPLATE_TEST_CASE("Limiter: a refund gives back what admitted calls spent, never more",
                   "[limiter][memory][refund]", RATELIMIT_TEST_MODELS) {
    const Limit limit = Limit::perMinute(10).withBurst(6);
    const std::int64_t capacity = capacityOf<TestType>(limit);
    ManualClock clock;
    clock.set(1h);  // a window start
    MemoryLimiter<TestType> limiter(limit, MemoryStorage{}, clock);

    // A key with nothing consumed stays as it is: full, and without an entry.
    Decision d = limiter.refund("fresh", 3);
    CHECK(d.allowed);
    CHECK(d.remaining == capacity);
    CHECK(d.resetAfter == 0ns);
    CHECK(limiter.storage().stats().trackedKeys == 0);

    // Spent to the last unit, then 2 given back: exactly 2 more pass.
    CHECK(drain(limiter, "k", 100) == capacity);
    d = limiter.refund("k", 2);
    CHECK(d.allowed);
    CHECK(d.remaining == 2);
    CHECK(drain(limiter, "k", 100) == 2);

    // Giving back more than was spent fills the key, never above its capacity.
    d = limiter.refund("k", 1'000);
    CHECK(d.remaining == capacity);
    CHECK(d.resetAfter == 0ns);
    CHECK(drain(limiter, "k", 100) == capacity);
    CHECK(limiter.refund("k", 0).remaining == 0);  // a zero cost gives back nothing
    CHECK_THROWS_AS(limiter.refund("k", -1), std::invalid_argument);
}

TEST_CASE("Limiter: the sliding log gives back its newest entries first",
          "[limiter][memory][refund]") {
    ManualClock clock;
    MemoryLimiter<ratelimit::SlidingLogModel> log(Limit::per(2, 10s), MemoryStorage{}, clock);
    CHECK(log.tryAcquire("k").allowed);  // at 0 s, counting until 10 s
    clock.set(5s);
    CHECK(log.tryAcquire("k").allowed);  // at 5 s, counting until 15 s
    clock.set(6s);
    CHECK(log.refund("k").remaining == 1);
    // Had the oldest entry gone back, the one at 5 s would still count at 10 s.
    clock.set(10s);
    CHECK(log.peek("k", 0).remaining == 2);
}

TEST_CASE("Limiter: a refund at a time a window rolled gives back from the window it finds",
          "[limiter][memory][refund]") {
    ManualClock clock;
    MemoryLimiter<ratelimit::FixedWindowModel> window(Limit::perMinute(5), MemoryStorage{}, clock);
    CHECK(send(window, 5, "k").first == 5);
    clock.set(1min);  // the next window: nothing spent in it, nothing to give back
    CHECK(window.refund("k", 3).remaining == 5);
    CHECK(send(window, 6, "k").first == 5);
    // The sliding counter gives back from its current window first, then the previous one.
    MemoryLimiter<ratelimit::SlidingCounterModel> counter(Limit::perMinute(4), MemoryStorage{},
                                                          clock);
    CHECK(send(counter, 4, "k").first == 4);  // 4 in the window [1 min, 2 min)
    clock.set(2min);                          // the previous window weighs fully
    CHECK_FALSE(counter.peek("k").allowed);
    CHECK(counter.refund("k", 1).remaining == 1);
    CHECK(send(counter, 2, "k").first == 1);
}

TEST_CASE("tryAcquireAll: several keys for one request take from every one or from none",
          "[limiter][memory][refund]") {
    ManualClock clock;
    MemoryLimiter<ratelimit::TokenBucketModel> byAddress(Limit::perHour(5), MemoryStorage{}, clock);
    ratelimit::AnyLimiter byUser(
        MemoryLimiter<ratelimit::FixedWindowModel>(Limit::perHour(2), MemoryStorage{}, clock));
    const auto request = [&](std::string_view user) {
        return ratelimit::tryAcquireAll(ratelimit::KeyCheck{byAddress, "203.0.113.7"},
                                        ratelimit::KeyCheck{byUser, user});
    };
    // Alice's own limit refuses her third request: the address keeps what it had.
    for (int i = 0; i < 2; ++i) {
        const auto [address, user] = request("alice");
        CHECK(address.allowed);
        CHECK(user.allowed);
    }
    for (int i = 0; i < 10; ++i) {
        const auto [address, user] = request("alice");
        CHECK_FALSE(user.allowed);
        CHECK(address.allowed);  // given back
        CHECK(address.remaining == 3);
    }
    // So Bob, behind the same address, still gets the address's last 3.
    CHECK(request("bob")[1].allowed);
    CHECK(request("bob")[1].allowed);
    CHECK(byAddress.peek("203.0.113.7", 0).remaining == 1);
    // A refusal by the first check takes nothing from the second: it is only peeked.
    CHECK(request("carol")[0].allowed);
    const auto [address, user] = request("carol");
    CHECK_FALSE(address.allowed);
    CHECK(user.allowed);
    CHECK(byUser.peek("carol", 0).remaining == 1);
}

TEST_CASE("tryAcquireAll: checks counted at run time refund, peek and skip dry-runs alike",
          "[limiter][memory][refund]") {
    ManualClock clock;
    const MemoryStorage store;
    const auto make = [&](ratelimit::Algorithm algorithm, Limit limit, const char* name) {
        return ratelimit::AnyLimiter::make(algorithm, limit, store, clock, {.name = name});
    };
    ratelimit::AnyLimiter wide =
        make(ratelimit::Algorithm::kTokenBucket, Limit::perHour(5), "wide");
    ratelimit::AnyLimiter watched =
        ratelimit::AnyLimiter::make(ratelimit::Algorithm::kFixedWindow, Limit::perHour(1), store,
                                    clock, {.name = "watched", .dryRun = true});
    ratelimit::AnyLimiter narrow =
        make(ratelimit::Algorithm::kSlidingLog, Limit::perHour(2), "narrow");
    const std::vector<ratelimit::KeyCheck<ratelimit::AnyLimiter>> checks{
        {wide, "k", 1}, {watched, "k", 1}, {narrow, "k", 1}};
    std::vector<Decision> out(checks.size());
    for (int i = 0; i < 2; ++i) {
        ratelimit::tryAcquireAll<ratelimit::AnyLimiter>(checks, out);
        CHECK((out[0].allowed && out[1].allowed && out[2].allowed));
        CHECK(out[1].wouldRefuse == (i == 1));
    }
    // The third member refuses: the first gives back, the dry-run one took nothing to give.
    ratelimit::tryAcquireAll<ratelimit::AnyLimiter>(checks, out);
    CHECK_FALSE(out[2].allowed);
    CHECK(out[0].allowed);
    CHECK(wide.peek("k", 0).remaining == 3);
    CHECK(watched.peek("k", 0).remaining == 0);
    CHECK(watched.dryRunRefusals() == 2);
    // A refusal by the first member leaves the others untouched: they are only peeked.
    const std::vector<ratelimit::KeyCheck<ratelimit::AnyLimiter>> first{{narrow, "k", 1},
                                                                        {wide, "k", 1}};
    std::vector<Decision> two(2);
    ratelimit::tryAcquireAll<ratelimit::AnyLimiter>(first, two);
    CHECK_FALSE(two[0].allowed);
    CHECK(two[1].allowed);
    CHECK(wide.peek("k", 0).remaining == 3);
}

TEST_CASE("Limiter: a clock with millisecond ticks works", "[limiter][memory]") {
    STATIC_REQUIRE(ratelimit::ClockPolicy<MillisecondClock>);
    MillisecondClock clock;
    const Limit limit = Limit::per(3, 1500ms);

    SECTION("fixed window") {
        ratelimit::FixedWindow<MemoryStorage, MillisecondClock> limiter{limit, {}, clock};
        CHECK(drain(limiter, "k", 10) == 3);
        CHECK(limiter.tryAcquire("k").retryAfter == 1500ms);
        clock.advance(1499ms);
        const ratelimit::Decision late = limiter.tryAcquire("k");
        CHECK_FALSE(late.allowed);
        CHECK(late.retryAfter == 1ms);
        clock.advance(1ms);
        CHECK(limiter.tryAcquire("k").allowed);
    }
    SECTION("token bucket and leaky bucket: one token per 500 ms") {
        ratelimit::TokenBucket<MemoryStorage, MillisecondClock> token{limit, {}, clock};
        ratelimit::LeakyBucket<MemoryStorage, MillisecondClock> leaky{limit, {}, clock};
        CHECK(drain(token, "k", 10) == 3);
        CHECK(drain(leaky, "k", 10) == 3);
        CHECK(token.tryAcquire("k").retryAfter == 500ms);
        CHECK(leaky.tryAcquire("k").retryAfter == 500ms);
        clock.advance(499ms);
        CHECK(token.tryAcquire("k").retryAfter == 1ms);
        CHECK(leaky.tryAcquire("k").retryAfter == 1ms);
        clock.advance(1ms);
        CHECK(token.tryAcquire("k").allowed);
        CHECK(leaky.tryAcquire("k").allowed);
    }
    SECTION("sliding log and sliding counter, at explicit times") {
        ratelimit::SlidingLog<MemoryStorage, MillisecondClock> log{limit, {}, clock};
        ratelimit::SlidingCounter<MemoryStorage, MillisecondClock> counter{limit, {}, clock};
        const MillisecondClock::time_point t{3000ms};  // a window start
        CHECK(log.tryAcquire("k", 3, t).allowed);
        CHECK(counter.tryAcquire("k", 3, t).allowed);
        CHECK(log.tryAcquire("k", 1, t + 1499ms).retryAfter == 1ms);
        CHECK(log.tryAcquire("k", 1, t + 1500ms).allowed);
        CHECK_FALSE(counter.tryAcquire("k", 1, t + 1499ms).allowed);
        CHECK(counter.tryAcquire("k", 1, t + 2000ms).allowed);  // 3 * 1000/1500 = 2 weigh
    }
    SECTION("a period that is not a whole number of ticks is rejected") {
        using Limiter = ratelimit::FixedWindow<MemoryStorage, MillisecondClock>;
        CHECK_THROWS_AS(Limiter(Limit::per(1, 1500us), {}, clock), std::invalid_argument);
        using Bucket = ratelimit::TokenBucket<MemoryStorage, MillisecondClock>;
        CHECK_THROWS_AS(Bucket(Limit::per(1, 999us), {}, clock), std::invalid_argument);
        CHECK_THROWS_WITH(Limiter(Limit::per(1, 1500us), {}, clock),
                          Contains("period") && Contains("1500000"));
        CHECK_NOTHROW(Limiter(Limit::per(1, 1ms), {}, clock));
        CHECK_NOTHROW(Limiter(Limit::per(1, 2000000ns), {}, clock));
    }
}

}  // namespace ratelimit_test
