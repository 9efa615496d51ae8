#pragma once

#include <atomic>
#include <memory>

namespace ratelimit {
inline namespace v1 {
namespace detail {

/// One `T` per process: a process forked from the one that made the current `T` makes its own
/// on its first call and leaves the parent's as the fork found it, never used and never freed.
/// A thread of the parent may have held its locks, or been in the middle of using it, at the
/// fork, and that thread does not exist in the child. `T::forked()` tells whether the calling
/// process is a child of the one that made the object (see `ForkWatch`).
/// Thread safety: thread-safe.
template <class T>
class PerProcess {
public:
    explicit PerProcess(std::unique_ptr<T> first) : current_(first.release()) {}
    PerProcess(const PerProcess&) = delete;
    PerProcess& operator=(const PerProcess&) = delete;
    PerProcess(PerProcess&&) = delete;
    PerProcess& operator=(PerProcess&&) = delete;
    ~PerProcess() {
        T* const current = current_.load(std::memory_order_acquire);
        if (!current->forked()) {
            const std::unique_ptr<T> own(current);
        }  // else: a parent's, left as the fork found it
    }

    /// This process's `T`; `make()` makes it in a forked child. Takes no lock before it knows
    /// whether this process is a child (a lock a parent's thread held at the fork is never
    /// released in the child).
    template <class Make>
    T& current(const Make& make) {
        T* current = current_.load(std::memory_order_acquire);
        while (current->forked()) {
            std::unique_ptr<T> own = make();
            if (current_.compare_exchange_strong(current, own.get(), std::memory_order_acq_rel)) {
                return *own.release();
            }  // else another thread of this child made it first: `current` is now that one
        }
        return *current;
    }

private:
    std::atomic<T*> current_;
};

}  // namespace detail
}  // namespace v1
}  // namespace ratelimit
