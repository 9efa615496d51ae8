#pragma once

#include <concepts>
#include <cstdint>
#include <string_view>

#include <ratelimit/decision.hpp>
#include <ratelimit/detail/step.hpp>
#include <ratelimit/limit.hpp>
#include <ratelimit/quota.hpp>

namespace ratelimit {
inline namespace v1 {

/// What every windowed model shares: the limit a client sees is the count of one window.
struct WindowKind {
    static constexpr bool kBucket = false;
    static constexpr std::int64_t capacity(const Limit& limit) noexcept { return limit.count; }
};

/// What every bucket shares: the limit a client sees is the bucket's capacity, `burst`.
struct BucketKind {
    static constexpr bool kBucket = true;
    static constexpr std::int64_t capacity(const Limit& limit) noexcept { return limit.burst; }
};

/// What a limiter needs from an algorithm: a per-key `State` whose value-initialised form is
/// the fresh key, and a pure `step` over it.
///
/// `step(state, quota, now, cost)` decides and applies one request: it changes `state` only
/// when it admits a cost above zero, or to rebase a key whose clock stepped back; a cost above
/// the limit changes nothing. It never reads a clock, locks or allocates for I/O.
/// `isFresh(state, quota, now)` says the key is back to its untouched state (its memory may
/// be reused). `lastWrite(state)` is the tick of the key's last write (the minimum tick for a
/// fresh key). `range(quota)` gives the magnitudes the arithmetic meets. `capacity(limit)` is
/// the limit a client sees (`Decision::limit`, the most one call may cost). `kBucket` says the
/// model has no windows (so `LimiterOptions::spreadWindowResets` has nothing to shift). The
/// library's models take both from their kind, `WindowKind` or `BucketKind`.
template <class M>
concept AlgorithmModel = std::default_initializable<typename M::State> &&
    std::copyable<typename M::State> &&
    requires(typename M::State& state, const typename M::State& constState, const Quota& quota,
             const Limit& limit, Tick now, std::int64_t cost) {
    { M::kName } -> std::convertible_to<std::string_view>;
    { M::kBucket } -> std::convertible_to<bool>;
    { M::capacity(limit) } -> std::same_as<std::int64_t>;
    { M::step(state, quota, now, cost) } -> std::same_as<Decision>;
    { M::isFresh(constState, quota, now) } -> std::same_as<bool>;
    { M::lastWrite(constState) } -> std::same_as<Tick>;
    { M::range(quota) } -> std::same_as<ModelRange>;
};

}  // namespace v1
}  // namespace ratelimit
