#pragma once

// The random traffic every randomized test draws from one `std::mt19937_64`: numbers, limits'
// time walks and costs. Two mixes of each: the algorithm tests' (a forward walk in the clock's
// ticks, costs around the capacity) and the Redis tests' (a walk that also steps back, costs
// aimed at what the last decision said remains). A test's seed fixes its traffic, so changing a
// distribution here changes every test that uses it.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include <ratelimit/limit.hpp>

namespace ratelimit_test {

using Rng = std::mt19937_64;

inline std::int64_t uniform(Rng& rng, std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
}

/// Log-uniform in [lo, hi]: small and huge values alike.
inline std::int64_t logUniform(Rng& rng, std::int64_t lo, std::int64_t hi) {
    const double x = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
    const double logLo = std::log2(static_cast<double>(lo));
    const double logHi = std::log2(static_cast<double>(hi));
    const auto v = static_cast<std::int64_t>(std::exp2(logLo + x * (logHi - logLo)));
    return std::clamp(v, lo, hi);
}

// ---------------------------------------------------------------------------------------------
// The algorithm tests' mix

/// A random forward step of the clock, a whole number of `tick`s: often none or one tick, mostly
/// within a few emission intervals or a period, sometimes a day. (With the memory storage's
/// 1 ns tick nothing is rounded; Redis counts whole microseconds.)
inline std::chrono::nanoseconds randomForwardStep(
    Rng& rng, const ratelimit::Limit& limit,
    std::chrono::nanoseconds tick = std::chrono::nanoseconds{1}) {
    constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
    const std::int64_t period = limit.period.count();
    const std::int64_t interval = std::max<std::int64_t>(1, period / limit.count);
    const auto upTo = [&](std::int64_t hi) {
        const std::int64_t drawn =
            std::uniform_int_distribution<std::int64_t>(0, std::max<std::int64_t>(hi, 0))(rng);
        return std::chrono::nanoseconds{drawn - drawn % tick.count()};
    };
    const int pick = std::uniform_int_distribution<int>(0, 99)(rng);
    if (pick < 20) {
        return std::chrono::nanoseconds{0};
    }
    if (pick < 30) {
        return tick;
    }
    if (pick < 65) {
        return upTo(3 * interval);
    }
    if (pick < 85) {
        return upTo(period);
    }
    if (pick < 97) {
        return upTo(std::min<std::int64_t>(period, kMax / 4) * 3);
    }
    return std::chrono::hours{24};
}

/// A random cost for a key of `capacity`: mostly within it, sometimes 0, exactly the capacity,
/// one above, or absurdly large.
inline std::int64_t randomCost(Rng& rng, std::int64_t capacity) {
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
    return std::numeric_limits<std::int64_t>::max();
}

// ---------------------------------------------------------------------------------------------
// The Redis tests' mix (Lua against C++, Redis against memory)

/// A random move of the clock for a limit of `period` ticks and `interval` ticks per request:
/// none, a few intervals, up to one or three periods, or back by up to two periods (negative).
inline std::int64_t randomMove(Rng& rng, std::int64_t period, std::int64_t interval) {
    const std::int64_t r = uniform(rng, 0, 99);
    if (r < 10) {
        return 0;
    }
    if (r < 50) {
        return uniform(rng, 0, 3 * interval);
    }
    if (r < 75) {
        return uniform(rng, 0, period);
    }
    if (r < 88) {
        return uniform(rng, 0, 3 * period);
    }
    return -uniform(rng, 1, 2 * period);
}

/// A cost in 0 … limit + 1, often at the edge of what the last decision said remains.
inline std::int64_t randomCost(Rng& rng, std::int64_t limit, std::int64_t lastRemaining) {
    const std::int64_t rc = uniform(rng, 0, 99);
    if (rc < 12) {
        return 0;
    }
    if (rc < 45) {
        return uniform(rng, 1, std::min<std::int64_t>(limit, 4));
    }
    if (rc < 60) {
        return uniform(rng, 0, limit + 1);
    }
    if (rc < 75) {
        return std::min(limit + 1, lastRemaining + uniform(rng, 0, 1));
    }
    if (rc < 85) {
        return uniform(rng, 1, std::max<std::int64_t>(1, limit / 3));
    }
    return rc < 93 ? limit : limit + 1;
}

}  // namespace ratelimit_test
