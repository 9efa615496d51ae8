#pragma once

#include <ratelimit/quota.hpp>

namespace ratelimit {
inline namespace v1 {
namespace detail {

/// A borrowed callable returning the current tick, read by a storage where its answer must be
/// fresh: around the key's critical section (memory) or just before the request (Redis).
class TickSource {
public:
    /// `steady`: `read` is a steady clock read by the storage itself, so a time another call
    /// wrote later than this call's own read was read while this call was under way (and, in a
    /// large memory table, read after the key's slots are fetched: `MemoryTable::step`).
    template <class F>
    explicit TickSource(const F& read, bool steady = false) noexcept
        : object_(&read),
          call_([](const void* o) -> Tick { return (*static_cast<const F*>(o))(); }),
          steady_(steady) {}

    Tick operator()() const { return call_(object_); }

    [[nodiscard]] bool steady() const noexcept { return steady_; }

private:
    const void* object_ = nullptr;
    Tick (*call_)(const void*) = nullptr;
    bool steady_ = false;
};

}  // namespace detail
}  // namespace v1
}  // namespace ratelimit
