#pragma once

#include <atomic>
#include <cstdint>

#include <ratelimit/detail/inline.hpp>
#include <ratelimit/detail/thread_annotations.hpp>

namespace ratelimit {
inline namespace v1 {
namespace detail {

/// How a waiter for a slot's lock spins before it sleeps: it looks at the lock after 1, 2, 4 …
/// 32 pauses (12 looks, 255 pauses in all, about 4 µs). A waiter that looked on every pause took
/// the lock's line from the holder, whose step and unlock then waited for it to come back: two
/// threads on one key took 0.41–0.94× the time per check once it backed off. True as soon as
/// `acquire()` does; false when the spin ends first.
template <class Acquire>
bool spinUntil(Acquire acquire) noexcept {
    constexpr int kLooks = 12;
    constexpr int kMaxPauses = 32;
    for (int look = 0, pauses = 1; look < kLooks;
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
/// Tricky"). Guards a table's groups and spill entries and a storage's registry; a table's
/// slots have `SlotMeta`.
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

/// A table slot's lock and the length of its key, in one byte: bits 2–7 the length (0 … 63),
/// bits 0–1 the lock's state as in `SlotLock` (0 free, 1 held, 2 held with possible sleepers).
/// A lookup locks only a slot whose key has its own key's length, so one compare-and-swap both
/// filters and locks, and the length takes no byte of the slot. Only a holder changes the
/// length; a waiter that sees it change gives up, the slot now being another key's.
class RATELIMIT_CAPABILITY("mutex") SlotMeta {
public:
    static constexpr unsigned kMaxLength = 63;

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
        if ((seen & kLockBits) != 0 ||
            !state_.compare_exchange_strong(seen, seen | kHeld, std::memory_order_acquire)) {
            lockContended(kAnyLength);
        }
    }

    bool try_lock() noexcept RATELIMIT_TRY_ACQUIRE(true) {
        std::uint8_t seen = state_.load(std::memory_order_relaxed);
        return (seen & kLockBits) == 0 &&
               state_.compare_exchange_strong(seen, seen | kHeld, std::memory_order_acquire);
    }

    RATELIMIT_INLINE void unlock() noexcept RATELIMIT_RELEASE() {
        const auto free =
            static_cast<std::uint8_t>(state_.load(std::memory_order_relaxed) & ~kLockBits);
        if ((state_.exchange(free, std::memory_order_release) & kLockBits) == kSleepers) {
            wake();
        }
    }

    /// The key's length. Stable while the lock is held.
    [[nodiscard]] std::uint8_t length() const noexcept {
        return static_cast<std::uint8_t>(state_.load(std::memory_order_relaxed) >> kLengthShift);
    }

    /// Gives the slot a key of `length` bytes (at most kMaxLength). The caller holds the lock;
    /// a waiter may mark it meanwhile, so the lock's bits are kept.
    void setLength(std::uint8_t length) noexcept RATELIMIT_REQUIRES(this) {
        std::uint8_t seen = state_.load(std::memory_order_relaxed);
        while (!state_.compare_exchange_weak(
            seen, static_cast<std::uint8_t>((length << kLengthShift) | (seen & kLockBits)),
            std::memory_order_relaxed)) {
        }
    }

private:
    static constexpr unsigned kLengthShift = 2;
    static constexpr std::uint8_t kLockBits = 3;
    static constexpr std::uint8_t kHeld = 1;
    static constexpr std::uint8_t kSleepers = 2;
    static constexpr int kAnyLength = -1;

    /// Spins (`spinUntil`), then sleeps, until it holds the lock (true) or, waiting for a key
    /// of `length` bytes, sees the slot given a key of another length (false).
    RATELIMIT_COLD bool lockContended(int length) noexcept {
        const auto other = [&](std::uint8_t seen) {
            return length != kAnyLength && (seen >> kLengthShift) != length;
        };
        bool mine = false;
        if (spinUntil([&] {
                std::uint8_t seen = state_.load(std::memory_order_relaxed);
                if (other(seen)) {
                    return true;
                }
                mine = (seen & kLockBits) == 0 &&
                       state_.compare_exchange_weak(seen, seen | kHeld, std::memory_order_acquire);
                return mine;
            })) {
            return mine;
        }
        // Sleeps in state 2, and takes the lock in state 2: whoever it overtook may sleep too.
        for (;;) {
            std::uint8_t seen = state_.load(std::memory_order_relaxed);
            if (other(seen)) {
                return false;
            }
            const auto sleeping = static_cast<std::uint8_t>((seen & ~kLockBits) | kSleepers);
            if ((seen & kLockBits) == 0) {
                if (state_.compare_exchange_weak(seen, sleeping, std::memory_order_acquire)) {
                    return true;
                }
                continue;
            }
            if ((seen & kLockBits) == kSleepers ||
                state_.compare_exchange_weak(seen, sleeping, std::memory_order_relaxed)) {
                state_.wait(sleeping, std::memory_order_relaxed);
            }
        }
    }

    /// Every sleeper wakes: some wait for a key that is no longer the slot's, and give up.
    RATELIMIT_COLD void wake() noexcept { state_.notify_all(); }

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
