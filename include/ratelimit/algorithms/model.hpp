#pragma once

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>
#include <utility>

#include <ratelimit/decision.hpp>
#include <ratelimit/detail/step.hpp>
#include <ratelimit/limit.hpp>
#include <ratelimit/quota.hpp>

namespace ratelimit {
inline namespace v1 {

namespace detail {

/// A string literal as a template argument.
template <std::size_t N>
struct Literal {
    // Implicit, so that a template argument is written as the literal itself.
    // NOLINTNEXTLINE(google-explicit-constructor,*-avoid-c-arrays): a literal's own type
    constexpr Literal(const char (&text)[N]) noexcept {
        for (std::size_t i = 0; i < N; ++i) {
            chars[i] = text[i];
        }
    }
    [[nodiscard]] constexpr std::string_view view() const noexcept { return {chars.data(), N - 1}; }

    std::array<char, N> chars{};
};

}  // namespace detail

/// A model's names, which the model gives as template arguments: `kName`, its name in
/// configurations, also the Redis key segment and the Lua table's name; `kStateFields`,
/// `State`'s fields as the Redis script names them (the key's value packs them in this order,
/// unless the model encodes its state itself); `kStateVersion`, the version of that encoding,
/// part of every Redis key so that a state written in another encoding is never read.
template <detail::Literal Name, int StateVersion, detail::Literal... StateFields>
struct ModelNames {
    static constexpr std::string_view kName = Name.view();
    static constexpr std::array<std::string_view, sizeof...(StateFields)> kStateFields{
        StateFields.view()...};
    static constexpr int kStateVersion = StateVersion;
};

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

namespace detail {

template <class M>
struct QuotaSelect {
    using Type = Quota;
};
template <class M>
requires requires { typename M::QuotaType; }
struct QuotaSelect<M> {
    using Type = typename M::QuotaType;
};

template <class M>
struct LimitSelect {
    using Type = Limit;
};
template <class M>
requires requires { typename M::Limits; }
struct LimitSelect<M> {
    using Type = typename M::Limits;
};

}  // namespace detail

/// What a model's step reads: a `Quota`, or the model's own `QuotaType` (a limit set's, which
/// holds one per member).
template <class M>
using QuotaOf = typename detail::QuotaSelect<M>::Type;

/// What a limiter of the model enforces: a `Limit`, or the model's own `Limits` (a limit set's,
/// one per member).
template <class M>
using LimitOf = typename detail::LimitSelect<M>::Type;

namespace detail {

/// The limit `q` was compiled from.
inline Limit limitOfQuota(const Quota& q) {
    return Limit::per(q.count, std::chrono::nanoseconds{q.period * q.nanosPerTick})
        .withBurst(q.burst);
}

/// The limit (a limit set's: one per member; a model's own, where it has `limitOf`) `q` was
/// compiled from.
template <class M>
LimitOf<M> limitOf(const QuotaOf<M>& q) {
    if constexpr (std::is_same_v<LimitOf<M>, Limit>) {
        return limitOfQuota(q);
    } else if constexpr (requires { M::limitOf(q); }) {
        return M::limitOf(q);
    } else {
        return [&]<std::size_t... I>(std::index_sequence<I...>) {
            return LimitOf<M>{limitOfQuota(q.members[I])...};
        }
        (std::make_index_sequence<std::tuple_size_v<LimitOf<M>>>{});
    }
}

}  // namespace detail

namespace detail {

/// Whether a refusal may write a key's state beyond a clock step's rebase (a penalty's strike:
/// `kRefusalsWrite` in the model), so that a key without an entry takes one for any consuming
/// cost.
template <class M>
inline constexpr bool kRefusalsWrite = requires {
    requires M::kRefusalsWrite;
};

/// Whether two limiters' quotas of the model `M` agree on everything their keys' states depend
/// on (`sameQuota`, member by member for a limit set).
template <class M>
bool sameQuotaOf(const QuotaOf<M>& a, const QuotaOf<M>& b) noexcept {
    if constexpr (std::is_same_v<QuotaOf<M>, Quota>) {
        return sameQuota(a, b);
    } else {
        return a == b;
    }
}

}  // namespace detail

/// What a limiter needs from an algorithm: a per-key `State` whose value-initialised form is
/// the fresh key, and a pure `step` over it. A model is stateless: its functions are pure
/// functions of their arguments, so any number of threads may call them. The library's models
/// take `kName` from `ModelNames`.
///
/// `step(state, quota, now, cost)` decides and applies one request: it changes `state` only
/// when it admits a cost above zero, or to rebase a key whose clock stepped back; a cost above
/// the limit changes nothing. It never reads a clock, locks or allocates for I/O.
/// `isFresh(state, quota, now)` says the key is back to its untouched state (its memory may
/// be reused). `lastWrite(state)` is the tick of the key's last write (the minimum tick for a
/// fresh key). `range(quota)` gives the magnitudes the arithmetic meets. `capacity(limit)` is
/// the limit a client sees (`Decision::limit`, the most one call may cost). `kBucket` says the
/// model has no windows (so `LimiterOptions::spreadWindowResets` has nothing to shift). The
/// library's models take both from their kind, `WindowKind` or `BucketKind`. A model may read
/// its own kind of quota and limit (`QuotaOf`, `LimitOf`), as a limit set does.
template <class M>
concept AlgorithmModel = std::default_initializable<typename M::State> &&
    std::copyable<typename M::State> &&
    requires(typename M::State& state, const typename M::State& constState, const QuotaOf<M>& quota,
             const LimitOf<M>& limit, Tick now, std::int64_t cost) {
    { M::kName } -> std::convertible_to<std::string_view>;
    { M::kBucket } -> std::convertible_to<bool>;
    { M::capacity(limit) } -> std::same_as<std::int64_t>;
    { M::step(state, quota, now, cost) } -> std::same_as<Decision>;
    { M::isFresh(constState, quota, now) } -> std::same_as<bool>;
    { M::lastWrite(constState) } -> std::same_as<Tick>;
    { M::range(quota) } -> std::same_as<ModelRange>;
};

/// A model that can give back what an admitted call spent (`Limiter::refund`):
/// `refund(state, quota, now, cost)` gives back up to `cost` units of what the key has consumed
/// as its state stands at `now` (a bucket never above its capacity, a count never below 0; the
/// sliding log its newest entries first), writing `state` only when it gives back something
/// or rolls the key's windows to `now`.
template <class M>
concept RefundableModel = AlgorithmModel<M> &&
    requires(typename M::State& state, const QuotaOf<M>& quota, Tick now, std::int64_t cost) {
    M::refund(state, quota, now, cost);
};

}  // namespace v1
}  // namespace ratelimit
