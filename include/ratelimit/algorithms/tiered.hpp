#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>
#include <vector>

#include <ratelimit/algorithms/limit_set.hpp>
#include <ratelimit/algorithms/model.hpp>
#include <ratelimit/algorithms/penalty.hpp>
#include <ratelimit/decision.hpp>
#include <ratelimit/detail/step.hpp>
#include <ratelimit/detail/throw.hpp>
#include <ratelimit/limit.hpp>
#include <ratelimit/quota.hpp>

namespace ratelimit {
inline namespace v1 {

/// What a call on a `TieredModel` tells it and hears back: the tier the call is judged by
/// (its index among the tiers, chosen per key by the caller), and for a tier that is a limit
/// set, its members' decisions.
template <AlgorithmModel M>
struct TierCall {
    std::uint32_t tier = 0;
    [[no_unique_address]] detail::EachOf<M> each{};
};

/// Tiers of one model: one limit (or, for a limit set, one set of limits) per tier, chosen per
/// key at each call (`TieredLimiter`). A key's state records the tier it was written under; a
/// call under another tier first carries the key's consumption over to that tier's limit, as
/// `Limiter::setLimit` does (`detail::convertedState`: toward fewer admissions, never more), so
/// a key whose tier changes keeps what it consumed and is judged by its new tier from that call
/// on. A call without a tier (a conversion's own measure) is judged by the key's tier.
///
/// State: the model's, then the tier's index (8 bytes more with padding, in tiered limiters
/// only). In Redis each key's value records the limit it was written under, as every model's
/// does, so the script carries it over when a call's tier sends another limit.
template <AlgorithmModel M>
requires(!detail::kIsPenalized<M>) struct TieredModel {
    using Inner = M;
    static constexpr std::string_view kName = detail::PrefixedName<"tiered_", M::kName>::kView;
    /// Windows are never shifted per key in tiers (their periods differ).
    static constexpr bool kBucket = true;
    static constexpr int kStateVersion = 1;
    /// At most this many tiers.
    static constexpr std::size_t kMaxTiers = 256;

    /// The tiers' limits, in tier order.
    using Limits = std::vector<LimitOf<M>>;
    /// What a call passes in and gets back (`detail::EachOf`).
    using Decisions = TierCall<M>;

    struct State {
        typename M::State inner{};
        std::uint32_t tier = 0;
    };

    /// Each tier's quota; the base holds the largest capacity (no cost above it passes any
    /// tier), the tick and the late-call tolerance.
    struct QuotaType : Quota {
        std::vector<QuotaOf<M>> tiers;

        /// Compiles each tier's limit. Throws: `std::invalid_argument` naming the field, and
        /// for no tier or more than `kMaxTiers`.
        template <class Self>
        static QuotaType make(const Limits& limits, std::int64_t nanosPerTick,
                              std::int64_t maxRunsPerKey, Tick lateToleranceTicks = 0) {
            if (limits.empty() || limits.size() > kMaxTiers) {
                detail::throwInvalidArgument("TieredLimiter: tiers must number 1..256 (got {})",
                                             {static_cast<std::int64_t>(limits.size())});
            }
            QuotaType q;
            for (const LimitOf<M>& limit : limits) {
                q.tiers.push_back(QuotaOf<M>::template make<M>(limit, nanosPerTick, maxRunsPerKey,
                                                               lateToleranceTicks));
            }
            static_cast<Quota&>(q) = q.tiers.front();
            for (const Quota& t : q.tiers) {
                q.capacity = t.capacity > q.capacity ? t.capacity : q.capacity;
            }
            return q;
        }

        /// Whether two quotas hold the same tiers (`detail::sameQuotaOf`, tier by tier).
        friend bool operator==(const QuotaType& a, const QuotaType& b) noexcept {
            if (a.tiers.size() != b.tiers.size()) {
                return false;
            }
            for (std::size_t i = 0; i < a.tiers.size(); ++i) {
                if (!detail::sameQuotaOf<M>(a.tiers[i], b.tiers[i])) {
                    return false;
                }
            }
            return true;
        }
    };

    /// The largest tier's capacity.
    static std::int64_t capacity(const Limits& limits) noexcept {
        std::int64_t largest = 0;
        for (const LimitOf<M>& limit : limits) {
            const std::int64_t c = M::capacity(limit);
            largest = c > largest ? c : largest;
        }
        return largest;
    }

    /// A step under the key's own tier.
    static Decision step(State& state, const QuotaType& q, Tick now, std::int64_t cost) {
        return M::step(state.inner, q.tiers[state.tier], now, cost);
    }

    /// A step under the call's tier, the key carried over to it first.
    static Decision step(State& state, const QuotaType& q, Tick now, std::int64_t cost,
                         Decisions& call) {
        const QuotaOf<M>& tier = moveTo(state, q, now, call.tier);
        if constexpr (std::is_empty_v<detail::EachOf<M>>) {
            return M::step(state.inner, tier, now, cost);
        } else {
            return M::step(state.inner, tier, now, cost, call.each);
        }
    }

    /// Gives back under the key's own tier (`RefundableModel`).
    static void refund(State& state, const QuotaType& q, Tick now,
                       std::int64_t cost) requires RefundableModel<M> {
        M::refund(state.inner, q.tiers[state.tier], now, cost);
    }

    /// Gives back under the call's tier, the key carried over to it first.
    static void refund(State& state, const QuotaType& q, Tick now, std::int64_t cost,
                       const Decisions& call) requires RefundableModel<M> {
        M::refund(state.inner, moveTo(state, q, now, call.tier), now, cost);
    }

    /// Carries every key over to its tier's new limit (`Limiter::setLimit` of every tier at
    /// once; the tiers keep their number and order).
    static State convert(const State& state, const QuotaType& from, const QuotaType& to, Tick now) {
        // A limiter that dropped tiers (not `TieredLimiter`, which keeps them) judges a key of
        // a dropped tier by the first.
        State carried = state;
        carried.tier = state.tier < to.tiers.size() ? state.tier : 0;
        carried.inner = detail::convertedState<M, QuotaOf<M>>(state.inner, from.tiers[state.tier],
                                                              to.tiers[carried.tier], now);
        return carried;
    }

    static bool isFresh(const State& state, const QuotaType& q, Tick now) {
        return M::isFresh(state.inner, q.tiers[state.tier], now);
    }

    static Tick lastWrite(const State& state) noexcept { return M::lastWrite(state.inner); }

    /// The widest of the tiers' ranges.
    static ModelRange range(const QuotaType& q) noexcept {
        ModelRange widest{0, 0};
        for (const QuotaOf<M>& t : q.tiers) {
            const ModelRange r = M::range(t);
            widest.span = r.span > widest.span ? r.span : widest.span;
            widest.units = r.units > widest.units ? r.units : widest.units;
        }
        return widest;
    }

    /// The heap a key's inner state may hold, at the most of any tier.
    static std::size_t heapBytes(const QuotaType& q) noexcept requires
        requires(const QuotaOf<M>& t) {
        M::heapBytes(t);
    }
    {
        std::size_t most = 0;
        for (const QuotaOf<M>& t : q.tiers) {
            const std::size_t bytes = M::heapBytes(t);
            most = bytes > most ? bytes : most;
        }
        return most;
    }

    /// The tiers' limits `q` was compiled from.
    static Limits limitOf(const QuotaType& q) {
        Limits limits;
        for (const QuotaOf<M>& t : q.tiers) {
            limits.push_back(detail::limitOf<M>(t));
        }
        return limits;
    }

private:
    /// The quota of `tier`, with the key's state carried over to it when it was written under
    /// another.
    static const QuotaOf<M>& moveTo(State& state, const QuotaType& q, Tick now,
                                    std::uint32_t tier) {
        if (state.tier != tier) {
            state.inner = detail::convertedState<M, QuotaOf<M>>(state.inner, q.tiers[state.tier],
                                                                q.tiers[tier], now);
            state.tier = tier;
        }
        return q.tiers[tier];
    }
};

namespace detail {

template <class M>
inline constexpr bool kIsTiered = false;
template <class M>
inline constexpr bool kIsTiered<TieredModel<M>> = true;

}  // namespace detail

}  // namespace v1
}  // namespace ratelimit
