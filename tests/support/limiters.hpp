#pragma once

// What most tests do with limiters: name the five models, build one over the memory storage and
// a ManualClock, know what a fresh key offers, and send requests the usual way (a batch of cost-1
// requests at the limiter's own clock time, cost-1 requests until the first refusal, or calls
// from 8 threads started together; any type with a limiter's `tryAcquire(key)` will do), and what
// a key has left after a change of limit.

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <latch>
#include <string_view>
#include <thread>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

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

/// Runs `calls` calls of `admits()` (true when the call was admitted) on each of `threads`
/// threads, all started together; returns how many were admitted.
template <class Admits>
std::int64_t admittedFromThreads(int threads, int calls, Admits&& admits) {
    std::atomic<std::int64_t> admitted{0};
    std::latch start(threads);
    std::vector<std::thread> running;
    running.reserve(static_cast<std::size_t>(threads));
    for (int t = 0; t < threads; ++t) {
        running.emplace_back([&] {
            start.arrive_and_wait();
            for (int i = 0; i < calls; ++i) {
                admitted += admits() ? 1 : 0;
            }
        });
    }
    for (std::thread& t : running) {
        t.join();
    }
    return admitted.load();
}

/// What a key has left right after a change from a limit of capacity `from`, where it had
/// `left`, to one of capacity `to` (docs/semantics.md, "Changing a limit"): the smaller of what
/// the old limit leaves it and what the new one leaves after its consumption; all of the new
/// limit for a key that consumed nothing.
inline std::int64_t leftAfterChange(std::int64_t from, std::int64_t left, std::int64_t to) {
    const std::int64_t consumed = from - left;
    if (consumed == 0) {
        return to;
    }
    return std::max<std::int64_t>(0, std::min(left, to - consumed));
}

}  // namespace ratelimit_test
