#pragma once

#include <concepts>
#include <cstdint>
#include <string_view>

#include <ratelimit/algorithms/model.hpp>
#include <ratelimit/decision.hpp>
#include <ratelimit/options.hpp>

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
    const void* object_;
    Tick (*call_)(const void*);
};

}  // namespace detail

/// What a limiter needs from a store of per-key state.
///
/// A storage is a cheap handle whose copies share one store. `table<M>(options, quota)` opens
/// the namespace of one limiter (its `options.name` and model) and throws `std::invalid_argument`
/// when the store cannot hold the quota's arithmetic exactly. A table's `step(key, now, cost,
/// consume)` reads the time from `now` and applies one step to the key's state atomically (with
/// `consume == false`, or a zero cost, nothing is written) and `reset(key)` makes the key fresh.
/// `DefaultClock` is the storage's natural clock; `kSharedAcrossHosts` says whether other hosts see
/// the same state (so a host-local clock would be wrong there). A storage may fix the tick of the
/// arithmetic with `static constexpr std::int64_t kNanosPerTick` (Redis: 1000); otherwise the
/// clock's tick is used. A storage with a store-side clock also offers `stepAtStoreTime(key, phase,
/// cost, consume)`.
template <class S, class M>
concept StoragePolicy = AlgorithmModel<M> && std::copy_constructible<S> &&
    requires(const S& storage, const LimiterOptions& options, const Quota& quota) {
    typename S::DefaultClock;
    { S::kSharedAcrossHosts } -> std::convertible_to<bool>;
    { storage.template table<M>(options, quota) } -> std::copy_constructible;
    requires requires(decltype(storage.template table<M>(options, quota)) table,
                      std::string_view key, detail::TickSource now, std::int64_t cost) {
        { table.step(key, now, cost, true) } -> std::same_as<Decision>;
        table.reset(key);
    };
};

namespace detail {

template <class S>
inline constexpr std::int64_t kStorageNanosPerTick = [] {
    if constexpr (requires { S::kNanosPerTick; }) {
        return std::int64_t{S::kNanosPerTick};
    } else {
        return std::int64_t{0};
    }
}();

}  // namespace detail
}  // namespace v1
}  // namespace ratelimit
