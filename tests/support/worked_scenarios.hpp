#pragma once

// The three worked scenarios of docs/semantics.md as one table: the requests of each scenario,
// and for each algorithm the admissions per batch, what the last decision of a batch says, and
// the follow-up calls its tests make. The contract suite replays it on every storage
// (tests/algorithms/contract.hpp); the Redis parity test replays it on memory and Redis at once.

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include <ratelimit/algorithms/fixed_window.hpp>
#include <ratelimit/algorithms/leaky_bucket.hpp>
#include <ratelimit/algorithms/sliding_counter.hpp>
#include <ratelimit/algorithms/sliding_log.hpp>
#include <ratelimit/algorithms/token_bucket.hpp>
#include <ratelimit/limit.hpp>

namespace ratelimit_test {

/// The table's column of `Model`.
template <class Model>
constexpr std::size_t algorithmIndex() {
    if constexpr (std::is_same_v<Model, ratelimit::FixedWindowModel>) {
        return 0;
    } else if constexpr (std::is_same_v<Model, ratelimit::SlidingLogModel>) {
        return 1;
    } else if constexpr (std::is_same_v<Model, ratelimit::SlidingCounterModel>) {
        return 2;
    } else if constexpr (std::is_same_v<Model, ratelimit::TokenBucketModel>) {
        return 3;
    } else {
        static_assert(std::is_same_v<Model, ratelimit::LeakyBucketModel>, "not one of the five");
        return 4;
    }
}

/// What a decision must say; unset fields are not checked.
struct Expect {
    std::optional<bool> allowed{};
    std::optional<std::int64_t> remaining{};
    std::optional<std::chrono::nanoseconds> retryAfter{};
    std::optional<std::chrono::nanoseconds> resetAfter{};
};

/// `requests` calls of cost 1 on one key, the clock set to `at` (since the clock's zero).
struct Batch {
    std::chrono::nanoseconds at{0};
    int requests = 0;
};

/// Follow-up calls after batch `afterBatch`, at an explicit time.
struct Probe {
    std::size_t afterBatch = 0;
    std::chrono::nanoseconds at{0};
    std::int64_t cost = 1;
    int calls = 1;
    bool peek = false;
    std::optional<int> admitted{};  ///< of the `calls`
    Expect last{};                  ///< the last call's decision
};

/// One algorithm's answers to a scenario.
struct Outcome {
    std::vector<int> admitted{};  ///< per batch
    std::vector<Expect> last{};   ///< the last decision of batch i, for the first batches
    std::vector<Probe> probes{};
};

struct WorkedScenario {
    std::string name{};
    ratelimit::Limit limit = ratelimit::Limit::perSecond(1);
    std::vector<Batch> batches{};
    std::array<Outcome, 5> outcomes{};  ///< by algorithmIndex<Model>()
};

/// The scenarios, for a storage whose clock counts in `tick`s (the probes one tick before an
/// edge).
inline std::vector<WorkedScenario> workedScenarios(std::chrono::nanoseconds tick) {
    using namespace std::chrono_literals;
    using ratelimit::Limit;
    // The leaky bucket makes the token bucket's decisions while the clock moves forward.
    const Outcome bucketsOne{
        .admitted = {10, 5, 5},
        .last = {{.remaining = 0, .resetAfter = 60s},  // 10 tokens at 6 s each
                 {.remaining = 0, .resetAfter = 60s},  // 5 tokens back by 00:30
                 // 40 s: 6.67 tokens back; 1.67 left, rounded down; 8.33 tokens to full = 50 s
                 {.allowed = true, .remaining = 1, .resetAfter = 50s}},
        .probes = {
            {.afterBatch = 0, .at = 0s, .last = {.allowed = false, .retryAfter = 6s}},
            {.afterBatch = 2, .at = 2min, .cost = 0, .peek = true, .last = {.remaining = 10}},
            {.afterBatch = 2, .at = 2min - tick, .cost = 0, .peek = true, .last = {.remaining = 9}},
            // The 1.67 tokens: one more now, then the missing third of a token (2 s).
            {.afterBatch = 2, .at = 70s, .last = {.allowed = true}},
            {.afterBatch = 2, .at = 70s, .last = {.allowed = false, .retryAfter = 2s}}}};
    const Outcome bucketsTwo{.admitted = {5, 5, 5},  // 5 + 10 s of refill = 6.67 at 00:40
                             .last = {{}, {}, {.remaining = 1, .resetAfter = 50s}}};
    const Outcome bucketsThree{.admitted = {100, 1},  // 1 s of refill = 1.67 tokens
                               .last = {{},
                                        // from 0.67 to 1 token at 0.6 s per token
                                        {.allowed = false, .remaining = 0, .retryAfter = 200ms}}};
    return {
        {.name = "10/min: 10 at 00:00, 5 at 00:30, 5 at 01:10",
         .limit = Limit::perMinute(10),
         .batches = {{0s, 10}, {30s, 5}, {70s, 5}},
         .outcomes = {Outcome{.admitted = {10, 0, 5},
                              .last = {{.remaining = 0, .resetAfter = 60s},
                                       {.allowed = false, .retryAfter = 30s, .resetAfter = 30s},
                                       {.remaining = 5, .resetAfter = 50s}}},
                      // The 00:00 entries stop counting at exactly 01:00.
                      Outcome{.admitted = {10, 0, 5},
                              .last = {{.resetAfter = 60s},
                                       {.retryAfter = 30s, .resetAfter = 30s},
                                       {.remaining = 5, .resetAfter = 60s}}},
                      // At 00:30 curr + 1 > count: into the next window, where 10·(60 − e) ≤ 9·60
                      // needs e ≥ 6 s. At 01:10 the previous ten weigh 50/60: 8.33 of 10.
                      Outcome{
                          .admitted = {10, 0, 1},
                          .last = {{.resetAfter = 2min}, {.retryAfter = 36s}, {.remaining = 0}}},
                      bucketsOne, bucketsOne}},
        {.name = "10/min: 5 at 00:00, 5 at 00:30, 5 at 00:40",
         .limit = Limit::perMinute(10),
         .batches = {{0s, 5}, {30s, 5}, {40s, 5}},
         .outcomes =
             {Outcome{.admitted = {5, 5, 0}, .last = {{}, {}, {.remaining = 0, .retryAfter = 20s}}},
              // The five of 00:00 expire at 01:00, those of 00:30 at 01:30; at 01:00 five fit.
              Outcome{.admitted = {5, 5, 0},
                      .last = {{}, {}, {.retryAfter = 20s, .resetAfter = 50s}},
                      .probes = {{.afterBatch = 2, .at = 1min, .calls = 10, .admitted = 5}}},
              Outcome{.admitted = {5, 5, 0},
                      .last = {{}, {}, {.retryAfter = 26s, .resetAfter = 80s}}},
              bucketsTwo, bucketsTwo}},
        {.name = "100/min: 100 at 00:59, 100 at 01:00",
         .limit = Limit::perMinute(100),
         .batches = {{59s, 100}, {60s, 100}},
         .outcomes =
             {// The edge burst a fixed window allows.
              Outcome{.admitted = {100, 100},
                      .last = {{.resetAfter = 1s}, {.resetAfter = 60s}},
                      .probes = {{.afterBatch = 1, .at = 60s, .last = {.allowed = false}}}},
              Outcome{.admitted = {100, 0},
                      .last = {{}, {.retryAfter = 59s}},
                      .probes =
                          {{.afterBatch = 1, .at = 119s - tick, .last = {.allowed = false}},
                           {.afterBatch = 1, .at = 119s, .cost = 100, .last = {.allowed = true}}}},
              // At exactly 01:00 (e = 0) the previous window weighs fully.
              Outcome{.admitted = {100, 0}}, bucketsThree, bucketsThree}},
    };
}

}  // namespace ratelimit_test
