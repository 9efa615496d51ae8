#pragma once

// What the algorithm tests (tests/algorithms/*_test.cpp) share: the public limiters over
// MemoryStorage and ManualClock, explicit times, exact arithmetic for expectations (__int128
// where products get large, never the models' own code), and a check macro cheap enough for
// loops of millions of calls. The rules every algorithm keeps are in contract.hpp.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <ratelimit/clock.hpp>
#include <ratelimit/decision.hpp>
#include <ratelimit/limit.hpp>
#include <ratelimit/limiter.hpp>
#include <ratelimit/options.hpp>
#include <ratelimit/storage/memory.hpp>

#include "support/algorithm_references.hpp"
#include "support/catch.hpp"
#include "support/limiters.hpp"

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

namespace ratelimit_test {

using Clock = ratelimit::ManualClock;
using TimePoint = Clock::time_point;
using Nanos = std::chrono::nanoseconds;

using MemoryFixedWindow = ratelimit::FixedWindow<ratelimit::MemoryStorage, Clock>;
using MemorySlidingLog = ratelimit::SlidingLog<ratelimit::MemoryStorage, Clock>;
using MemorySlidingCounter = ratelimit::SlidingCounter<ratelimit::MemoryStorage, Clock>;
using MemoryTokenBucket = ratelimit::TokenBucket<ratelimit::MemoryStorage, Clock>;
using MemoryLeakyBucket = ratelimit::LeakyBucket<ratelimit::MemoryStorage, Clock>;
/// The five limiters over the memory storage, for TEMPLATE_LIST_TEST_CASE.
using MemoryLimiters = LimitersOver<ratelimit::MemoryStorage, Clock>::Type;

/// One tick of `ManualClock`.
inline constexpr Nanos kTick{1};
inline constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();

inline TimePoint at(Nanos sinceZero) { return TimePoint{sinceZero}; }
inline std::int64_t ticks(TimePoint t) { return t.time_since_epoch().count(); }

/// Narrows a value the test knows to fit.
inline std::int64_t narrow(Int128 v) {
    REQUIRE(v <= Int128{kInt64Max});
    REQUIRE(v >= -Int128{kInt64Max});
    return static_cast<std::int64_t>(v);
}

/// The model and storage of a public limiter type.
template <class L>
struct LimiterTraits;

template <class M, class S, class C>
struct LimiterTraits<ratelimit::Limiter<M, S, C>> {
    using Model = M;
    using Storage = S;
};

/// True for the token and leaky buckets (capacity `burst`), false for the window algorithms
/// (capacity `count`).
template <class L>
inline constexpr bool kIsBucket = LimiterTraits<L>::Model::kBucket;

/// The longest wait a cost of at most the capacity can ever meet, from any state, in a clock of
/// `tick`: one period for the fixed window and the sliding log, two for the sliding counter
/// (its previous window can weigh fully at a window start), the refill of a whole bucket
/// (rounded up to the tick) for the buckets.
template <class Model>
Nanos longestWait(const Limit& limit, Nanos tick = kTick) {
    if constexpr (Model::kBucket) {
        const Int128 periodTicks = limit.period.count() / tick.count();
        return tick * narrow(ceilDiv(Int128{limit.burst} * periodTicks, limit.count));
    } else if constexpr (std::is_same_v<Model, ratelimit::SlidingCounterModel>) {
        return 2 * limit.period;
    } else {
        return limit.period;
    }
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

/// Whether the memory storage can hold `limit` for any algorithm (the bounds docs/semantics.md
/// states: bucket units burst·period/gcd and spans below 2^62), so random limits stay accepted.
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

/// Limits of every shape the random checks run over: the rates docs/semantics.md names, bursts
/// above and below the count, rates above one per tick, coarse and fine periods. `tick` is the
/// storage's: the two finest periods are a few of its ticks.
inline std::vector<Limit> sampleLimits(Nanos tick = kTick) {
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
        Limit::per(5, 3 * tick).withBurst(2),
        Limit::per(1, tick),
        Limit::perDay(1),
        Limit::per(std::int64_t{1} << 40, 1h).withBurst(12345),
    };
}

/// A reference's answer as the Decision the limiter must return (its values fit 64 bits: the
/// references compute within the limits and times a limiter accepts).
inline Decision toDecision(const Expected& e) {
    Decision d;
    d.allowed = e.allowed;
    d.limit = static_cast<std::int64_t>(e.limit);
    d.remaining = static_cast<std::int64_t>(e.remaining);
    d.retryAfter = e.retry == kNever ? Decision::kNever : Nanos{static_cast<std::int64_t>(e.retry)};
    d.resetAfter = Nanos{static_cast<std::int64_t>(e.reset)};
    return d;
}

}  // namespace ratelimit_test
