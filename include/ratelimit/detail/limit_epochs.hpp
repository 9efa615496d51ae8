#pragma once

// The limits one table has enforced, for `Limiter::setLimit`: the current one, read on every
// step, and the earlier ones, which a key's state may still have been made under.

#include <atomic>
#include <sched.h>
#include <utility>

#include <ratelimit/detail/checked_math.hpp>
#include <ratelimit/detail/inline.hpp>
#include <ratelimit/detail/ref_counted.hpp>
#include <ratelimit/detail/slot_lock.hpp>
#include <ratelimit/detail/thread_annotations.hpp>
#include <ratelimit/quota.hpp>

namespace ratelimit {
inline namespace v1 {
namespace detail {

/// The values (a quota, and what a storage derives from it) a table has enforced, newest
/// first, each with the first tick it applies to. A key's state whose last write is before the
/// current epoch's `since` was made under an earlier epoch and is carried over
/// (`convertedState`) by the first step that finds it.
///
/// A change publishes the new epoch before it reads the clock for its `since`, and a step
/// reads the clock before the epoch: so a step that read an earlier epoch read its time before
/// the change read the clock, and writes at that time before `since` (which is also after the
/// previous epoch's start), with no check before its write, unless it finds the key written
/// after its time: then a step of a later epoch may have written it, under that epoch's limit,
/// so the step checks the epoch again before it writes (`isCurrent`). A step of the new epoch,
/// which waits for `since`, steps at `since` or later. The epochs live as long as the table (a
/// change is rare: each keeps its few hundred bytes).
/// Thread safety: thread-safe; `replace` is serialised by its own lock.
template <class Value>
class LimitEpochs final : public RefCounted {
public:
    struct Epoch {
        Value value;
        /// The first tick of this epoch; `kPending` while a change is reading it.
        std::atomic<Tick> since{kInt64Min};
        const Epoch* previous = nullptr;  ///< owned by the `LimitEpochs`
    };

    explicit LimitEpochs(Value first) : newest_(new Epoch{std::move(first)}) {
        current_.store(newest_, std::memory_order_release);
    }
    LimitEpochs(const LimitEpochs&) = delete;
    LimitEpochs& operator=(const LimitEpochs&) = delete;
    LimitEpochs(LimitEpochs&&) = delete;
    LimitEpochs& operator=(LimitEpochs&&) = delete;
    ~LimitEpochs() {
        for (const Epoch* e = newest_; e != nullptr;) {
            const Epoch* const previous = e->previous;
            delete e;  // NOLINT(cppcoreguidelines-owning-memory): the chain is owned here
            e = previous;
        }
    }

    /// The epoch in force, once its `since` is known (a change reads one clock in between).
    [[nodiscard]] const Epoch& current() const noexcept {
        Tick since = 0;
        return current(since);
    }

    /// `current()`, with its first tick in `since` (one load of it on a step's path). Always
    /// inlined: GCC left it out of line, `since` on the stack, as unrelated code grew.
    [[nodiscard]] RATELIMIT_INLINE const Epoch& current(Tick& since) const noexcept {
        const Epoch* const e = current_.load(std::memory_order_seq_cst);
        since = e->since.load(std::memory_order_acquire);
        if (since == kPending) [[unlikely]] {
            since = awaitSince(*e);
        }
        return *e;
    }

    /// Whether `e` is still the epoch in force (a step that finds its key written after its
    /// time checks it before it writes).
    [[nodiscard]] bool isCurrent(const Epoch& e) const noexcept {
        return current_.load(std::memory_order_seq_cst) == &e;
    }

    /// The epoch a state last written at `lastWrite` was made under, from `e` back.
    [[nodiscard]] static const Epoch& at(const Epoch& e, Tick lastWrite) noexcept {
        const Epoch* found = &e;
        while (lastWrite < found->since.load(std::memory_order_relaxed) &&
               found->previous != nullptr) {
            found = found->previous;
        }
        return *found;
    }

    /// Makes `value` the epoch in force from the tick after `readNow()` returns.
    template <class ReadNow>
    void replace(Value value, ReadNow readNow) RATELIMIT_EXCLUDES(lock_) {
        // NOLINTNEXTLINE(cppcoreguidelines-owning-memory): the chain owns it, from below
        auto* const next = new Epoch{std::move(value)};
        next->since.store(kPending, std::memory_order_relaxed);
        const SlotGuard guard(lock_);
        const Tick previousSince = newest_->since.load(std::memory_order_relaxed);
        next->previous = newest_;
        newest_ = next;
        current_.store(next, std::memory_order_seq_cst);
        // After every time the previous epoch wrote, even when the clock has not moved since
        // its start (two changes within one tick).
        const Tick now = readNow();
        next->since.store(satAdd(now > previousSince ? now : previousSince, 1),
                          std::memory_order_release);
    }

private:
    static constexpr Tick kPending = kInt64Max;

    /// Waits out a change's clock read: a spin, then yields (the changing thread may have been
    /// preempted). No `std::atomic::wait`: a change is rare, and its templates would cost every
    /// file that steps a limiter its compile time.
    RATELIMIT_COLD static Tick awaitSince(const Epoch& e) noexcept {
        const auto known = [&] { return e.since.load(std::memory_order_acquire) != kPending; };
        if (!spinUntil(known)) {
            while (!known()) {
                ::sched_yield();
            }
        }
        return e.since.load(std::memory_order_acquire);
    }

    SlotLock lock_;
    Epoch* newest_;  // owns the chain; written under lock_ only
    std::atomic<const Epoch*> current_{nullptr};
};

}  // namespace detail
}  // namespace v1
}  // namespace ratelimit
