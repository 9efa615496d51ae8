#pragma once

#include <ratelimit/quota.hpp>

namespace ratelimit {
inline namespace v1 {
namespace detail {

/// A borrowed callable returning the current tick, read by a storage where its answer must be
/// fresh: around the key's critical section (memory) or just before the request (Redis).
class TickSource {
public:
    template <class F>
    explicit TickSource(const F& read) noexcept
        : object_(&read),
          call_([](const void* o) -> Tick { return (*static_cast<const F*>(o))(); }) {}

    Tick operator()() const { return call_(object_); }

private:
    const void* object_ = nullptr;
    Tick (*call_)(const void*) = nullptr;
};

}  // namespace detail
}  // namespace v1
}  // namespace ratelimit
