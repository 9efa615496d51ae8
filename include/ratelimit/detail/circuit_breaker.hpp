#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include <ratelimit/store_error.hpp>

namespace ratelimit {
inline namespace v1 {
namespace detail {

/// Stops a shared store's I/O after a failure: while open, calls are answered at once (the
/// caller takes its failure policy); one call probes the store after a backoff that doubles
/// per failed probe up to a maximum, and its success closes the breaker.
///
/// It reads the time from `now` (`std::chrono::steady_clock` unless another clock is given,
/// as tests do to move past a backoff without waiting). It trips on transport failures only:
/// a server that answers, even with an error, is up; the caller decides which is which.
/// Thread safety: thread-safe.
class CircuitBreaker {
public:
    using TimePoint = std::chrono::steady_clock::time_point;
    using Clock = std::function<TimePoint()>;

    struct Admission {
        bool proceed = true;
        bool probe = false;                ///< this call probes an open breaker
        std::chrono::nanoseconds wait{0};  ///< when refused: time to the next probe
    };

    CircuitBreaker(std::chrono::nanoseconds base, std::chrono::nanoseconds max, Clock clock = {})
        : base_(base), max_(max), clock_(std::move(clock)) {}

    /// Whether a call may do I/O now.
    Admission admit() {
        if (!open_.load(std::memory_order_acquire)) {
            return {};
        }
        const TimePoint now = this->now();
        const std::lock_guard<std::mutex> lock(mutex_);
        if (!open_.load(std::memory_order_relaxed)) {
            return {};
        }
        if (!probing_ && now >= nextProbe_) {
            probing_ = true;  // this caller probes; the others keep failing fast
            return {true, true, {}};
        }
        return {false, false, std::max(std::chrono::nanoseconds{1}, nextProbe_ - now)};
    }

    /// The event to report, if the store just became healthy, after a call `admit` let through
    /// as `call` succeeded. Only the probe closes an open breaker: a call sent before it opened
    /// may still succeed while the server is down.
    std::optional<StoreEvent> succeeded(const Admission& call) {
        if (!call.probe || !open_.load(std::memory_order_acquire)) {
            return std::nullopt;
        }
        const std::lock_guard<std::mutex> lock(mutex_);
        if (!open_.load(std::memory_order_relaxed)) {
            return std::nullopt;
        }
        open_.store(false, std::memory_order_release);
        probing_ = false;
        backoff_ = base_;
        return StoreEvent{StoreEvent::Health::kHealthy, StoreError::kNone,
                          "the store answers again"};
    }

    /// The event to report, if the store just started failing, after the call `call` failed
    /// with `error`. Only the probe's own failure lengthens the backoff; calls already in
    /// flight when the breaker opened do not.
    std::optional<StoreEvent> failed(const Admission& call, StoreError error,
                                     const std::string& message) {
        const TimePoint now = this->now();
        const std::lock_guard<std::mutex> lock(mutex_);
        if (!open_.load(std::memory_order_relaxed)) {
            open_.store(true, std::memory_order_release);
            backoff_ = base_;
            nextProbe_ = now + backoff_;
            return StoreEvent{StoreEvent::Health::kFailing, error, message};
        }
        if (call.probe && probing_) {
            probing_ = false;
            backoff_ = std::min(backoff_ * 2, max_);
            nextProbe_ = now + backoff_;
        }
        return std::nullopt;
    }

    /// Time until the next probe (the base backoff when closed).
    std::chrono::nanoseconds untilProbe() {
        const TimePoint now = this->now();
        const std::lock_guard<std::mutex> lock(mutex_);
        if (!open_.load(std::memory_order_relaxed)) {
            return base_;
        }
        return std::max(std::chrono::nanoseconds{1}, nextProbe_ - now);
    }

private:
    [[nodiscard]] TimePoint now() const {
        return clock_ ? clock_() : std::chrono::steady_clock::now();
    }

    const std::chrono::nanoseconds base_;
    const std::chrono::nanoseconds max_;
    const Clock clock_;
    std::atomic<bool> open_{false};
    std::mutex mutex_;
    bool probing_ = false;                     // guarded by mutex_
    TimePoint nextProbe_{};                    // guarded by mutex_
    std::chrono::nanoseconds backoff_{base_};  // guarded by mutex_
};

}  // namespace detail
}  // namespace v1
}  // namespace ratelimit
