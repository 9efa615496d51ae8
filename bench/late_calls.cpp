// Admissions when 8 threads pass the times they read to one key: for each algorithm, with a
// late-call tolerance of 0, of 50 ms and the default (docs/semantics.md, "Late calls"), against
// the exact bound over the span of those times. Not part of the build; run it by hand:
//
//   g++ -std=c++20 -O2 -pthread -Iinclude -Itests bench/late_calls.cpp -o /tmp/late_calls
//   /tmp/late_calls
//
// Each row runs 1.5 s of wall time, limit 2,000 per second.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <thread>
#include <vector>

#include <ratelimit/ratelimit.hpp>

#include "support/limiters.hpp"  // admissionBound, the bound the tests hold limiters to

namespace {

using namespace std::chrono_literals;

template <class Model>
void row(std::optional<std::chrono::nanoseconds> tolerance) {
    const ratelimit::Limit limit = ratelimit::Limit::perSecond(2000);
    const ratelimit::SteadyClock clock;
    ratelimit::LimiterOptions options;
    if (tolerance) {
        options.lateCallTolerance = *tolerance;
    }
    ratelimit::Limiter<Model, ratelimit::MemoryStorage, ratelimit::SteadyClock> limiter{
        limit, ratelimit::MemoryStorage{{.maxKeys = 64}}, clock, options};
    std::atomic<std::int64_t> admitted{0};
    const auto start = clock.now();
    const auto stop = start + 1500ms;
    std::vector<std::thread> threads;
    for (int i = 0; i < 8; ++i) {
        threads.emplace_back([&] {
            std::int64_t mine = 0;
            for (auto now = clock.now(); now < stop; now = clock.now()) {
                mine += limiter.tryAcquire("k", 1, now).allowed ? 1 : 0;
            }
            admitted += mine;
        });
    }
    for (std::thread& t : threads) {
        t.join();
    }
    const std::int64_t bound = ratelimit_test::admissionBound<Model>(
        limit, start.time_since_epoch().count(), clock.now().time_since_epoch().count());
    std::printf("%-16s %-8s %8lld %8lld\n", Model::kName.data(),
                tolerance ? (tolerance->count() == 0 ? "0" : "50ms") : "default",
                static_cast<long long>(admitted.load()), static_cast<long long>(bound));
}

template <class Model>
void rows() {
    row<Model>(std::chrono::nanoseconds{0});
    row<Model>(std::chrono::nanoseconds{50ms});
    row<Model>(std::nullopt);
}

}  // namespace

int main() {
    std::printf("%-16s %-8s %8s %8s\n", "algorithm", "late", "admitted", "bound");
    rows<ratelimit::FixedWindowModel>();
    rows<ratelimit::SlidingLogModel>();
    rows<ratelimit::SlidingCounterModel>();
    rows<ratelimit::TokenBucketModel>();
    rows<ratelimit::LeakyBucketModel>();
}
