#pragma once

#include <ratelimit/detail/ref_counted.hpp>
#include <ratelimit/detail/slot_lock.hpp>
#include <ratelimit/detail/thread_annotations.hpp>
#include <ratelimit/listener.hpp>

namespace ratelimit {
inline namespace v1 {
namespace detail {

class StoreListeners;

/// A listener's hold on one store: while a table (or a copy) built with that listener lives,
/// the listener hears the store's changes of health. The tables of one store that share a
/// listener share its hold, so it hears each change once (docs/semantics.md, "Listeners").
/// The `StoreListeners` must outlive it: a table keeps a handle to their owner declared
/// before this one, so that the owner goes after it.
class ListenerHold final : public RefCounted {
public:
    ListenerHold(StoreListeners& store, DecisionListener& listener) noexcept
        : store_(store), listener_(listener) {}
    ListenerHold(const ListenerHold&) = delete;
    ListenerHold& operator=(const ListenerHold&) = delete;
    ListenerHold(ListenerHold&&) = delete;
    ListenerHold& operator=(ListenerHold&&) = delete;
    inline ~ListenerHold();

    [[nodiscard]] DecisionListener& listener() const noexcept { return listener_; }

private:
    friend class StoreListeners;

    StoreListeners& store_;
    DecisionListener& listener_;
    ListenerHold* next_ = nullptr;  // guarded by the store's lock
};

/// The listeners of the limiters that use one store, as a list of their holds. Health changes
/// are rare, so a spin lock serves (and no `<mutex>` or `<vector>` is compiled by every file
/// that makes a limiter); listeners are told outside it, as they may call a limiter of the
/// same store.
/// Thread safety: thread-safe.
class StoreListeners {
public:
    /// `listener`'s hold on this store, made if it has none; none without a listener.
    [[nodiscard]] Ref<ListenerHold> hold(DecisionListener* listener) {
        if (listener == nullptr) {
            return {};
        }
        // Made before the lock is taken, and dropped after it is let go (unlisted, its
        // destructor finds nothing to unlist) when the listener already holds this store.
        Ref<ListenerHold> made = Ref<ListenerHold>::make(*this, *listener);
        Ref<ListenerHold> held;
        {
            const SlotGuard guard(lock_);
            for (ListenerHold* h = holds_; h != nullptr && !held; h = h->next_) {
                if (&h->listener_ == listener && h->retainIfAlive()) {
                    held = Ref<ListenerHold>::adopt(h);
                }
            }
            if (!held) {
                made->next_ = holds_;
                holds_ = made.get();
                held = made;
            }
        }
        return held;
    }

    /// Calls `tell(listener)` for each listener held now, outside the lock: each hold is
    /// retained while its listener is told, so it stays listed and its successor can be read.
    template <class Tell>
    void tellEach(Tell tell) {
        Ref<ListenerHold> current = nextAlive(nullptr);
        while (current) {
            tell(current->listener());
            current = nextAlive(current.get());  // the last one is dropped outside the lock
        }
    }

private:
    friend class ListenerHold;

    /// The first live hold after `after` (from the start: `nullptr`), retained.
    Ref<ListenerHold> nextAlive(const ListenerHold* after) {
        const SlotGuard guard(lock_);
        for (ListenerHold* h = after != nullptr ? after->next_ : holds_; h != nullptr;
             h = h->next_) {
            if (h->retainIfAlive()) {  // else its destructor waits for this lock to unlist it
                return Ref<ListenerHold>::adopt(h);
            }
        }
        return {};
    }

    void unlist(const ListenerHold* gone) noexcept {
        const SlotGuard guard(lock_);
        for (ListenerHold** link = &holds_; *link != nullptr; link = &(*link)->next_) {
            if (*link == gone) {
                *link = gone->next_;
                return;
            }
        }
    }

    SlotLock lock_;
    ListenerHold* holds_ RATELIMIT_GUARDED_BY(lock_) = nullptr;  // a linked list
};

inline ListenerHold::~ListenerHold() { store_.unlist(this); }

}  // namespace detail
}  // namespace v1
}  // namespace ratelimit
