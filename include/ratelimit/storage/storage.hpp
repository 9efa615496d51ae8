#pragma once

#include <concepts>
#include <cstdint>
#include <string_view>

#include <ratelimit/algorithms/model.hpp>
#include <ratelimit/decision.hpp>

namespace ratelimit {
inline namespace v1 {

/// What a limiter needs from a store of per-key state.
///
/// A storage is a cheap handle whose copies share one store. `table<M>(name, quota)` opens
/// the namespace of one limiter (its name and model) and throws `std::invalid_argument` when
/// the store cannot hold the quota's arithmetic exactly. A table's `step(key, now, cost,
/// consume)` applies `M::step` to the key's state atomically (with `consume == false`, or a
/// zero cost, nothing is written) and `reset(key)` makes the key fresh. `DefaultClock` is the
/// storage's natural clock; `kSharedAcrossHosts` says whether other hosts see the same state
/// (so a host-local clock would be wrong there).
template <class S, class M>
concept StoragePolicy = AlgorithmModel<M> && std::copy_constructible<S> &&
    requires(const S& storage, std::string_view name, const Quota& quota) {
    typename S::DefaultClock;
    { S::kSharedAcrossHosts } -> std::convertible_to<bool>;
    { storage.template table<M>(name, quota) } -> std::copy_constructible;
    requires requires(decltype(storage.template table<M>(name, quota)) table, std::string_view key,
                      Tick now, std::int64_t cost) {
        { table.step(key, now, cost, true) } -> std::same_as<Decision>;
        table.reset(key);
    };
};

}  // namespace v1
}  // namespace ratelimit
