#pragma once

// Shared checks for the algorithm tests (tests/algorithms/*_test.cpp): every check drives a
// public limiter (`FixedWindow<MemoryStorage, ManualClock>`, ...) with explicit times, never
// sleeps, and holds it to the rules of DESIGN.md, "Semantics every algorithm keeps". The
// expected values are computed here independently of the library (exact integers, __int128
// where products get large), never by calling the models.

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <ratelimit/clock.hpp>
#include <ratelimit/decision.hpp>
#include <ratelimit/limit.hpp>
#include <ratelimit/limiter.hpp>
#include <ratelimit/storage/memory.hpp>

#include "support/catch.hpp"

// Checks inside hot loops: Catch's assertion machinery runs only when the condition fails, so
// loops of a million calls stay fast in Debug builds. `context` is evaluated only on failure.
// NOLINTNEXTLINE(cppcoreguidelines-macro-usage): needs #cond, lazy context, caller's line
#define RLTEST_REQUIRE(cond, context) \
    do {                              \
        if (!(cond)) {                \
            INFO(context);            \
            FAIL("violated: " #cond); \
        }                             \
    } while (false)

namespace rltest {

using Clock = ratelimit::ManualClock;
using TimePoint = Clock::time_point;
using Nanos = std::chrono::nanoseconds;
using ratelimit::Decision;
using ratelimit::Limit;
__extension__ using Int128 = __int128;

/// One tick of `ManualClock`.
inline constexpr Nanos kTick{1};
inline constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();

inline TimePoint at(Nanos sinceZero) { return TimePoint{sinceZero}; }
inline std::int64_t ticks(TimePoint t) { return t.time_since_epoch().count(); }

/// Ceiling division of non-negative 128-bit values.
inline Int128 ceilDiv(Int128 n, Int128 d) { return n / d + (n % d != 0 ? 1 : 0); }

/// Floor division for any sign of `n` (d > 0).
inline Int128 floorDiv(Int128 n, Int128 d) {
    const Int128 q = n / d;
    return (n % d != 0 && n < 0) ? q - 1 : q;
}

/// Narrows a value the test knows to fit.
inline std::int64_t narrow(Int128 v) {
    REQUIRE(v <= Int128{kInt64Max});
    REQUIRE(v >= -Int128{kInt64Max});
    return static_cast<std::int64_t>(v);
}

template <class L>
struct LimiterTraits;

template <class M, class S, class C>
struct LimiterTraits<ratelimit::Limiter<M, S, C>> {
    using Model = M;
    static constexpr bool kBucket = M::kBucket;
};

/// True for the token and leaky buckets (capacity `burst`), false for the window algorithms
/// (capacity `count`).
template <class L>
inline constexpr bool kIsBucket = LimiterTraits<L>::kBucket;

/// What a fresh key offers: `count` for the windows, `burst` for the buckets.
template <class L>
std::int64_t capacityOf(const Limit& limit) {
    return kIsBucket<L> ? limit.burst : limit.count;
}

/// The longest wait a cost of at most the capacity can ever meet, from any state: one period
/// for the fixed window and the sliding log, two for the sliding counter (its previous window
/// can weigh fully at a window start), the refill of a whole bucket for the buckets.
template <class L>
Nanos longestWait(const Limit& limit) {
    using Model = typename LimiterTraits<L>::Model;
    if constexpr (kIsBucket<L>) {
        return Nanos{narrow(ceilDiv(Int128{limit.burst} * limit.period.count(), limit.count))};
    } else if constexpr (std::is_same_v<Model, ratelimit::SlidingCounterModel>) {
        return 2 * limit.period;
    } else {
        return limit.period;
    }
}

inline std::string describe(const Limit& l) {
    return "Limit{count=" + std::to_string(l.count) +
           ", period=" + std::to_string(l.period.count()) + "ns, burst=" + std::to_string(l.burst) +
           "}";
}

inline std::string describe(const Decision& d) {
    return std::string("Decision{allowed=") + (d.allowed ? "true" : "false") +
           ", limit=" + std::to_string(d.limit) + ", remaining=" + std::to_string(d.remaining) +
           ", retryAfter=" +
           (d.never() ? std::string("never") : std::to_string(d.retryAfter.count()) + "ns") +
           ", resetAfter=" + std::to_string(d.resetAfter.count()) + "ns}";
}

/// A storage of its own for each limiter, small and seeded, so tests are deterministic and
/// cheap to construct.
inline ratelimit::MemoryStorage smallStorage() {
    ratelimit::MemoryStorage::Options options;
    options.maxKeys = 4096;
    options.seed = 0x5eed;
    return ratelimit::MemoryStorage{options};
}

template <class L>
L makeLimiter(const Limit& limit, const Clock& clock, ratelimit::LimiterOptions options = {}) {
    return L{limit, smallStorage(), clock, std::move(options)};
}

/// Whether the memory storage can hold `limit` for any algorithm (the bounds DESIGN.md states:
/// bucket units burst·period/gcd and spans below 2^62), so random limits stay accepted ones.
inline bool representable(const Limit& limit) {
    const Int128 bound = Int128{1} << 62;
    std::int64_t a = limit.count;
    std::int64_t b = limit.period.count();
    while (b != 0) {
        const std::int64_t t = a % b;
        a = b;
        b = t;
    }
    const Int128 units = Int128{limit.burst} * (limit.period.count() / a);
    return units < bound && Int128{limit.period.count()} * 2 < bound;
}

// ---------------------------------------------------------------------------------------------
// Checks every algorithm passes. `L` is a public limiter alias over MemoryStorage and
// ManualClock.

/// Limits of every shape the random checks run over: the rates the design names, bursts above
/// and below the count, rates above one per tick, coarse and fine periods.
inline std::vector<Limit> sampleLimits() {
    using namespace std::chrono_literals;
    return {
        Limit::perSecond(7),
        Limit::per(3, 10s),
        Limit::perHour(999'999),
        Limit::perMinute(10),
        Limit::per(10, 90s).withBurst(20),
        Limit::perSecond(7).withBurst(3),
        Limit::perMinute(100).withBurst(1),
        Limit::per(1'000, 1ms).withBurst(2'500),
        Limit::per(5, 3ns).withBurst(2),
        Limit::per(1, 1ns),
        Limit::perDay(1),
        Limit::per(std::int64_t{1} << 40, 1h).withBurst(12345),
    };
}

/// A random forward step of the clock: often none or one tick, mostly within a few emission
/// intervals or a period, sometimes a day.
inline Nanos randomForwardStep(std::mt19937_64& rng, const Limit& limit) {
    const std::int64_t period = limit.period.count();
    const std::int64_t interval = std::max<std::int64_t>(1, period / limit.count);
    const auto upTo = [&](std::int64_t hi) {
        return Nanos{
            std::uniform_int_distribution<std::int64_t>(0, std::max<std::int64_t>(hi, 0))(rng)};
    };
    const int pick = std::uniform_int_distribution<int>(0, 99)(rng);
    if (pick < 20) {
        return Nanos{0};
    }
    if (pick < 30) {
        return kTick;
    }
    if (pick < 65) {
        return upTo(3 * interval);
    }
    if (pick < 85) {
        return upTo(period);
    }
    if (pick < 97) {
        return upTo(std::min<std::int64_t>(period, kInt64Max / 4) * 3);
    }
    return std::chrono::hours{24};
}

/// A random cost: mostly within the capacity, sometimes 0, exactly the capacity, one above,
/// or absurdly large.
inline std::int64_t randomCost(std::mt19937_64& rng, std::int64_t capacity) {
    const int pick = std::uniform_int_distribution<int>(0, 99)(rng);
    if (pick < 5) {
        return 0;
    }
    if (pick < 40) {
        return 1;
    }
    if (pick < 88) {
        return std::uniform_int_distribution<std::int64_t>(
            1, std::min<std::int64_t>(capacity, 1'000'000))(rng);
    }
    if (pick < 94) {
        return capacity;
    }
    if (pick < 98) {
        return capacity + 1;
    }
    return kInt64Max;
}

/// Random traffic on three keys with a forward clock; every call is held to the rules:
/// `allowed(cost)` exactly when `cost <= remaining` before the call; `remaining` never
/// negative, reduced by exactly the cost when allowed and unchanged when refused; `limit` is the
/// capacity; `retryAfter` zero when allowed, `kNever` exactly for costs above the capacity,
/// otherwise a call one tick earlier fails and a call at exactly now + retryAfter passes;
/// at now + resetAfter the key is fresh (and one tick earlier it is not); `peek` returns the
/// decision `tryAcquire` then returns.
template <class L>
void checkRandomTraffic(const Limit& limit, std::uint64_t seed, int calls) {
    Clock clock;
    auto limiter = makeLimiter<L>(limit, clock);
    std::mt19937_64 rng(seed);
    const std::int64_t capacity = capacityOf<L>(limit);
    const std::array<std::string, 3> keys = {"a", "b", "c"};
    TimePoint now = at(Nanos{
        std::uniform_int_distribution<std::int64_t>(-1'000'000'000'000, 1'000'000'000'000)(rng)});
    const auto context = [&](int i, const std::string& key, std::int64_t cost, const Decision& d) {
        return describe(limit) + " seed=" + std::to_string(seed) + " call=" + std::to_string(i) +
               " key=" + key + " now=" + std::to_string(ticks(now)) +
               "ns cost=" + std::to_string(cost) + " -> " + describe(d);
    };
    int admitted = 0;
    int waited = 0;
    int never = 0;
    for (int i = 0; i < calls; ++i) {
        now += randomForwardStep(rng, limit);
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
                RLTEST_REQUIRE(d.retryAfter > Nanos{0} && d.retryAfter <= longestWait<L>(limit),
                               context(i, key, cost, d));
                const Decision early = limiter.peek(key, cost, now + d.retryAfter - kTick);
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
        RLTEST_REQUIRE(d.resetAfter >= Nanos{0} && d.resetAfter <= longestWait<L>(limit),
                       context(i, key, cost, d));
        const Decision fresh = limiter.peek(key, 0, now + d.resetAfter);
        RLTEST_REQUIRE(fresh.remaining == capacity && fresh.resetAfter == Nanos{0},
                       context(i, key, cost, d) + " then " + describe(fresh));
        if (d.resetAfter > Nanos{0}) {
            const Decision notYet = limiter.peek(key, 0, now + d.resetAfter - kTick);
            RLTEST_REQUIRE(notYet.remaining < capacity && notYet.resetAfter == kTick,
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

/// `cost == 0` is a peek: allowed, nothing changes, the other fields report the current state.
template <class L>
void checkCostZeroIsAPeek() {
    using namespace std::chrono_literals;
    const Limit limit = Limit::perMinute(10).withBurst(10);
    Clock clock;
    auto limiter = makeLimiter<L>(limit, clock);
    auto twin = makeLimiter<L>(limit, clock);

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
        INFO(describe(a) + " vs " + describe(b));
        REQUIRE(a == b);
    }
    // A cost-0 call on a key never seen leaves it fresh.
    CHECK(limiter.tryAcquire("unseen", 0).resetAfter == 0ns);
    CHECK(limiter.peek("unseen", 0).remaining == 10);
}

/// A cost above the capacity can never pass: `kNever`, nothing consumed, on a fresh key and on
/// a used one; so does a cost of INT64_MAX, without overflow.
template <class L>
void checkImpossibleCosts(const Limit& limit) {
    using namespace std::chrono_literals;
    Clock clock;
    clock.set(at(7s));
    auto limiter = makeLimiter<L>(limit, clock);
    const std::int64_t capacity = capacityOf<L>(limit);
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
    clock.advance(1ns);
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
    CHECK(again.retryAfter <= longestWait<L>(limit));
    CHECK(limiter.tryAcquire("k", capacity, clock.now() + again.retryAfter).allowed);
}

/// A negative cost is a programming error: std::invalid_argument naming the cost, nothing
/// consumed.
template <class L>
void checkNegativeCostThrows() {
    Clock clock;
    auto limiter = makeLimiter<L>(Limit::perMinute(10), clock);
    for (const std::int64_t cost :
         {std::int64_t{-1}, std::int64_t{-10}, std::numeric_limits<std::int64_t>::min()}) {
        INFO("cost " << cost);
        CHECK_THROWS_AS(limiter.tryAcquire("k", cost), std::invalid_argument);
        CHECK_THROWS_AS(limiter.tryAcquire("k", cost, clock.now()), std::invalid_argument);
        CHECK_THROWS_AS(limiter.peek("k", cost), std::invalid_argument);
        try {
            (void)limiter.tryAcquire("k", cost);
        } catch (const std::invalid_argument& e) {
            CHECK(std::string_view(e.what()).find("cost") != std::string_view::npos);
        }
    }
    CHECK(limiter.peek("k", 0).remaining == 10);
    CHECK(limiter.peek("k", 0).resetAfter == Nanos{0});
}

/// Refusals consume nothing: hammering an exhausted key does not extend its lockout, at one
/// instant or while the wait runs down.
template <class L>
void checkRefusalsConsumeNothing(const Limit& limit) {
    using namespace std::chrono_literals;
    Clock clock;
    clock.set(at(1h + 10s));
    auto limiter = makeLimiter<L>(limit, clock);
    const std::int64_t capacity = capacityOf<L>(limit);
    REQUIRE(limiter.tryAcquire("k", capacity).allowed);
    const Decision first = limiter.tryAcquire("k", 1);
    REQUIRE(!first.allowed);
    REQUIRE(first.retryAfter > 0ns);
    REQUIRE(!first.never());
    const TimePoint start = clock.now();
    for (int i = 0; i < 1000; ++i) {
        const Decision d = limiter.tryAcquire("k", 1 + i % capacity);
        REQUIRE(!d.allowed);
        REQUIRE(d.remaining == first.remaining);
        if (i % capacity == 0) {
            REQUIRE(d.retryAfter == first.retryAfter);
        }
        REQUIRE(d.resetAfter == first.resetAfter);
    }
    // Hammering while time passes: the wait runs down tick for tick.
    const Nanos stride = std::max(first.retryAfter / 1000, kTick);
    for (Nanos elapsed{0}; elapsed < first.retryAfter; elapsed += stride) {
        const Decision d = limiter.tryAcquire("k", 1, start + elapsed);
        REQUIRE(!d.allowed);
        REQUIRE(d.retryAfter == first.retryAfter - elapsed);
    }
    const Decision onTime = limiter.tryAcquire("k", 1, start + first.retryAfter);
    CHECK(onTime.allowed);
}

/// Any byte string is a key, and distinct byte strings are distinct keys: the empty key,
/// embedded NULs, 0xFF bytes, 16/17-byte keys on both sides of the inline size, 4 KiB keys that
/// differ only in their last byte.
template <class L>
void checkKeysAreBytes() {
    using namespace std::chrono_literals;
    const Limit limit = Limit::perMinute(3);
    Clock clock;
    auto limiter = makeLimiter<L>(limit, clock);
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
template <class L>
void checkReset(const Limit& limit) {
    Clock clock;
    auto limiter = makeLimiter<L>(limit, clock);
    const std::int64_t capacity = capacityOf<L>(limit);
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

/// Brings `key` to an exhausted state whose last write is at the returned time: random history,
/// then (if needed) waiting until a cost-1 call passes, then taking what is left at that instant.
template <class L>
TimePoint exhaustWithWriteAt(L& limiter, const Limit& limit, const std::string& key, TimePoint t,
                             std::mt19937_64& rng) {
    const std::int64_t capacity = capacityOf<L>(limit);
    for (int i = 0; i < 20; ++i) {
        t += randomForwardStep(rng, limit);
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

/// The clock steps back by `step` around an exhausted key whose last write was at `t`:
/// nothing extra is admitted, the wait after the step is the wait before it (token bucket and
/// windows; never above one refill from empty for the leaky bucket), and a call at exactly
/// now + retryAfter passes.
template <class L>
void checkStepBackAroundExhaustedKey(const Limit& limit, Nanos step, std::uint64_t seed) {
    using Model = typename LimiterTraits<L>::Model;
    Clock clock;
    auto limiter = makeLimiter<L>(limit, clock);
    std::mt19937_64 rng(seed);
    const TimePoint t =
        exhaustWithWriteAt(limiter, limit, "k", at(std::chrono::hours{24 * 400}), rng);

    const Decision before = limiter.tryAcquire("k", 1, t);
    REQUIRE(!before.allowed);
    REQUIRE(!before.never());

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
    CHECK(after.retryAfter <= longestWait<L>(limit));
    if constexpr (!std::is_same_v<Model, ratelimit::LeakyBucketModel>) {
        CHECK(after.retryAfter == before.retryAfter);
    }
    if constexpr (!kIsBucket<L>) {
        if constexpr (!std::is_same_v<Model, ratelimit::SlidingCounterModel>) {
            CHECK(after.retryAfter <= limit.period);
        }
    }
    // Nothing admitted before back + retryAfter (these calls are after the rebase point).
    const Nanos wait = after.retryAfter;
    for (const Nanos offset : {Nanos{0}, kTick, wait / 3, wait / 2, wait - kTick}) {
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

/// A step back around a partly used key refills nothing and counts nothing twice: the
/// remaining count after the step is the one before it (never more, for the leaky bucket).
template <class L>
void checkStepBackKeepsRemaining(const Limit& limit, Nanos step) {
    using Model = typename LimiterTraits<L>::Model;
    using namespace std::chrono_literals;
    Clock clock;
    auto limiter = makeLimiter<L>(limit, clock);
    const std::int64_t capacity = capacityOf<L>(limit);
    const TimePoint t = at(std::chrono::hours{24 * 400} + limit.period / 3);
    const std::int64_t take = std::max<std::int64_t>(1, capacity / 3);
    REQUIRE(limiter.tryAcquire("k", take, t).allowed);
    const Decision before = limiter.peek("k", 0, t);
    REQUIRE(before.remaining == capacity - take);
    const Decision after = limiter.peek("k", 0, t - step);
    INFO(describe(limit) + " step " + std::to_string(step.count()) + "ns: before " +
         describe(before) + " after " + describe(after));
    if constexpr (std::is_same_v<Model, ratelimit::LeakyBucketModel>) {
        CHECK(after.remaining <= before.remaining);
    } else {
        CHECK(after.remaining == before.remaining);
        CHECK(after.resetAfter == before.resetAfter);
    }
    // Taking everything left at the earlier time is allowed only up to what was left.
    CHECK(!limiter.tryAcquire("k", after.remaining + 1, t - step).allowed);
    CHECK(limiter.tryAcquire("k", after.remaining, t - step).allowed);
    CHECK(!limiter.tryAcquire("k", 1, t - step).allowed);
}

/// At both ends of the clock's range: the capacity and no more at one instant, and a wait that
/// ends when it says.
template <class L>
void checkClockRangeEnds(const Limit& limit) {
    const std::int64_t capacity = capacityOf<L>(limit);
    const Nanos margin = 4 * longestWait<L>(limit);
    for (const TimePoint base :
         {TimePoint::max() - std::chrono::seconds{1}, TimePoint::max() - margin, TimePoint::max(),
          TimePoint::min() + margin, TimePoint::min() + std::chrono::seconds{1},
          TimePoint::min()}) {
        INFO(describe(limit) + " at " + std::to_string(ticks(base)) + "ns");
        Clock clock;
        auto limiter = makeLimiter<L>(limit, clock);
        const Decision all = limiter.tryAcquire("k", capacity, base);
        CHECK(all.allowed);
        CHECK(all.remaining == 0);
        const Decision more = limiter.tryAcquire("k", 1, base);
        INFO("one more: " + describe(more));
        CHECK(!more.allowed);
        CHECK(!more.never());
        CHECK(more.retryAfter > Nanos{0});
        CHECK(more.retryAfter <= longestWait<L>(limit));
        CHECK(limiter.peek("k", 0, base).remaining == 0);
        if (base <= TimePoint::max() - more.retryAfter) {  // max() - base overflows for base < 0
            CHECK(limiter.tryAcquire("k", 1, base + more.retryAfter).allowed);
        }
    }
}

/// The Decision's `limit` is the capacity: `count` for the windows, `burst` for the buckets,
/// also when the burst is below or above the count.
template <class L>
void checkLimitField() {
    using namespace std::chrono_literals;
    for (const Limit limit : {Limit::perMinute(10), Limit::perMinute(10).withBurst(4),
                              Limit::perMinute(10).withBurst(25)}) {
        INFO(describe(limit));
        Clock clock;
        auto limiter = makeLimiter<L>(limit, clock);
        const std::int64_t expected = kIsBucket<L> ? limit.burst : limit.count;
        CHECK(limiter.peek("k", 0).limit == expected);
        CHECK(limiter.tryAcquire("k", 1).limit == expected);
        CHECK(limiter.tryAcquire("k", expected + 1).limit == expected);
        CHECK(limiter.tryAcquire("k", expected).limit == expected);  // refused: one is used
        CHECK(limiter.tryAcquire("k", expected - 1).allowed);
        CHECK(limiter.peek("k", 0).remaining == 0);
    }
}

/// No drift in the buckets: a saturating client that asks random costs in 1..maxCost and, when
/// refused, retries exactly at now + retryAfter. The expectation is an exact rational model kept
/// here in __int128 units where one token is `period` units and each tick refills `count` units
/// (no gcd, no rounding). Every decision matches it, admissions never run ahead of
/// burst + floor(t·count/period), and while the model never had to cap a refill (always, when
/// maxCost < burst and the rate is below one token per tick) every admission after a wait brings
/// the total to exactly burst + floor(t·count/period).
template <class L>
void checkBucketNoDrift(const Limit& limit, std::int64_t requests, std::int64_t maxCost,
                        std::uint64_t seed) {
    Clock clock;
    auto limiter = makeLimiter<L>(limit, clock);
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<std::int64_t> costs(1, maxCost);
    const Int128 count = limit.count;
    const Int128 period = limit.period.count();
    const Int128 burst = limit.burst;
    const Int128 capacity = burst * period;
    Int128 level = capacity;
    Int128 admitted = 0;
    std::int64_t t = 0;
    std::int64_t cost = costs(rng);
    std::int64_t admissionsAfterWait = 0;
    bool waited = false;
    bool capped = false;
    const auto context = [&](std::int64_t i, const Decision& d) {
        return describe(limit) + " request " + std::to_string(i) + " at " + std::to_string(t) +
               "ns cost " + std::to_string(cost) + " admitted so far " +
               std::to_string(static_cast<std::int64_t>(admitted)) + " -> " + describe(d);
    };
    for (std::int64_t i = 0; i < requests; ++i) {
        const Decision d = limiter.tryAcquire("client", cost, at(Nanos{t}));
        const bool allowed = level >= Int128{cost} * period;
        RLTEST_REQUIRE(d.allowed == allowed, context(i, d));
        if (allowed) {
            level -= Int128{cost} * period;
            admitted += cost;
            const Int128 ideal = burst + Int128{t} * count / period;
            RLTEST_REQUIRE(admitted <= ideal, context(i, d));
            if (waited && !capped) {
                RLTEST_REQUIRE(
                    admitted == ideal,
                    context(i, d) + " ideal " + std::to_string(static_cast<std::int64_t>(ideal)));
                ++admissionsAfterWait;
            }
            RLTEST_REQUIRE(d.remaining == level / period, context(i, d));
            RLTEST_REQUIRE(d.resetAfter.count() == ceilDiv(capacity - level, count), context(i, d));
            cost = costs(rng);
            waited = false;
        } else {
            const Int128 wait = ceilDiv(Int128{cost} * period - level, count);
            RLTEST_REQUIRE(d.retryAfter.count() == wait, context(i, d));
            RLTEST_REQUIRE(d.remaining == level / period, context(i, d));
            RLTEST_REQUIRE(d.resetAfter.count() == ceilDiv(capacity - level, count), context(i, d));
            RLTEST_REQUIRE(wait <= Int128{kInt64Max} - t, context(i, d));
            t += static_cast<std::int64_t>(wait);
            level += wait * count;
            if (level > capacity) {
                level = capacity;
                capped = true;
            }
            waited = true;
        }
    }
    INFO(describe(limit) + " admitted " + std::to_string(static_cast<std::int64_t>(admitted)) +
         " cost units by " + std::to_string(t) + "ns");
    CHECK(admitted <= burst + Int128{t} * count / period);
    CHECK(admitted >= Int128{requests / 2});
    if (maxCost < limit.burst && limit.count < limit.period.count()) {
        CHECK(!capped);
        CHECK(admissionsAfterWait >= requests / 2 - limit.burst - 1);
    }
}

}  // namespace rltest
