// What AnyLimiter's one indirect call costs (issue 6): the same limiter called directly and
// through AnyLimiter, in one process, so the ratio of the two rows is the price of choosing the
// algorithm at run time.
//
//   BM_<Algorithm>_Direct/keys:K        Limiter<Model, MemoryStorage, Clock>::tryAcquire
//   BM_<Algorithm>_AnyLimiter/keys:K    the same limiter wrapped in an AnyLimiter
//
// Clock: SteadyClock (the memory default), and ManualClock rows (`_Manual`: an atomic load
// instead of a clock read) where the step itself dominates and a few nanoseconds show more
// clearly. keys:1 is one hot key, keys:1000 round-robin over a thousand. Every row checks after
// its loop that all calls were admitted. Ratios: bench/README.md ("AnyLimiter").

#include <cstdint>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include <ratelimit/any_limiter.hpp>
#include <ratelimit/clock.hpp>
#include <ratelimit/limiter.hpp>
#include <ratelimit/storage/memory.hpp>

namespace {

using ratelimit::Limit;

// Admits every call of a run: refills 10^6 per second, holds 10^12 (buckets); 10^12 per second
// (windows).
template <class Model>
Limit admitAll() {
    if constexpr (Model::kBucket) {
        return Limit::perSecond(1'000'000).withBurst(1'000'000'000'000);
    } else {
        return Limit::perSecond(1'000'000'000'000);
    }
}

std::vector<std::string> keys(std::int64_t n) {
    std::vector<std::string> out;
    for (std::int64_t i = 0; i < n; ++i) {
        out.push_back("user:" + std::to_string(1'000'000'000 + i));
    }
    return out;
}

template <class L>
void run(benchmark::State& state, L& limiter) {
    const std::vector<std::string> ks = keys(state.range(0));
    for (const std::string& k : ks) {
        benchmark::DoNotOptimize(limiter.tryAcquire(k));  // every key exists before timing
    }
    std::size_t i = 0;
    std::int64_t refused = 0;
    for (auto _ : state) {
        const ratelimit::Decision d = limiter.tryAcquire(ks[i]);
        refused += d.allowed ? 0 : 1;
        benchmark::DoNotOptimize(d);
        i = i + 1 == ks.size() ? 0 : i + 1;
    }
    if (refused != 0) {
        state.SkipWithError("a call was refused: the row did not measure the admit path");
    }
}

template <class Model, class Clock>
void BM_Direct(benchmark::State& state) {
    ratelimit::Limiter<Model, ratelimit::MemoryStorage, Clock> limiter{admitAll<Model>()};
    run(state, limiter);
}

template <class Model, class Clock>
void BM_AnyLimiter(benchmark::State& state) {
    ratelimit::AnyLimiter limiter{
        ratelimit::Limiter<Model, ratelimit::MemoryStorage, Clock>{admitAll<Model>()}};
    run(state, limiter);
}

#define RATELIMIT_ANY_BENCH(Label, Model)                            \
    BENCHMARK_TEMPLATE(BM_Direct, Model, ratelimit::SteadyClock)     \
        ->Name("BM_" #Label "_Direct")                               \
        ->ArgName("keys")                                            \
        ->Arg(1)                                                     \
        ->Arg(1000);                                                 \
    BENCHMARK_TEMPLATE(BM_AnyLimiter, Model, ratelimit::SteadyClock) \
        ->Name("BM_" #Label "_AnyLimiter")                           \
        ->ArgName("keys")                                            \
        ->Arg(1)                                                     \
        ->Arg(1000);                                                 \
    BENCHMARK_TEMPLATE(BM_Direct, Model, ratelimit::ManualClock)     \
        ->Name("BM_" #Label "_Direct_Manual")                        \
        ->ArgName("keys")                                            \
        ->Arg(1);                                                    \
    BENCHMARK_TEMPLATE(BM_AnyLimiter, Model, ratelimit::ManualClock) \
        ->Name("BM_" #Label "_AnyLimiter_Manual")                    \
        ->ArgName("keys")                                            \
        ->Arg(1)

RATELIMIT_ANY_BENCH(TokenBucket, ratelimit::TokenBucketModel);
RATELIMIT_ANY_BENCH(FixedWindow, ratelimit::FixedWindowModel);
RATELIMIT_ANY_BENCH(SlidingLog, ratelimit::SlidingLogModel);

}  // namespace

BENCHMARK_MAIN();
