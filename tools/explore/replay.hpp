#pragma once

// Replays a traffic pattern against the library's own limiters (MemoryStorage, ManualClock:
// the production code path, time set by hand) and measures what each algorithm did with it.
//
// Two replays per algorithm:
//   - "as sent": every request is tried once at its time and a refusal drops it. The per-batch
//     admissions, the totals and the over-admission come from this one; they are the figures
//     the library's tests assert for the worked scenarios.
//   - "retrying clients": a refused request is tried again at `now + retryAfter` until it
//     passes, competing with the rest of the traffic. The waits come from this one.

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <queue>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include <ratelimit/clock.hpp>
#include <ratelimit/decision.hpp>
#include <ratelimit/limit.hpp>
#include <ratelimit/limiter.hpp>
#include <ratelimit/storage/memory.hpp>

#include "traffic.hpp"

namespace explore {

enum class Algorithm { kFixedWindow, kSlidingLog, kSlidingCounter, kTokenBucket, kLeakyBucket };

inline constexpr std::array<Algorithm, 5> kAllAlgorithms{
    Algorithm::kFixedWindow, Algorithm::kSlidingLog, Algorithm::kSlidingCounter,
    Algorithm::kTokenBucket, Algorithm::kLeakyBucket};

/// The model's own snake_case name (`fixed_window`, …).
inline std::string_view nameOf(Algorithm a) {
    switch (a) {
        case Algorithm::kFixedWindow:
            return ratelimit::FixedWindowModel::kName;
        case Algorithm::kSlidingLog:
            return ratelimit::SlidingLogModel::kName;
        case Algorithm::kSlidingCounter:
            return ratelimit::SlidingCounterModel::kName;
        case Algorithm::kTokenBucket:
            return ratelimit::TokenBucketModel::kName;
        case Algorithm::kLeakyBucket:
            return ratelimit::LeakyBucketModel::kName;
    }
    return "?";
}

inline std::optional<Algorithm> algorithmNamed(std::string_view name) {
    for (const Algorithm a : kAllAlgorithms) {
        if (nameOf(a) == name) {
            return a;
        }
    }
    return std::nullopt;
}

/// The most an algorithm may admit beyond `count` in a half-open interval of length `period`
/// on one key, by its design (docs/semantics.md):
///   - fixed window: `count` before a window edge and `count` after it: + count;
///   - sliding log: every (t − W, t] holds at most `count`: + 0;
///   - sliding counter: next to a non-empty previous window the current one admits at most
///     `count − 1` (the previous window always weighs something before the edge): + count − 1;
///   - token and leaky bucket: a full bucket, then less than `count` of refill in less than a
///     period: + burst − 1.
inline std::int64_t overAdmissionBound(Algorithm a, const ratelimit::Limit& rule) {
    switch (a) {
        case Algorithm::kFixedWindow:
            return rule.count;
        case Algorithm::kSlidingLog:
            return 0;
        case Algorithm::kSlidingCounter:
            return rule.count - 1;
        case Algorithm::kTokenBucket:
        case Algorithm::kLeakyBucket:
            return rule.burst - 1;
    }
    return 0;
}

/// Why an algorithm may overshoot, in a few words for the reports.
inline std::string_view overAdmissionReason(Algorithm a) {
    switch (a) {
        case Algorithm::kFixedWindow:
            return "count before a window edge, count after it";
        case Algorithm::kSlidingLog:
            return "exact over any window";
        case Algorithm::kSlidingCounter:
            return "an estimate: a late burst after an early one";
        case Algorithm::kTokenBucket:
        case Algorithm::kLeakyBucket:
            return "a full bucket, then the refill";
    }
    return "";
}

/// Requests sent at one time (all keys together).
struct Batch {
    Nanos at{0};
    std::int64_t sent = 0;      ///< requests
    std::int64_t admitted = 0;  ///< requests admitted when each is tried once
};

/// What one algorithm did with the traffic.
struct AlgorithmRun {
    Algorithm algorithm = Algorithm::kFixedWindow;
    /// Per request of `Replay::traffic`, tried once: admitted or not.
    std::vector<bool> admitted;
    std::vector<Batch> batches;
    std::int64_t sentRequests = 0;
    std::int64_t admittedRequests = 0;
    std::int64_t sentUnits = 0;
    std::int64_t admittedUnits = 0;

    /// The most units admitted on one key in any [t, t + period), and where: the key and t.
    std::int64_t peak = 0;
    Nanos peakFrom{0};
    std::uint32_t peakKey = 0;
    /// `peak − count`: positive when the algorithm admitted more than the rule's count.
    std::int64_t overAdmission = 0;
    /// The most the algorithm admits over `count` by its design (`overAdmissionBound`).
    std::int64_t bound = 0;

    /// Retrying clients: the longest time from a request's first try to its admission.
    Nanos longestWait{0};
    /// Requests admitted after a wait, and requests that can never pass (cost above the limit).
    std::int64_t waited = 0;
    std::int64_t never = 0;
    /// Requests still waiting when the retry model stopped (see `replayRetrying`); when there
    /// are any, `waitsComplete` is false and `longestWait` is a lower bound.
    std::int64_t stillWaiting = 0;
    bool waitsComplete = true;
};

struct Replay {
    ratelimit::Limit rule;
    Traffic traffic;
    std::vector<AlgorithmRun> runs;
};

/// Where the retry model stops: periods after the last request, and tries per request.
inline constexpr std::int64_t kRetryHorizon = 100;
inline constexpr std::size_t kRetryAttempts = 10;

namespace detail {

template <class Model>
using ManualLimiter = ratelimit::Limiter<Model, ratelimit::MemoryStorage, ratelimit::ManualClock>;

/// A limiter over its own fresh storage, sized so that no key ever spills.
template <class Model>
ManualLimiter<Model> makeLimiter(const ratelimit::Limit& rule, const Traffic& traffic,
                                 const ratelimit::ManualClock& clock) {
    const std::size_t keys = std::max<std::size_t>(64, 2 * traffic.keys.size());
    return ManualLimiter<Model>{
        rule, ratelimit::MemoryStorage{{.maxKeys = keys, .seed = 1}}, clock, {.name = "explore"}};
}

/// Every request tried once at its time.
template <class Model>
void replayOnce(const ratelimit::Limit& rule, const Traffic& traffic, AlgorithmRun& run) {
    ratelimit::ManualClock clock;
    auto limiter = makeLimiter<Model>(rule, traffic, clock);
    run.admitted.assign(traffic.requests.size(), false);
    for (std::size_t i = 0; i < traffic.requests.size(); ++i) {
        const Request& r = traffic.requests[i];
        clock.set(r.at);
        run.admitted[i] = limiter.tryAcquire(traffic.keys[r.key], r.cost).allowed;
    }
}

/// Clients that retry at `now + retryAfter` until admitted. Tries at one time go in the order
/// the requests were first sent (a retry before a newcomer). Traffic that outruns the rule
/// builds a backlog that may take very long to drain, so the model stops at `kRetryHorizon`
/// periods after the last request or after `kRetryAttempts` tries per request (above a floor of
/// 500'000 tries); whoever still waits then is counted apart, with the wait it has had so far.
template <class Model>
void replayRetrying(const ratelimit::Limit& rule, const Traffic& traffic, AlgorithmRun& run) {
    ratelimit::ManualClock clock;
    auto limiter = makeLimiter<Model>(rule, traffic, clock);
    using Attempt = std::tuple<Nanos, std::size_t>;  // (time, request index)
    std::priority_queue<Attempt, std::vector<Attempt>, std::greater<>> due;
    const std::size_t n = traffic.requests.size();
    for (std::size_t i = 0; i < n; ++i) {
        due.emplace(traffic.requests[i].at, i);
    }
    const Nanos last = traffic.requests.back().at;
    const Nanos horizon = rule.period.count() > (Nanos::max() - last).count() / kRetryHorizon
                              ? Nanos::max()
                              : last + kRetryHorizon * rule.period;
    const std::size_t maxAttempts = 500'000 + kRetryAttempts * n;
    for (std::size_t attempts = 0; !due.empty(); ++attempts) {
        const auto [at, i] = due.top();
        const Request& r = traffic.requests[i];
        if (at > horizon || attempts >= maxAttempts) {
            run.waitsComplete = false;
            ++run.stillWaiting;
            run.longestWait = std::max(run.longestWait, at - r.at);  // refused until then
            due.pop();
            continue;
        }
        due.pop();
        clock.set(at);
        const ratelimit::Decision d = limiter.tryAcquire(traffic.keys[r.key], r.cost);
        if (d.allowed) {
            if (at > r.at) {
                ++run.waited;
                run.longestWait = std::max(run.longestWait, at - r.at);
            }
        } else if (d.never()) {
            ++run.never;
        } else {
            due.emplace(d.retryAt(clock.now()).time_since_epoch(), i);
        }
    }
}

/// Batches, totals and the over-admission of a run tried once.
inline void measure(const ratelimit::Limit& rule, const Traffic& traffic, AlgorithmRun& run) {
    const auto& requests = traffic.requests;
    for (std::size_t i = 0; i < requests.size(); ++i) {
        const Request& r = requests[i];
        if (run.batches.empty() || run.batches.back().at != r.at) {
            run.batches.push_back({r.at, 0, 0});
        }
        Batch& b = run.batches.back();
        ++b.sent;
        ++run.sentRequests;
        run.sentUnits += r.cost;
        if (run.admitted[i]) {
            ++b.admitted;
            ++run.admittedRequests;
            run.admittedUnits += r.cost;
        }
    }
    // The most admitted in a half-open [t, t + period) on one key: a window starting at an
    // admission is as full as any, so slide over the admissions of each key in time order.
    std::vector<std::vector<std::size_t>> byKey(traffic.keys.size());
    for (std::size_t i = 0; i < requests.size(); ++i) {
        if (run.admitted[i]) {
            byKey[requests[i].key].push_back(i);
        }
    }
    for (std::uint32_t k = 0; k < byKey.size(); ++k) {
        const auto& list = byKey[k];
        std::int64_t inWindow = 0;
        std::size_t first = 0;
        for (std::size_t j = 0; j < list.size(); ++j) {
            inWindow += requests[list[j]].cost;
            while (requests[list[first]].at + rule.period <= requests[list[j]].at) {
                inWindow -= requests[list[first]].cost;
                ++first;
            }
            if (inWindow > run.peak) {
                run.peak = inWindow;
                run.peakFrom = requests[list[first]].at;
                run.peakKey = k;
            }
        }
    }
    run.overAdmission = run.peak - rule.count;
    run.bound = overAdmissionBound(run.algorithm, rule);
}

template <class Model>
AlgorithmRun runModel(Algorithm a, const ratelimit::Limit& rule, const Traffic& traffic) {
    AlgorithmRun run;
    run.algorithm = a;
    replayOnce<Model>(rule, traffic, run);
    replayRetrying<Model>(rule, traffic, run);
    measure(rule, traffic, run);
    return run;
}

}  // namespace detail

/// Replays `traffic` against each of `algorithms` under `rule`.
/// Throws: `std::invalid_argument` when the memory storage cannot hold the rule exactly.
inline Replay replay(const ratelimit::Limit& rule, Traffic traffic,
                     const std::vector<Algorithm>& algorithms) {
    Replay out{rule, std::move(traffic), {}};
    for (const Algorithm a : algorithms) {
        switch (a) {
            case Algorithm::kFixedWindow:
                out.runs.push_back(
                    detail::runModel<ratelimit::FixedWindowModel>(a, rule, out.traffic));
                break;
            case Algorithm::kSlidingLog:
                out.runs.push_back(
                    detail::runModel<ratelimit::SlidingLogModel>(a, rule, out.traffic));
                break;
            case Algorithm::kSlidingCounter:
                out.runs.push_back(
                    detail::runModel<ratelimit::SlidingCounterModel>(a, rule, out.traffic));
                break;
            case Algorithm::kTokenBucket:
                out.runs.push_back(
                    detail::runModel<ratelimit::TokenBucketModel>(a, rule, out.traffic));
                break;
            case Algorithm::kLeakyBucket:
                out.runs.push_back(
                    detail::runModel<ratelimit::LeakyBucketModel>(a, rule, out.traffic));
                break;
        }
    }
    return out;
}

}  // namespace explore
