#pragma once

// Random quotas and costs shared by the randomized Redis tests (Lua against C++, Redis against
// memory), so both draw traffic the same way.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>

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
