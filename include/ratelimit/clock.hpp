#pragma once

#include <atomic>
#include <concepts>
#include <cstdint>
#include <ratio>

#if defined(__linux__)
#    include <time.h>  // NOLINT(modernize-deprecated-headers): clock_gettime is POSIX, here
#endif

#include <ratelimit/detail/checked_math.hpp>
#include <ratelimit/detail/chrono.hpp>
#include <ratelimit/detail/ref_counted.hpp>

namespace ratelimit {
inline namespace v1 {

/// What a limiter needs from a clock.
///
/// `now()` on a const clock returns the clock's `time_point`; its duration is the tick of the
/// limiter's integer arithmetic and must be a whole number of nanoseconds. The value may step
/// backwards; limiters cope (docs/semantics.md, "Clock steps"). Copies of a clock are cheap
/// handles sharing one timeline. A clock that declares `static constexpr bool kStoreSide =
/// true` is read by the store itself (its `now()` is never called); one that declares
/// `kHostLocalEpoch = true` counts from an origin other hosts do not share.
template <class C>
concept ClockPolicy = std::copy_constructible<C> && requires(const C& clock) {
    typename C::duration;
    typename C::time_point;
    { clock.now() } -> std::same_as<typename C::time_point>;
};

namespace detail {

template <class C>
inline constexpr bool kStoreSideClock = requires {
    requires C::kStoreSide;
};

template <class C>
inline constexpr bool kHostLocalClock = requires {
    requires C::kHostLocalEpoch;
};

/// Whether the clock never goes back, across threads (std::chrono's `is_steady`).
template <class C>
inline constexpr bool kSteadyClock = requires {
    requires C::is_steady;
};

/// Nanoseconds per tick of a clock, or 0 when its tick is not a whole number of nanoseconds.
template <class C>
inline constexpr std::int64_t kNanosPerTick =
    std::ratio_divide<typename C::duration::period, std::nano>::den == 1
        ? std::ratio_divide<typename C::duration::period, std::nano>::num
        : 0;

/// The std vocabulary of a clock (`duration`, `rep`, `period`, `time_point`) counting
/// `Duration` ticks of its own epoch: what `ClockPolicy` and std::chrono expect of `Clock`.
template <class Clock, class Duration>
struct ClockTypes {
    using duration = Duration;
    using rep = typename Duration::rep;
    using period = typename Duration::period;
    using time_point = std::chrono::time_point<Clock, Duration>;
};

}  // namespace detail

/// A monotonic clock for one process, aligned to UTC so fixed windows start on the minute.
///
/// Reads the steady clock (`std::chrono::steady_clock`'s `CLOCK_MONOTONIC` on Linux) plus an
/// offset to the Unix epoch captured once at construction: windows align to UTC, and later NTP
/// steps of the wall clock change nothing.
/// Its epoch is local to the host, so it cannot be used with a shared store.
/// Thread safety: thread-safe; copies share the offset.
class SteadyClock : public detail::ClockTypes<SteadyClock, std::chrono::nanoseconds> {
public:
    static constexpr bool is_steady = true;
    static constexpr bool kHostLocalEpoch = true;

    SteadyClock()
        : offset_(std::chrono::duration_cast<duration>(
                      std::chrono::system_clock::now().time_since_epoch()) -
                  steadyNow()) {}

    [[nodiscard]] time_point now() const noexcept { return time_point{steadyNow() + offset_}; }

private:
    /// `std::chrono::steady_clock::now()`. On Linux that reads `CLOCK_MONOTONIC` through one more
    /// call than this does: a call saved on every check (bench/README.md, "the clock and the
    /// fetches").
    static duration steadyNow() noexcept {
#if defined(__linux__)
        std::timespec ts{};
        ::clock_gettime(CLOCK_MONOTONIC, &ts);
        return std::chrono::seconds{ts.tv_sec} + std::chrono::nanoseconds{ts.tv_nsec};
#else
        return std::chrono::duration_cast<duration>(
            std::chrono::steady_clock::now().time_since_epoch());
#endif
    }

    duration offset_;
};

/// Wall-clock time since the Unix epoch, for limits shared by several hosts whose clocks are
/// synchronised. It may step backwards with NTP; limiters cope.
/// Thread safety: thread-safe; stateless.
class SystemClock : public detail::ClockTypes<SystemClock, std::chrono::nanoseconds> {
public:
    static constexpr bool is_steady = false;

    [[nodiscard]] time_point now() const noexcept {
        return time_point{std::chrono::duration_cast<duration>(
            std::chrono::system_clock::now().time_since_epoch())};
    }
};

namespace detail {

/// This host's system clock in whole ticks of `nanosPerTick` nanoseconds (> 0), floored: what a
/// limiter whose clock the store reads (`kStoreSide`) uses in place of the store's time, when it
/// answers without the store or starts a limit change.
[[nodiscard]] inline std::int64_t hostTicks(std::int64_t nanosPerTick) noexcept {
    return floorDiv(SystemClock{}.now().time_since_epoch().count(), nanosPerTick);
}

}  // namespace detail

/// A clock driven by hand, for tests and simulations: starts at its own zero and moves only
/// when told, forwards or backwards.
/// Thread safety: thread-safe; copies share one time.
class ManualClock : public detail::ClockTypes<ManualClock, std::chrono::nanoseconds> {
public:
    static constexpr bool is_steady = false;

    ManualClock() : ticks_(detail::Ref<Ticks>::make()) {}

    [[nodiscard]] time_point now() const noexcept {
        return time_point{duration{ticks_->value.load(std::memory_order_acquire)}};
    }

    /// Moves the time by `d` (negative steps backwards).
    void advance(duration d) noexcept {
        ticks_->value.fetch_add(d.count(), std::memory_order_acq_rel);
    }

    /// Sets the time to `t`.
    void set(time_point t) noexcept {
        ticks_->value.store(t.time_since_epoch().count(), std::memory_order_release);
    }

    /// Sets the time to `sinceZero` after the clock's zero.
    void set(duration sinceZero) noexcept { set(time_point{sinceZero}); }

private:
    struct Ticks final : detail::RefCounted {
        std::atomic<rep> value{0};
    };

    detail::Ref<Ticks> ticks_;
};

/// Redis server time: the store's script reads `TIME`, so hosts sharing a limit need no clock
/// synchronisation. Only `RedisStorage` accepts it; a limiter never calls its `now()`, which
/// returns this host's wall time (an approximation of the server's) for callers who want one.
/// Thread safety: thread-safe; stateless.
class RedisServerClock : public detail::ClockTypes<RedisServerClock, std::chrono::microseconds> {
public:
    static constexpr bool is_steady = false;
    static constexpr bool kStoreSide = true;

    [[nodiscard]] time_point now() const noexcept {
        return time_point{std::chrono::duration_cast<duration>(
            std::chrono::system_clock::now().time_since_epoch())};
    }
};

static_assert(ClockPolicy<SteadyClock>);
static_assert(ClockPolicy<SystemClock>);
static_assert(ClockPolicy<ManualClock>);
static_assert(ClockPolicy<RedisServerClock>);

}  // namespace v1
}  // namespace ratelimit
