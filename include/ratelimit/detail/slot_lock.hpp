#pragma once

#include <atomic>
#include <cstdint>
#include <sched.h>
#include <time.h>  // NOLINT(modernize-deprecated-headers): nanosleep is POSIX, here

#include <ratelimit/detail/inline.hpp>
#include <ratelimit/detail/thread_annotations.hpp>

namespace ratelimit {
inline namespace v1 {
namespace detail {

/// How a waiter for a lock spins before it gives its core away: it looks at the lock after 32, 64,
/// 128 and 128 pauses (352 in all: 3.4 µs where a pause takes 9.7 ns, several times that where
/// it takes about 140 cycles). Each look takes the lock's cache line from the holder, whose next
/// lock and unlock then wait for it to come back. Backing off from a look on every pause to
/// looks after 1, 2, 4 … 32 pauses, two threads on one key took 0.41–0.94× the time per check;
/// looking first after 32 pauses, so that a holder takes several steps between looks, two
/// threads on one window's key took about half the time again (a fixed window's 107 → 57 ns;
/// bench/README.md, "Two threads on one key"). The price: a lock released just after a look is
/// taken up to the next look late, 32 to 128 pauses. True as soon as `acquire()` does; false
/// when the spin ends first.
template <class Acquire>
bool spinUntil(Acquire acquire) noexcept {
    constexpr int kLooks = 4;
    constexpr int kFirstPauses = 32;
    constexpr int kMaxPauses = 128;
    for (int look = 0, pauses = kFirstPauses; look < kLooks;
         ++look, pauses = pauses < kMaxPauses ? 2 * pauses : kMaxPauses) {
        for (int i = 0; i < pauses; ++i) {
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#elif defined(__aarch64__)
            asm volatile("yield");
#endif
        }
        if (acquire()) {
            return true;
        }
    }
    return false;
}

/// A 4-byte lock: spins briefly (`spinUntil`; the sections it guards take tens of
/// nanoseconds), then sleeps in the kernel through `std::atomic::wait`, so a preempted holder
/// costs no CPU. States: 0 free, 1 held, 2 held with possible sleepers (Drepper, "Futexes Are
/// Tricky"). Guards a table's spill entries and splits and a storage's registry; a table's
/// slots and its groups' insert locks are `SlotMeta`.
class RATELIMIT_CAPABILITY("mutex") SlotLock {
public:
    void lock() noexcept RATELIMIT_ACQUIRE() {
        std::uint32_t expected = 0;
        if (!state_.compare_exchange_strong(expected, 1, std::memory_order_acquire)) {
            lockContended();
        }
    }

    bool try_lock() noexcept RATELIMIT_TRY_ACQUIRE(true) {
        std::uint32_t expected = 0;
        return state_.compare_exchange_strong(expected, 1, std::memory_order_acquire);
    }

    void unlock() noexcept RATELIMIT_RELEASE() {
        if (state_.exchange(0, std::memory_order_release) == 2) {
            wake();
        }
    }

private:
    // The spin and the wait, out of line: the lock sites on the table's paths inline only the
    // uncontended compare-and-swap.
    RATELIMIT_COLD void lockContended() noexcept {
        if (spinUntil([this] {
                std::uint32_t expected = 0;
                return state_.load(std::memory_order_relaxed) == 0 &&
                       state_.compare_exchange_weak(expected, 1, std::memory_order_acquire);
            })) {
            return;
        }
        while (state_.exchange(2, std::memory_order_acquire) != 0) {
            state_.wait(2, std::memory_order_relaxed);
        }
    }

    RATELIMIT_COLD void wake() noexcept { state_.notify_one(); }

    std::atomic<std::uint32_t> state_{0};
};

/// A table slot's lock and the length of its key, in one byte: bits 1–7 the length (0 … 127),
/// bit 0 the lock. (A group's insert lock is one whose length stays 0.) A lookup locks only a slot
/// whose key has its own key's length, so one compare-and-swap both filters and locks, and the
/// length takes no byte of the slot. Only a holder changes the length; a waiter that sees it change
/// gives up, the slot now being another key's.
///
/// Unlocking is a plain store: a lock that wakes sleepers must read their mark in the same
/// atomic step that frees it (an exchange), and on x86 that locked instruction was 9–12 % of a
/// window's step on one hot key (bench/README.md, "The slot's unlock"). So nothing sleeps on the
/// slot to be woken: a waiter spins (`spinUntil`), then gives its core away between looks, first
/// by yielding, then in naps of 1 µs doubling up to 128 µs (the kernel's timer slack, 50 µs by
/// default, lengthens the short ones). Most steps hold the lock for tens of nanoseconds, so a
/// waiter naps only while the holder is off its core or runs a long step (a sliding log of many
/// runs stepping back). The price: a napping waiter sees the release up to a nap late, and no
/// waiter is served in order.
class RATELIMIT_CAPABILITY("mutex") SlotMeta {
public:
    static constexpr unsigned kMaxLength = 127;

    /// Locks the slot when its key has `length` bytes; false, without locking, otherwise.
    RATELIMIT_INLINE bool lockIfLength(std::uint8_t length) noexcept RATELIMIT_TRY_ACQUIRE(true) {
        auto expected = static_cast<std::uint8_t>(length << kLengthShift);
        if (state_.compare_exchange_strong(expected, expected | kHeld, std::memory_order_acquire)) {
            return true;
        }
        return (expected >> kLengthShift) == length && lockContended(length);
    }

    /// Locks the slot, whatever its key.
    void lock() noexcept RATELIMIT_ACQUIRE() {
        std::uint8_t seen = state_.load(std::memory_order_relaxed);
        if ((seen & kHeld) != 0 ||
            !state_.compare_exchange_strong(seen, seen | kHeld, std::memory_order_acquire)) {
            lockContended(kAnyLength);
        }
    }

    bool try_lock() noexcept RATELIMIT_TRY_ACQUIRE(true) {
        std::uint8_t seen = state_.load(std::memory_order_relaxed);
        return (seen & kHeld) == 0 &&
               state_.compare_exchange_strong(seen, seen | kHeld, std::memory_order_acquire);
    }

    /// While the lock is held no other thread writes the byte: a waiter's compare-and-swap
    /// fails on the held bit.
    RATELIMIT_INLINE void unlock() noexcept RATELIMIT_RELEASE() {
        const std::uint8_t held = state_.load(std::memory_order_relaxed);
        state_.store(static_cast<std::uint8_t>(held & ~kHeld), std::memory_order_release);
    }

    /// The key's length. Stable while the lock is held.
    [[nodiscard]] std::uint8_t length() const noexcept {
        return static_cast<std::uint8_t>(state_.load(std::memory_order_relaxed) >> kLengthShift);
    }

    /// Gives the slot a key of `length` bytes (at most kMaxLength). The caller holds the lock.
    void setLength(std::uint8_t length) noexcept RATELIMIT_REQUIRES(this) {
        state_.store(static_cast<std::uint8_t>((length << kLengthShift) | kHeld),
                     std::memory_order_relaxed);
    }

private:
    static constexpr unsigned kLengthShift = 1;
    static constexpr std::uint8_t kHeld = 1;
    static constexpr int kAnyLength = -1;
    static constexpr int kYields = 16;
    static constexpr long kFirstNapNanos = 1'000;  // timespec's type
    static constexpr long kLongestNapNanos = 128'000;

    /// Waits until it holds the lock (true) or, waiting for a key of `length` bytes, sees the
    /// slot given a key of another length (false).
    RATELIMIT_COLD bool lockContended(int length) noexcept {
        bool mine = false;
        const auto settled = [&] {
            std::uint8_t seen = state_.load(std::memory_order_relaxed);
            if (length != kAnyLength && (seen >> kLengthShift) != length) {
                return true;  // another key's slot now
            }
            mine = (seen & kHeld) == 0 &&
                   state_.compare_exchange_weak(seen, seen | kHeld, std::memory_order_acquire);
            return mine;
        };
        if (spinUntil(settled)) {
            return mine;
        }
        for (int i = 0; i < kYields; ++i) {
            sched_yield();
            if (settled()) {
                return mine;
            }
        }
        // <thread>'s sleep_for would add <stop_token> and <semaphore> to every includer.
        timespec nap{0, kFirstNapNanos};
        for (;;) {
            nanosleep(&nap, nullptr);
            if (settled()) {
                return mine;
            }
            nap.tv_nsec = nap.tv_nsec < kLongestNapNanos / 2 ? 2 * nap.tv_nsec : kLongestNapNanos;
        }
    }

    std::atomic<std::uint8_t> state_{0};
};

/// Tells a guard that the lock is already held.
struct AdoptLock {
    explicit AdoptLock() = default;
};
inline constexpr AdoptLock kAdoptLock{};

/// Holds a `SlotLock` or a `SlotMeta` for a scope.
template <class Lock>
class RATELIMIT_SCOPED_CAPABILITY LockGuard {
public:
    explicit LockGuard(Lock& lock) noexcept RATELIMIT_ACQUIRE(lock) : lock_(lock) { lock_.lock(); }
    /// Takes over `lock`, which the caller holds.
    LockGuard(Lock& lock, AdoptLock /*held*/) noexcept RATELIMIT_REQUIRES(lock) : lock_(lock) {}
    RATELIMIT_INLINE ~LockGuard() RATELIMIT_RELEASE() { lock_.unlock(); }
    LockGuard(const LockGuard&) = delete;
    LockGuard& operator=(const LockGuard&) = delete;
    LockGuard(LockGuard&&) = delete;
    LockGuard& operator=(LockGuard&&) = delete;

private:
    Lock& lock_;
};

using SlotGuard = LockGuard<SlotLock>;
using SlotMetaGuard = LockGuard<SlotMeta>;

}  // namespace detail
}  // namespace v1
}  // namespace ratelimit
