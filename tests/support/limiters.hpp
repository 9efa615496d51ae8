#pragma once

// What most tests do with limiters: name the five models, build one over the memory storage and
// a ManualClock, know what a fresh key offers, and send requests the usual way (a batch of cost-1
// requests at the limiter's own clock time, or cost-1 requests until the first refusal; any
// type with a limiter's `tryAcquire(key)` will do).

#include <cstdint>
#include <string_view>
#include <utility>

#include <ratelimit/clock.hpp>
#include <ratelimit/decision.hpp>
#include <ratelimit/limit.hpp>
#include <ratelimit/limiter.hpp>
#include <ratelimit/options.hpp>
#include <ratelimit/storage/memory.hpp>

/// The five models, for TEMPLATE_TEST_CASE (whose names then end in the model's name).
// NOLINTNEXTLINE(cppcoreguidelines-macro-usage): a type list for Catch2's variadic macro
#define RATELIMIT_TEST_MODELS                                                                \
    ratelimit::FixedWindowModel, ratelimit::SlidingLogModel, ratelimit::SlidingCounterModel, \
        ratelimit::TokenBucketModel, ratelimit::LeakyBucketModel

namespace ratelimit_test {

using ratelimit::Decision;
using ratelimit::Limit;
using ratelimit::LimiterOptions;
using ratelimit::ManualClock;
using ratelimit::MemoryStorage;

/// The limiter of `Model` over the memory storage, driven by a ManualClock.
template <class Model>
using MemoryLimiter = ratelimit::Limiter<Model, ratelimit::MemoryStorage, ratelimit::ManualClock>;

/// What a fresh key offers under `Model`: `burst` for the buckets, `count` for the windows.
template <class Model>
constexpr std::int64_t capacityOf(const ratelimit::Limit& limit) {
    return Model::kBucket ? limit.burst : limit.count;
}

/// Sends `n` requests of cost 1 for `key`; returns how many were admitted and the last decision.
template <class L>
std::pair<int, ratelimit::Decision> send(L& limiter, int n, std::string_view key = "client") {
    int admitted = 0;
    ratelimit::Decision last;
    for (int i = 0; i < n; ++i) {
        last = limiter.tryAcquire(key);
        admitted += last.allowed ? 1 : 0;
    }
    return {admitted, last};
}

/// Admissions of cost-1 requests for `key` until the first refusal, at most `cap` requests.
template <class L>
std::int64_t drain(L& limiter, std::string_view key, std::int64_t cap) {
    std::int64_t admitted = 0;
    for (std::int64_t i = 0; i < cap && limiter.tryAcquire(key).allowed; ++i) {
        ++admitted;
    }
    return admitted;
}

}  // namespace ratelimit_test
