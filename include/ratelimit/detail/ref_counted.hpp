#pragma once

#include <atomic>
#include <cstddef>
#include <utility>

#include <ratelimit/detail/inline.hpp>

namespace ratelimit {
inline namespace v1 {
namespace detail {

/// The count of the handles sharing an object, kept in the object (a base of it).
///
/// `std::shared_ptr` would do, but its control block, weak count, allocator and deleter
/// templates, and the `<ostream>` that `<memory>` brings in C++20, were most of what a limiter's
/// construction cost every file that makes one to compile (bench/README.md, "Compile time").
/// The objects shared here need none of it: each is made by `Ref::make` and deleted as its own
/// type.
/// Thread safety: thread-safe.
class RefCounted {
public:
    RefCounted() = default;
    RefCounted(const RefCounted&) = delete;
    RefCounted& operator=(const RefCounted&) = delete;
    RefCounted(RefCounted&&) = delete;
    RefCounted& operator=(RefCounted&&) = delete;

    void retain() noexcept { count_.fetch_add(1, std::memory_order_relaxed); }

    /// Takes a reference unless the last one is already gone (the object is being destroyed):
    /// for a registry that lists objects without owning them.
    [[nodiscard]] bool retainIfAlive() noexcept {
        std::size_t n = count_.load(std::memory_order_relaxed);
        while (n != 0 && !count_.compare_exchange_weak(n, n + 1, std::memory_order_relaxed)) {
        }
        return n != 0;
    }

    /// Whether a handle still holds it (false once the last is gone, while it is destroyed).
    [[nodiscard]] bool alive() const noexcept {
        return count_.load(std::memory_order_relaxed) != 0;
    }

    /// Drops a reference; true when it was the last, and the object is the caller's to delete.
    [[nodiscard]] bool release() noexcept {
        return count_.fetch_sub(1, std::memory_order_acq_rel) == 1;
    }

protected:
    ~RefCounted() = default;

private:
    std::atomic<std::size_t> count_{1};
};

/// A handle to a `T` (a `RefCounted`): copies share it, and the last one to go deletes it.
/// Thread safety: as a `std::shared_ptr`: distinct handles may be used from any threads.
template <class T>
class Ref {
public:
    Ref() noexcept = default;

    /// Makes a `T` whose one reference is the returned handle.
    template <class... Args>
    [[nodiscard]] static Ref make(Args&&... args) {
        return Ref(new T(std::forward<Args>(args)...));
    }

    /// A handle to `object`, which the caller has already retained for it.
    [[nodiscard]] static Ref adopt(T* object) noexcept { return Ref(object); }

    Ref(const Ref& other) noexcept : object_(other.object_) {
        if (object_ != nullptr) {
            object_->retain();
        }
    }
    Ref(Ref&& other) noexcept : object_(std::exchange(other.object_, nullptr)) {}
    Ref& operator=(const Ref& other) noexcept {
        if (this != &other) {
            Ref copy(other);
            std::swap(object_, copy.object_);
        }
        return *this;
    }
    Ref& operator=(Ref&& other) noexcept {
        Ref taken(std::move(other));
        std::swap(object_, taken.object_);
        return *this;
    }
    ~Ref() {
        if (object_ != nullptr) {
            drop(object_);
        }
    }

    [[nodiscard]] T* get() const noexcept { return object_; }
    T& operator*() const noexcept { return *object_; }
    T* operator->() const noexcept { return object_; }
    explicit operator bool() const noexcept { return object_ != nullptr; }

private:
    explicit Ref(T* object) noexcept : object_(object) {}

    /// Out of line: a handle's holders (a limiter, a storage) are made and dropped rarely, and
    /// would otherwise each expand the object's destructor where they go.
    RATELIMIT_COLD static void drop(T* object) noexcept {
        if (object->release()) {
            delete object;  // NOLINT(cppcoreguidelines-owning-memory): the last handle owns it
        }
    }

    T* object_ = nullptr;
};

}  // namespace detail
}  // namespace v1
}  // namespace ratelimit
