#pragma once

// What most tests do with limiters: name the five models, build one over the memory storage and
// a ManualClock, know what a fresh key offers, and send requests the usual way (a batch of cost-1
// requests at the limiter's own clock time, or cost-1 requests until the first refusal; any
// type with a limiter's `tryAcquire(key)` will do).

#include <cstdint>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include <ratelimit/algorithms/algorithm.hpp>
#include <ratelimit/clock.hpp>
#include <ratelimit/decision.hpp>
#include <ratelimit/limit.hpp>
#include <ratelimit/limiter.hpp>
#include <ratelimit/options.hpp>
#include <ratelimit/storage/memory.hpp>

/// The five models, for TEMPLATE_TEST_CASE (whose names then end in the model's name): the
/// library's list, `ratelimit::AlgorithmModels`, spelled out (the static_assert below keeps the
/// two the same).
// NOLINTNEXTLINE(cppcoreguidelines-macro-usage): a type list for Catch2's variadic macro
#define RATELIMIT_TEST_MODELS                                                                \
    ratelimit::FixedWindowModel, ratelimit::SlidingLogModel, ratelimit::SlidingCounterModel, \
        ratelimit::TokenBucketModel, ratelimit::LeakyBucketModel
static_assert(std::is_same_v<std::tuple<RATELIMIT_TEST_MODELS>, ratelimit::AlgorithmModels>,
              "RATELIMIT_TEST_MODELS lists the library's algorithm models, in order");

namespace ratelimit_test {

using ratelimit::Decision;
using ratelimit::Limit;
using ratelimit::LimiterOptions;
using ratelimit::ManualClock;
using ratelimit::MemoryStorage;

/// The limiters of every model of `ratelimit::AlgorithmModels` over `Storage` and `Clock`, as a
/// type list for TEMPLATE_LIST_TEST_CASE.
template <class Storage, class Clock, class Models = ratelimit::AlgorithmModels>
struct LimitersOver;
template <class Storage, class Clock, class... Models>
struct LimitersOver<Storage, Clock, std::tuple<Models...>> {
    using Type = std::tuple<ratelimit::Limiter<Models, Storage, Clock>...>;
};

/// The limiter of `Model` over the memory storage, driven by a ManualClock.
template <class Model>
using MemoryLimiter = ratelimit::Limiter<Model, ratelimit::MemoryStorage, ratelimit::ManualClock>;

/// What a fresh key offers under `Model`: `burst` for the buckets, `count` for the windows.
template <class Model>
constexpr std::int64_t capacityOf(const ratelimit::Limit& limit) {
    return Model::kBucket ? limit.burst : limit.count;
}

/// The most `Model` may admit at cost 1 on one key from calls whose times (nanoseconds since
/// the clock's epoch) lie in [start, end], however the calls interleave.
template <class Model>
std::int64_t admissionBound(const ratelimit::Limit& limit, std::int64_t start, std::int64_t end) {
    const std::int64_t period = limit.period.count();
    if (Model::kBucket) {
        // Full at the start, then `count` per `period`, exactly.
        return limit.burst + (end - start) * limit.count / period;
    }
    if (std::is_same_v<Model, ratelimit::SlidingLogModel>) {
        // Every (t - W, t] holds at most count; floor(span / W) + 1 such windows cover the run.
        return limit.count * ((end - start) / period + 1);
    }
    // Fixed window and sliding counter: at most count in each aligned window touched.
    return limit.count * (end / period - start / period + 1);
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
