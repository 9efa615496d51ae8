#pragma once

#include <algorithm>
#include <atomic>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include <ratelimit/detail/chrono.hpp>
#include <ratelimit/detail/function.hpp>
#include <ratelimit/store_error.hpp>

namespace ratelimit {
inline namespace v1 {
namespace detail {

/// Stops a shared store's I/O after a failure, and tells when the store's health changes.
///
/// The breaker: after a failure that says the store is unusable (an outage; the caller tells
/// which failures are), calls are answered at once while it is open (the caller takes its
/// failure policy); one call probes the store after a backoff that doubles per failed probe up
/// to a maximum, and its success, or an answer of any kind from the store, closes the breaker.
///
/// The health: failing from the first failure of any kind (an outage or an error the store
/// answered with), healthy again at the first success once the breaker is closed and no call has
/// failed for one base backoff, so a store that refuses some calls and serves others is heard
/// once, not once per call. Calls the open breaker answers are not failures of the store.
///
/// It reads the time from `now` (`std::chrono::steady_clock` unless another clock is given,
/// as tests do to move past a backoff without waiting).
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
        if (!failing_.load(std::memory_order_acquire)) {
            return std::nullopt;  // the breaker opens only while failing
        }
        const TimePoint now = this->now();
        const std::lock_guard<std::mutex> lock(mutex_);
        if (call.probe) {
            close();
        }
        if (!failing_.load(std::memory_order_relaxed) || open_.load(std::memory_order_relaxed) ||
            now - lastFailure_ < base_) {
            return std::nullopt;
        }
        failing_.store(false, std::memory_order_release);
        return StoreEvent{StoreEvent::Health::kHealthy, StoreError::kNone,
                          "the store answers again"};
    }

    /// The event to report, if calls just started failing, after the call `call` failed with
    /// `error`. An `outage` opens the breaker (only the probe's own failure lengthens the
    /// backoff; calls already in flight when it opened do not); any other failure is an answer
    /// of the store, which closes it when it was the probe's.
    std::optional<StoreEvent> failed(const Admission& call, StoreError error,
                                     const std::string& message, bool outage) {
        const TimePoint now = this->now();
        const std::lock_guard<std::mutex> lock(mutex_);
        lastFailure_ = now;
        if (outage) {
            trip(call, now);
        } else if (call.probe) {
            close();
        }
        if (failing_.load(std::memory_order_relaxed)) {
            return std::nullopt;
        }
        failing_.store(true, std::memory_order_release);
        return StoreEvent{StoreEvent::Health::kFailing, error, message};
    }

    /// Whether calls are answered without I/O until a probe reaches the store.
    [[nodiscard]] bool isOpen() const noexcept { return open_.load(std::memory_order_acquire); }

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

    /// Opens the breaker, or lengthens its backoff after a failed probe. Lock held.
    void trip(const Admission& call, TimePoint now) {
        if (!open_.load(std::memory_order_relaxed)) {
            open_.store(true, std::memory_order_release);
            backoff_ = base_;
            nextProbe_ = now + backoff_;
        } else if (call.probe && probing_) {
            probing_ = false;
            backoff_ = std::min(backoff_ * 2, max_);
            nextProbe_ = now + backoff_;
        }
    }

    /// Closes the breaker after its probe reached the store. Lock held.
    void close() {
        if (open_.load(std::memory_order_relaxed)) {
            open_.store(false, std::memory_order_release);
            probing_ = false;
            backoff_ = base_;
        }
    }

    const std::chrono::nanoseconds base_;
    const std::chrono::nanoseconds max_;
    const Clock clock_;
    std::atomic<bool> open_{false};     // written under mutex_; implies failing_
    std::atomic<bool> failing_{false};  // written under mutex_
    std::mutex mutex_;
    bool probing_ = false;                     // guarded by mutex_
    TimePoint nextProbe_{};                    // guarded by mutex_
    TimePoint lastFailure_{};                  // guarded by mutex_
    std::chrono::nanoseconds backoff_{base_};  // guarded by mutex_
};

}  // namespace detail
}  // namespace v1
}  // namespace ratelimit
