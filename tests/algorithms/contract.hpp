#pragma once

// The rules every algorithm keeps (docs/semantics.md, "Semantics every algorithm keeps"), as
// checks over a storage fixture `F`, run by contract_cases.hpp over the five limiters: on the
// memory storage (contract_test.cpp) and on Redis (redis_contract_test.cpp). The expectations
// come from the limiter's own earlier answers and from exact arithmetic here, never from the
// models' code.
//
// A fixture for the limiter type `L` provides:
//   Limiter, Model                  L and its model
//   kTick                           the storage's tick: every time a check uses is a multiple
//   kRandomCalls, kHammer           how long the random and the hammering checks run
//   accepts(limit)                  whether the storage holds `limit` (memory: all of these)
//   make(limit, clock[, options])   a limiter with keys of its own: tryAcquire, peek, reset
//   ready(), run(check)             whether it can run here; runs check(fixture)
// Memory ticks are 1 ns; Redis counts whole microseconds, so a check derives each time step
// from kTick and never relies on a finer one.

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <ratelimit/algorithms/fixed_window.hpp>
#include <ratelimit/algorithms/leaky_bucket.hpp>
#include <ratelimit/algorithms/sliding_counter.hpp>
#include <ratelimit/algorithms/sliding_log.hpp>
#include <ratelimit/algorithms/token_bucket.hpp>
#include <ratelimit/options.hpp>

#include "algorithms/common.hpp"
#include "support/catch.hpp"
#include "support/limiters.hpp"
#include "support/random_traffic.hpp"
#include "support/worked_scenarios.hpp"

namespace ratelimit_test {

/// The memory storage: a small seeded storage per limiter, ManualClock's 1 ns tick, the full
/// length of every check.
template <class L>
class MemoryFixture {
public:
    using Limiter = L;
    using Model = typename LimiterTraits<L>::Model;
    static constexpr Nanos kTick{1};
    static constexpr int kRandomCalls = 1500;
    static constexpr int kHammer = 1000;

    [[nodiscard]] static bool ready() { return true; }
    [[nodiscard]] static bool accepts(const Limit& /*limit*/) { return true; }
    L make(const Limit& limit, const Clock& clock, ratelimit::LimiterOptions options = {}) {
        return makeLimiter<L>(limit, clock, std::move(options));
    }
    template <class Check>
    void run(Check check) {
        check(*this);
    }
};

/// Runs `check(fixture)` on a fresh `Fixture<L>`, unless the fixture cannot run here (no
/// redis-server: the fixture has marked the test skipped).
template <template <class> class Fixture, class L, class Check>
void runContract(Check check) {
    Fixture<L> fixture;
    INFO(Fixture<L>::Model::kName);
    if (fixture.ready()) {
        fixture.run(check);
    }
}

/// The seeds of each algorithm's random checks, by algorithmIndex<Model>() (the ones its own
/// tests used before the contract suite held the checks), so each meets traffic of its own.
inline constexpr std::array<std::uint64_t, 5> kRandomTrafficSeeds = {21, 31, 41, 1, 11};
inline constexpr std::array<std::uint64_t, 5> kStepBackSeeds = {300, 400, 500, 100, 200};

/// `d` rounded down to a whole number of `tick`s, also below zero.
inline Nanos floorToTick(Nanos d, Nanos tick) {
    return tick * static_cast<std::int64_t>(floorDiv(d.count(), tick.count()));
}

/// The limits of a check that the fixture's storage holds (all of them in memory).
template <class F>
std::vector<Limit> heldBy(F& f, const std::vector<Limit>& limits) {
    std::vector<Limit> held;
    for (const Limit& limit : limits) {
        if (f.accepts(limit)) {
            held.push_back(limit);
        }
    }
    REQUIRE(!held.empty());
    return held;
}

/// `windows` for the window algorithms, `buckets` for the buckets.
template <class Model>
std::vector<Limit> byKind(std::vector<Limit> windows, std::vector<Limit> buckets) {
    return Model::kBucket ? std::move(buckets) : std::move(windows);
}

// ---------------------------------------------------------------------------------------------
// The checks

/// Refusals consume nothing: hammering an exhausted key does not extend its lockout, at one
/// instant or while the wait runs down.
template <class F>
void checkRefusalsConsumeNothing(F& f, const Limit& limit) {
    using namespace std::chrono_literals;
    INFO(describe(limit));
    Clock clock;
    clock.set(at(1h + 10s));
    auto limiter = f.make(limit, clock);
    const std::int64_t capacity = capacityOf<typename F::Model>(limit);
    REQUIRE(limiter.tryAcquire("k", capacity).allowed);
    const Decision first = limiter.tryAcquire("k", 1);
    REQUIRE(!first.allowed);
    REQUIRE(first.retryAfter > 0ns);
    REQUIRE(!first.never());
    const TimePoint start = clock.now();
    for (int i = 0; i < F::kHammer; ++i) {
        const Decision d = limiter.tryAcquire("k", 1 + i % capacity);
        REQUIRE(!d.allowed);
        REQUIRE(d.remaining == first.remaining);
        if (i % capacity == 0) {
            REQUIRE(d.retryAfter == first.retryAfter);
        }
        REQUIRE(d.resetAfter == first.resetAfter);
    }
    // Hammering while time passes: the wait runs down tick for tick.
    const Nanos stride = std::max(floorToTick(first.retryAfter / F::kHammer, F::kTick), F::kTick);
    for (Nanos elapsed{0}; elapsed < first.retryAfter; elapsed += stride) {
        const Decision d = limiter.tryAcquire("k", 1, start + elapsed);
        REQUIRE(!d.allowed);
        REQUIRE(d.retryAfter == first.retryAfter - elapsed);
    }
    const Decision onTime = limiter.tryAcquire("k", 1, start + first.retryAfter);
    CHECK(onTime.allowed);
}

/// `cost == 0` is a peek: allowed, nothing changes, the other fields report the current state.
template <class F>
void checkCostZeroIsAPeek(F& f) {
    using namespace std::chrono_literals;
    const Limit limit = Limit::perMinute(10).withBurst(10);
    Clock clock;
    auto limiter = f.make(limit, clock);
    auto twin = f.make(limit, clock);

    const Decision freshPeek = limiter.tryAcquire("k", 0);
    CHECK(freshPeek.allowed);
    CHECK(freshPeek.remaining == 10);
    CHECK(freshPeek.retryAfter == 0ns);
    CHECK(freshPeek.resetAfter == 0ns);
    CHECK(freshPeek.limit == 10);

    clock.set(at(12s));
    const Decision used = limiter.tryAcquire("k", 3);
    REQUIRE(twin.tryAcquire("k", 3) == used);
    REQUIRE(used.allowed);
    REQUIRE(used.remaining == 7);

    clock.advance(1s);
    const Decision zero = limiter.tryAcquire("k", 0);
    const Decision reference = twin.peek("k", 0);
    CHECK(zero.allowed);
    CHECK(zero.retryAfter == 0ns);
    CHECK(zero.remaining == reference.remaining);
    CHECK(zero.resetAfter == reference.resetAfter);
    CHECK(zero.resetAfter > 0ns);
    CHECK(zero.remaining < 10);

    // Exhaust both; a cost-0 call on the exhausted key is still allowed and reports 0 left.
    REQUIRE(limiter.tryAcquire("k", zero.remaining).allowed);
    REQUIRE(twin.tryAcquire("k", zero.remaining).allowed);
    for (int i = 0; i < 100; ++i) {
        const Decision z = limiter.tryAcquire("k", 0);
        REQUIRE(z.allowed);
        REQUIRE(z.remaining == 0);
        REQUIRE(z.retryAfter == 0ns);
    }
    // Nothing changed: the two limiters still answer alike, now and later.
    for (const Nanos step :
         {Nanos{0s}, Nanos{1s}, Nanos{5s}, Nanos{30s}, Nanos{61s}, Nanos{2min}}) {
        clock.advance(step);
        const Decision a = limiter.tryAcquire("k", 1);
        const Decision b = twin.tryAcquire("k", 1);
        REQUIRE(a == b);
    }
    // A cost-0 call on a key never seen leaves it fresh.
    CHECK(limiter.tryAcquire("unseen", 0).resetAfter == 0ns);
    CHECK(limiter.peek("unseen", 0).remaining == 10);
}

/// A cost above the capacity can never pass: `kNever`, nothing consumed, on a fresh key and on
/// a used one; so does a cost of INT64_MAX, without overflow.
template <class F>
void checkImpossibleCosts(F& f, const Limit& limit) {
    using namespace std::chrono_literals;
    INFO(describe(limit));
    Clock clock;
    clock.set(at(7s));
    auto limiter = f.make(limit, clock);
    const std::int64_t capacity = capacityOf<typename F::Model>(limit);
    for (const std::int64_t cost : {capacity + 1, capacity * 2, kInt64Max - 1, kInt64Max}) {
        INFO("cost " << cost);
        const Decision d = limiter.tryAcquire("k", cost);
        CHECK(!d.allowed);
        CHECK(d.never());
        CHECK(d.retryAfter == Decision::kNever);
        CHECK(d.remaining == capacity);
        CHECK(d.resetAfter == 0ns);
        CHECK(d.limit == capacity);
        CHECK(limiter.peek("k", cost) == d);
        CHECK(limiter.peek("k", 0).remaining == capacity);
    }
    // Equal to the capacity: allowed on a fresh key, everything used.
    const Decision all = limiter.tryAcquire("k", capacity);
    CHECK(all.allowed);
    CHECK(all.remaining == 0);
    CHECK(all.retryAfter == 0ns);
    CHECK(all.resetAfter > 0ns);
    // Above it on a used key: still never, still nothing consumed, still the same state.
    clock.advance(F::kTick);
    const Decision state = limiter.peek("k", 0);
    for (const std::int64_t cost : {capacity + 1, kInt64Max}) {
        const Decision d = limiter.tryAcquire("k", cost);
        CHECK(d.never());
        CHECK(d.remaining == state.remaining);
        CHECK(d.resetAfter == state.resetAfter);
    }
    CHECK(limiter.peek("k", 0) == state);
    // Exactly the capacity on the used key: a finite wait, not never.
    const Decision again = limiter.tryAcquire("k", capacity);
    CHECK(!again.allowed);
    CHECK(!again.never());
    CHECK(again.retryAfter <= longestWait<typename F::Model>(limit, F::kTick));
    CHECK(limiter.tryAcquire("k", capacity, clock.now() + again.retryAfter).allowed);
}

/// A negative cost is a programming error: std::invalid_argument naming the cost, nothing
/// consumed.
template <class F>
void checkNegativeCostThrows(F& f) {
    Clock clock;
    auto limiter = f.make(Limit::perMinute(10), clock);
    for (const std::int64_t cost :
         {std::int64_t{-1}, std::int64_t{-10}, std::numeric_limits<std::int64_t>::min()}) {
        INFO("cost " << cost);
        CHECK_THROWS_AS(limiter.tryAcquire("k", cost), std::invalid_argument);
        CHECK_THROWS_AS(limiter.tryAcquire("k", cost, clock.now()), std::invalid_argument);
        CHECK_THROWS_AS(limiter.peek("k", cost), std::invalid_argument);
        CHECK_THROWS_WITH(limiter.tryAcquire("k", cost), Contains("cost"));
    }
    CHECK(limiter.peek("k", 0).remaining == 10);
    CHECK(limiter.peek("k", 0).resetAfter == Nanos{0});
}

/// The Decision's `limit` is the capacity: `count` for the windows, `burst` for the buckets,
/// also when the burst is below or above the count.
template <class F>
void checkLimitField(F& f) {
    for (const Limit limit : {Limit::perMinute(10), Limit::perMinute(10).withBurst(4),
                              Limit::perMinute(10).withBurst(25)}) {
        INFO(describe(limit));
        Clock clock;
        auto limiter = f.make(limit, clock);
        const std::int64_t expected = capacityOf<typename F::Model>(limit);
        CHECK(limiter.peek("k", 0).limit == expected);
        CHECK(limiter.tryAcquire("k", 1).limit == expected);
        CHECK(limiter.tryAcquire("k", expected + 1).limit == expected);
        CHECK(limiter.tryAcquire("k", expected).limit == expected);  // refused: one is used
        CHECK(limiter.tryAcquire("k", expected - 1).allowed);
        CHECK(limiter.peek("k", 0).remaining == 0);
    }
}

/// Any byte string is a key, and distinct byte strings are distinct keys: the empty key,
/// embedded NULs, 0xFF bytes, 16/17-byte keys on both sides of the inline size, 4 KiB keys that
/// differ only in their last byte.
template <class F>
void checkKeysAreBytes(F& f) {
    using namespace std::chrono_literals;
    const Limit limit = Limit::perMinute(3);
    Clock clock;
    auto limiter = f.make(limit, clock);
    const std::string big(4096, 'x');
    std::string bigOther = big;
    bigOther.back() = 'y';
    const std::vector<std::string> keys = {
        std::string(),
        std::string(1, '\0'),
        std::string(2, '\0'),
        std::string("a\0b", 3),
        std::string("a\0c", 3),
        std::string("a"),
        std::string(1, '\xff'),
        std::string(2, '\xff'),
        std::string(16, '\xff'),
        std::string(17, '\xff'),
        std::string(16, '\0'),
        std::string(17, '\0'),
        std::string(4096, '\0'),
        big,
        bigOther,
    };
    for (std::size_t i = 0; i < keys.size(); ++i) {
        INFO("key #" << i << " of length " << keys[i].size());
        const Decision d = limiter.tryAcquire(keys[i], 3);
        REQUIRE(d.allowed);
        REQUIRE(!limiter.tryAcquire(keys[i], 1).allowed);
        for (std::size_t j = 0; j < keys.size(); ++j) {
            INFO("other key #" << j);
            REQUIRE(limiter.peek(keys[j], 0).remaining == (j <= i ? 0 : 3));
        }
    }
    // They all recover, and reset() of one key touches no other.
    limiter.reset(keys[0]);
    CHECK(limiter.peek(keys[0], 0).remaining == 3);
    CHECK(limiter.peek(keys[1], 0).remaining == 0);
    limiter.reset(big);
    CHECK(limiter.peek(big, 0).remaining == 3);
    CHECK(limiter.peek(bigOther, 0).remaining == 0);
    clock.advance(1h);
    for (const auto& key : keys) {
        CHECK(limiter.tryAcquire(key, 3).allowed);
    }
}

/// `reset(key)` forgets the key: its next request meets a fresh limit; other keys keep theirs.
template <class F>
void checkReset(F& f, const Limit& limit) {
    Clock clock;
    auto limiter = f.make(limit, clock);
    const std::int64_t capacity = capacityOf<typename F::Model>(limit);
    REQUIRE(limiter.tryAcquire("a", capacity).allowed);
    REQUIRE(limiter.tryAcquire("b", capacity).allowed);
    REQUIRE(!limiter.tryAcquire("a", 1).allowed);
    limiter.reset("a");
    const Decision fresh = limiter.peek("a", 0);
    CHECK(fresh.remaining == capacity);
    CHECK(fresh.resetAfter == Nanos{0});
    CHECK(limiter.tryAcquire("a", capacity).allowed);
    CHECK(!limiter.tryAcquire("b", 1).allowed);
    limiter.reset("never-seen");  // a no-op, not an error
    CHECK(limiter.peek("never-seen", 0).remaining == capacity);
}

/// Random traffic on three keys with a forward clock; every call is held to the rules:
/// `allowed(cost)` exactly when `cost <= remaining` before the call; `remaining` never
/// negative, reduced by exactly the cost when allowed and unchanged when refused; `limit` is the
/// capacity; `retryAfter` zero when allowed, `kNever` exactly for costs above the capacity,
/// otherwise a call one tick earlier fails and a call at exactly now + retryAfter passes;
/// at now + resetAfter the key is fresh (and one tick earlier it is not); `peek` returns the
/// decision `tryAcquire` then returns.
template <class F>
void checkRandomTraffic(F& f, const Limit& limit, std::uint64_t seed, int calls) {
    using Model = typename F::Model;
    constexpr Nanos kStep = F::kTick;
    Clock clock;
    auto limiter = f.make(limit, clock);
    Rng rng(seed);
    const std::int64_t capacity = capacityOf<Model>(limit);
    const Nanos longest = longestWait<Model>(limit, kStep);
    const std::array<std::string, 3> keys = {"a", "b", "c"};
    TimePoint now =
        at(floorToTick(Nanos{uniform(rng, -1'000'000'000'000, 1'000'000'000'000)}, kStep));
    const auto context = [&](int i, const std::string& key, std::int64_t cost, const Decision& d) {
        return describe(limit) + " seed=" + std::to_string(seed) + " call=" + std::to_string(i) +
               " key=" + key + " now=" + std::to_string(ticks(now)) +
               "ns cost=" + std::to_string(cost) + " -> " + describe(d);
    };
    int admitted = 0;
    int waited = 0;
    int never = 0;
    for (int i = 0; i < calls; ++i) {
        now += randomForwardStep(rng, limit, kStep);
        const std::string& key = keys.at(std::uniform_int_distribution<std::size_t>(0, 2)(rng));
        const std::int64_t cost = randomCost(rng, capacity);

        const Decision before = limiter.peek(key, 0, now);
        const Decision predicted = limiter.peek(key, cost, now);
        const Decision d = limiter.tryAcquire(key, cost, now);

        RLTEST_REQUIRE(before.allowed && before.retryAfter == Nanos{0}, context(i, key, 0, before));
        RLTEST_REQUIRE(predicted == d,
                       context(i, key, cost, d) + " but peek said " + describe(predicted));
        RLTEST_REQUIRE(d.limit == capacity, context(i, key, cost, d));
        RLTEST_REQUIRE(d.remaining >= 0 && d.remaining <= capacity, context(i, key, cost, d));
        RLTEST_REQUIRE(
            d.allowed == (cost <= before.remaining),
            context(i, key, cost, d) + " remaining before " + std::to_string(before.remaining));
        if (d.allowed) {
            RLTEST_REQUIRE(d.retryAfter == Nanos{0}, context(i, key, cost, d));
            RLTEST_REQUIRE(d.remaining == before.remaining - cost, context(i, key, cost, d));
        } else {
            RLTEST_REQUIRE(d.remaining == before.remaining, context(i, key, cost, d));
            RLTEST_REQUIRE(d.resetAfter == before.resetAfter, context(i, key, cost, d));
            RLTEST_REQUIRE(d.never() == (cost > capacity), context(i, key, cost, d));
            if (!d.never()) {
                RLTEST_REQUIRE(d.retryAfter > Nanos{0} && d.retryAfter <= longest,
                               context(i, key, cost, d));
                const Decision early = limiter.peek(key, cost, now + d.retryAfter - kStep);
                const Decision onTime = limiter.peek(key, cost, now + d.retryAfter);
                RLTEST_REQUIRE(!early.allowed, context(i, key, cost, d) + " yet one tick earlier " +
                                                   describe(early));
                RLTEST_REQUIRE(onTime.allowed,
                               context(i, key, cost, d) + " yet on time " + describe(onTime));
            }
        }
        // resetAfter: fresh at exactly now + resetAfter, not one tick earlier.
        const Decision state = limiter.peek(key, 0, now);
        RLTEST_REQUIRE(d.resetAfter == state.resetAfter, context(i, key, cost, d));
        RLTEST_REQUIRE(state.remaining == d.remaining, context(i, key, cost, d));
        RLTEST_REQUIRE(d.resetAfter >= Nanos{0} && d.resetAfter <= longest,
                       context(i, key, cost, d));
        const Decision fresh = limiter.peek(key, 0, now + d.resetAfter);
        RLTEST_REQUIRE(fresh.remaining == capacity && fresh.resetAfter == Nanos{0},
                       context(i, key, cost, d) + " then " + describe(fresh));
        if (d.resetAfter > Nanos{0}) {
            const Decision notYet = limiter.peek(key, 0, now + d.resetAfter - kStep);
            RLTEST_REQUIRE(notYet.remaining < capacity && notYet.resetAfter == kStep,
                           context(i, key, cost, d) + " then " + describe(notYet));
        } else {
            RLTEST_REQUIRE(state.remaining == capacity, context(i, key, cost, d));
        }
        admitted += d.allowed ? 1 : 0;
        waited += !d.allowed && !d.never() ? 1 : 0;
        never += d.never() ? 1 : 0;
        // Sometimes the client comes back exactly when told to.
        if (!d.allowed && !d.never() && std::uniform_int_distribution<int>(0, 3)(rng) == 0) {
            now += d.retryAfter;
            const Decision retried = limiter.tryAcquire(key, cost, now);
            RLTEST_REQUIRE(retried.allowed,
                           context(i, key, cost, d) + " retried: " + describe(retried));
        }
    }
    // The traffic reached every kind of answer.
    INFO(describe(limit) + ": " + std::to_string(admitted) + " admitted, " +
         std::to_string(waited) + " told to wait, " + std::to_string(never) + " never");
    CHECK(admitted > 0);
    CHECK(waited > 0);
    CHECK(never > 0);
}

/// Brings `key` to an exhausted state whose last write is at the returned time: random history,
/// then (if needed) waiting until a cost-1 call passes, then taking what is left at that instant.
template <class F, class L>
TimePoint exhaustWithWriteAt(L& limiter, const Limit& limit, const std::string& key, TimePoint t,
                             Rng& rng) {
    const std::int64_t capacity = capacityOf<typename F::Model>(limit);
    for (int i = 0; i < 20; ++i) {
        t += randomForwardStep(rng, limit, F::kTick);
        (void)limiter.tryAcquire(key, std::uniform_int_distribution<std::int64_t>(1, capacity)(rng),
                                 t);
    }
    for (;;) {
        const Decision d = limiter.tryAcquire(key, 1, t);
        if (d.allowed) {
            break;
        }
        INFO(describe(limit) + " refused with " + describe(d));
        REQUIRE(!d.never());
        REQUIRE(d.retryAfter > Nanos{0});  // or this loop would never end
        t += d.retryAfter;
    }
    const std::int64_t left = limiter.peek(key, 0, t).remaining;
    if (left > 0) {
        REQUIRE(limiter.tryAcquire(key, left, t).allowed);
    }
    REQUIRE(limiter.peek(key, 0, t).remaining == 0);
    return t;
}

/// The clock steps back by `step`, beyond `options`' late-call tolerance, around an exhausted
/// key whose last write was at `t`: nothing extra is admitted, the wait after the step is the
/// wait at the last write (token bucket and windows; never above one refill from empty for the
/// leaky bucket), and a call at exactly now + retryAfter passes.
template <class F>
void checkStepBackAroundExhaustedKey(F& f, const Limit& limit, Nanos step, std::uint64_t seed,
                                     const ratelimit::LimiterOptions& options) {
    using Model = typename F::Model;
    REQUIRE(step > options.lateCallTolerance);
    Clock clock;
    auto limiter = f.make(limit, clock, options);
    Rng rng(seed);
    const TimePoint t =
        exhaustWithWriteAt<F>(limiter, limit, "k", at(std::chrono::hours{24 * 400}), rng);

    const Decision before = limiter.tryAcquire("k", 1, t);
    REQUIRE(!before.allowed);
    REQUIRE(!before.never());
    // A refusal after the last write writes nothing: the step below keeps the wait at the write,
    // not the shorter one seen here.
    const Nanos since = floorToTick(before.retryAfter / 2, F::kTick);
    const Decision later = limiter.tryAcquire("k", 1, t + since);
    REQUIRE(!later.allowed);
    CHECK(later.retryAfter <= before.retryAfter - since);

    const TimePoint back = t - step;
    const Decision peeked = limiter.peek("k", 1, back);
    const Decision after = limiter.tryAcquire("k", 1, back);
    INFO(describe(limit) + " step back " + std::to_string(step.count()) + "ns; before " +
         describe(before) + ", after " + describe(after));
    CHECK(peeked == after);
    REQUIRE(!after.allowed);
    CHECK(after.remaining == 0);
    REQUIRE(after.retryAfter > Nanos{0});
    // Never longer than one period (fixed window, sliding log), two (sliding counter, whose
    // waits reach 2W without any step) or one refill from empty (buckets).
    CHECK(after.retryAfter <= longestWait<Model>(limit, F::kTick));
    if constexpr (!std::is_same_v<Model, ratelimit::LeakyBucketModel>) {
        CHECK(after.retryAfter == before.retryAfter);
    }
    if constexpr (!Model::kBucket && !std::is_same_v<Model, ratelimit::SlidingCounterModel>) {
        CHECK(after.retryAfter <= limit.period);
    }
    // Nothing admitted before back + retryAfter (these calls are after the rebase point).
    const Nanos wait = after.retryAfter;
    const Nanos tick = F::kTick;
    for (const Nanos offset :
         {Nanos{0}, tick, floorToTick(wait / 3, tick), floorToTick(wait / 2, tick), wait - tick}) {
        if (offset < wait) {
            const Decision d = limiter.tryAcquire("k", 1, back + offset);
            INFO("at back + " << offset.count() << "ns: " << describe(d));
            CHECK(!d.allowed);
            CHECK(d.retryAfter == wait - offset);
        }
    }
    const Decision onTime = limiter.tryAcquire("k", 1, back + wait);
    INFO("at back + retryAfter: " + describe(onTime));
    CHECK(onTime.allowed);
}

/// A call `lateness` (within `options`' late-call tolerance) earlier than an exhausted key's last
/// write at `t` is a late call: answered at `t`, with nothing rebased. Its wait is the wait at
/// `t` plus its lateness, nothing passes before it ends, and a call at exactly now + retryAfter
/// passes.
template <class F>
void checkLateCallAroundExhaustedKey(F& f, const Limit& limit, Nanos lateness, std::uint64_t seed,
                                     const ratelimit::LimiterOptions& options) {
    REQUIRE(lateness <= options.lateCallTolerance);
    Clock clock;
    auto limiter = f.make(limit, clock, options);
    Rng rng(seed);
    const TimePoint t =
        exhaustWithWriteAt<F>(limiter, limit, "k", at(std::chrono::hours{24 * 400}), rng);
    const Decision before = limiter.peek("k", 1, t);
    REQUIRE(!before.allowed);
    REQUIRE(!before.never());

    const TimePoint late = t - lateness;
    const Decision peeked = limiter.peek("k", 1, late);
    const Decision after = limiter.tryAcquire("k", 1, late);
    INFO(describe(limit) + " late by " + std::to_string(lateness.count()) + "ns; at the write " +
         describe(before) + ", late " + describe(after));
    CHECK(peeked == after);
    CHECK(!after.allowed);
    CHECK(after.remaining == before.remaining);
    CHECK(after.retryAfter == before.retryAfter + lateness);
    CHECK(after.resetAfter == before.resetAfter + lateness);
    // Nothing was rebased: the key answers at and after its last write as before the late call.
    CHECK(limiter.peek("k", 1, t) == before);
    CHECK(!limiter.tryAcquire("k", 1, t + before.retryAfter - F::kTick).allowed);
    CHECK(limiter.tryAcquire("k", 1, late + after.retryAfter).allowed);
}

/// A step back around a partly used key, late call or clock step, refills nothing and counts
/// nothing twice: the remaining count after the step is the one before it (never more, for the
/// leaky bucket).
template <class F>
void checkStepBackKeepsRemaining(F& f, const Limit& limit, Nanos step,
                                 const ratelimit::LimiterOptions& options) {
    using Model = typename F::Model;
    Clock clock;
    auto limiter = f.make(limit, clock, options);
    const std::int64_t capacity = capacityOf<Model>(limit);
    const TimePoint t = at(std::chrono::hours{24 * 400} + floorToTick(limit.period / 3, F::kTick));
    const std::int64_t take = std::max<std::int64_t>(1, capacity / 3);
    REQUIRE(limiter.tryAcquire("k", take, t).allowed);
    const Decision before = limiter.peek("k", 0, t);
    REQUIRE(before.remaining == capacity - take);
    const Decision after = limiter.peek("k", 0, t - step);
    INFO(describe(limit) + " step " + std::to_string(step.count()) + "ns: before " +
         describe(before) + " after " + describe(after));
    // A late call's waits count from its own time, a rebased key's from the rebase.
    const Nanos lateness = step <= options.lateCallTolerance ? step : Nanos{0};
    if constexpr (std::is_same_v<Model, ratelimit::LeakyBucketModel>) {
        CHECK(after.remaining <= before.remaining);
    } else {
        CHECK(after.remaining == before.remaining);
        CHECK(after.resetAfter == before.resetAfter + lateness);
    }
    // Taking everything left at the earlier time is allowed only up to what was left.
    CHECK(!limiter.tryAcquire("k", after.remaining + 1, t - step).allowed);
    CHECK(limiter.tryAcquire("k", after.remaining, t - step).allowed);
    CHECK(!limiter.tryAcquire("k", 1, t - step).allowed);
}

/// At both ends of the clock's range: the capacity and no more at one instant, and a wait that
/// ends when it says.
template <class F>
void checkClockRangeEnds(F& f, const Limit& limit) {
    using Model = typename F::Model;
    const std::int64_t capacity = capacityOf<Model>(limit);
    const Nanos longest = longestWait<Model>(limit, F::kTick);
    const Nanos margin = 4 * longest;
    for (const TimePoint base :
         {TimePoint::max() - std::chrono::seconds{1}, TimePoint::max() - margin, TimePoint::max(),
          TimePoint::min() + margin, TimePoint::min() + std::chrono::seconds{1},
          TimePoint::min()}) {
        INFO(describe(limit) + " at " + std::to_string(ticks(base)) + "ns");
        Clock clock;
        auto limiter = f.make(limit, clock);
        const Decision all = limiter.tryAcquire("k", capacity, base);
        CHECK(all.allowed);
        CHECK(all.remaining == 0);
        const Decision more = limiter.tryAcquire("k", 1, base);
        INFO("one more: " + describe(more));
        CHECK(!more.allowed);
        CHECK(!more.never());
        CHECK(more.retryAfter > Nanos{0});
        CHECK(more.retryAfter <= longest);
        CHECK(limiter.peek("k", 0, base).remaining == 0);
        if (base <= TimePoint::max() - more.retryAfter) {  // max() - base overflows for base < 0
            CHECK(limiter.tryAcquire("k", 1, base + more.retryAfter).allowed);
        }
    }
}

/// What `d` must say by `e`.
inline void checkExpect(const Decision& d, const Expect& e) {
    INFO(describe(d));
    if (e.allowed) {
        CHECK(d.allowed == *e.allowed);
    }
    if (e.remaining) {
        CHECK(d.remaining == *e.remaining);
    }
    if (e.retryAfter) {
        CHECK(d.retryAfter == *e.retryAfter);
    }
    if (e.resetAfter) {
        CHECK(d.resetAfter == *e.resetAfter);
    }
}

/// The worked scenarios of docs/semantics.md (support/worked_scenarios.hpp): the admissions per
/// batch of each, and every decision the table pins down.
template <class F>
void checkWorkedScenarios(F& f) {
    for (const WorkedScenario& scenario : workedScenarios(F::kTick)) {
        INFO(scenario.name);
        const Outcome& outcome = scenario.outcomes.at(algorithmIndex<typename F::Model>());
        Clock clock;
        auto limiter = f.make(scenario.limit, clock);
        std::vector<int> admitted;
        for (std::size_t b = 0; b < scenario.batches.size(); ++b) {
            INFO("batch " << b);
            clock.set(at(scenario.batches[b].at));
            const auto [n, last] = send(limiter, scenario.batches[b].requests);
            admitted.push_back(n);
            if (b < outcome.last.size()) {
                checkExpect(last, outcome.last[b]);
            }
            for (const Probe& probe : outcome.probes) {
                if (probe.afterBatch != b) {
                    continue;
                }
                INFO("then " << probe.calls << (probe.peek ? " peek" : " call") << " of cost "
                             << probe.cost << " at " << probe.at.count() << "ns");
                int probeAdmitted = 0;
                Decision d;
                for (int i = 0; i < probe.calls; ++i) {
                    d = probe.peek ? limiter.peek("client", probe.cost, at(probe.at))
                                   : limiter.tryAcquire("client", probe.cost, at(probe.at));
                    probeAdmitted += d.allowed ? 1 : 0;
                }
                if (probe.admitted) {
                    CHECK(probeAdmitted == *probe.admitted);
                }
                checkExpect(d, probe.last);
            }
        }
        CHECK(admitted == outcome.admitted);
    }
}

// ---------------------------------------------------------------------------------------------
// What each algorithm runs them over: its own limits and seeds

template <class F>
void checkRefusalsConsumeNothing(F& f) {
    using namespace std::chrono_literals;
    for (const Limit& limit : heldBy(
             f,
             byKind<typename F::Model>(
                 {Limit::perMinute(10), Limit::per(3, 10s), Limit::perSecond(7)},
                 {Limit::perMinute(10), Limit::per(3, 10s), Limit::perSecond(7).withBurst(2)}))) {
        checkRefusalsConsumeNothing(f, limit);
    }
}

template <class F>
void checkImpossibleCosts(F& f) {
    using namespace std::chrono_literals;
    for (const Limit& limit : heldBy(
             f,
             byKind<typename F::Model>(
                 {Limit::perMinute(10), Limit::perMinute(10).withBurst(40),  // burst ignored
                  Limit::perHour(999'999), Limit::per(Limit::kMaxCount, 1h)},
                 {Limit::perMinute(10), Limit::perMinute(10).withBurst(4), Limit::perHour(999'999),
                  Limit::per(Limit::kMaxCount, 1ms).withBurst(Limit::kMaxCount)}))) {
        checkImpossibleCosts(f, limit);
    }
}

template <class F>
void checkReset(F& f) {
    checkReset(f, F::Model::kBucket ? Limit::perMinute(10).withBurst(4) : Limit::perMinute(10));
}

template <class F>
void checkRandomTraffic(F& f) {
    std::uint64_t seed = kRandomTrafficSeeds.at(algorithmIndex<typename F::Model>());
    for (const Limit& limit : sampleLimits(F::kTick)) {
        // Seeds count every sample limit, so a limit meets the same traffic on every storage.
        const std::uint64_t limitSeed = seed++;
        if (f.accepts(limit)) {
            checkRandomTraffic(f, limit, limitSeed, F::kRandomCalls);
        }
    }
}

template <class F>
void checkStepBack(F& f) {
    using namespace std::chrono_literals;
    std::uint64_t seed = kStepBackSeeds.at(algorithmIndex<typename F::Model>());
    for (const Limit& limit :
         heldBy(f, byKind<typename F::Model>(
                       {Limit::perMinute(10), Limit::per(3, 10s), Limit::perHour(999'999),
                        Limit::perSecond(7), Limit::per(10, 90s)},
                       {Limit::perMinute(10), Limit::per(3, 10s), Limit::perHour(999'999),
                        Limit::perSecond(7).withBurst(3), Limit::per(10, 90s).withBurst(20)}))) {
        // Every step back rebases with a tolerance of 0; by default those beyond 1 s do.
        const ratelimit::LimiterOptions rebaseAll{.lateCallTolerance = Nanos{0}};
        const ratelimit::LimiterOptions defaults;
        for (const Nanos step : {Nanos{1s}, Nanos{1h}, Nanos{24h}}) {
            checkStepBackAroundExhaustedKey(f, limit, step, seed++, rebaseAll);
            checkStepBackKeepsRemaining(f, limit, step, rebaseAll);
        }
        for (const Nanos step : {Nanos{1s} + F::kTick, Nanos{1h}, Nanos{24h}}) {
            checkStepBackAroundExhaustedKey(f, limit, step, seed++, defaults);
            checkStepBackKeepsRemaining(f, limit, step, defaults);
        }
        for (const Nanos lateness : {F::kTick, Nanos{1ms}, Nanos{1s}}) {
            checkLateCallAroundExhaustedKey(f, limit, lateness, seed++, defaults);
            checkStepBackKeepsRemaining(f, limit, lateness, defaults);
        }
    }
}

template <class F>
void checkClockRangeEnds(F& f) {
    using namespace std::chrono_literals;
    for (const Limit& limit : byKind<typename F::Model>(
             {Limit::perMinute(10), Limit::per(3, 10s), Limit::perHour(999'999)},
             {Limit::perMinute(10), Limit::per(3, 10s).withBurst(5), Limit::perHour(999'999)})) {
        checkClockRangeEnds(f, limit);
    }
}

}  // namespace ratelimit_test
