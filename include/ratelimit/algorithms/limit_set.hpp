#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include <ratelimit/algorithms/model.hpp>
#include <ratelimit/decision.hpp>
#include <ratelimit/detail/checked_math.hpp>
#include <ratelimit/detail/inline.hpp>
#include <ratelimit/limit.hpp>
#include <ratelimit/quota.hpp>

namespace ratelimit {
inline namespace v1 {
namespace detail {

/// The states of a set's members, each in place: a `std::tuple` is not trivially copyable,
/// which would cost a set of buckets its copy-free step.
template <class... States>
struct StateList {};

template <class Head, class... Tail>
struct StateList<Head, Tail...> {
    Head head{};
    [[no_unique_address]] StateList<Tail...> tail{};
};

template <std::size_t I, class List>
constexpr auto& member(List& list) noexcept {
    if constexpr (I == 0) {
        return list.head;
    } else {
        return member<I - 1>(list.tail);
    }
}

/// The members' names joined by `+`: the set's name, so that two sets of different members
/// never share a table or a Redis key.
template <class... Ms>
struct JoinedNames {
    static constexpr std::size_t kSize = (Ms::kName.size() + ...) + sizeof...(Ms) - 1;
    static constexpr std::array<char, kSize> kChars = [] {
        std::array<char, kSize> chars{};
        std::size_t at = 0;
        const auto append = [&](std::string_view name) {
            if (at > 0) {
                chars[at++] = '+';
            }
            for (const char c : name) {
                chars[at++] = c;
            }
        };
        (append(Ms::kName), ...);
        return chars;
    }();
    static constexpr std::string_view kView{kChars.data(), kSize};
};

}  // namespace detail

/// A limit set: several limits on one key, checked and consumed all or nothing (for example a
/// token bucket of 30 per minute with a burst of 10, and a fixed window of 1,000 per day). A
/// call is admitted only when every member admits it, and then every member consumes its cost;
/// a refusal by any member consumes from none (a refusing member may still rebase after a clock
/// step back, as it would alone). The members' states sit side by side in one entry per key,
/// stepped under one lock in memory and in one script in Redis.
///
/// The decision is the binding member's, with its index in `Decision::policy`: when refused,
/// the member with the longest `retryAfter` (the wait after which the whole set admits the same
/// call: no member's admission is undone by waiting); when admitted, the member with the least
/// `remaining`. Ties go to the lower index. Each member's own decision is available too
/// (`Limiter::tryAcquire(key, cost, each)`): after a refusal, a member that would have admitted
/// reports its figures as they stand, nothing consumed.
///
/// A set of one member is that member's model itself (see `LimitSet`).
template <AlgorithmModel... Ms>
requires(sizeof...(Ms) >= 2 && (std::is_same_v<QuotaOf<Ms>, Quota> && ...)) struct LimitSetModel {
    static constexpr std::size_t kSize = sizeof...(Ms);
    static constexpr std::string_view kName = detail::JoinedNames<Ms...>::kView;
    /// No windows to shift: a set's members may have different periods, so their phases would
    /// differ; `LimiterOptions::spreadWindowResets` is refused for a set.
    static constexpr bool kBucket = true;
    using Members = std::tuple<Ms...>;
    template <std::size_t I>
    using Member = std::tuple_element_t<I, Members>;

    /// The members' limits, in the order of the members.
    using Limits = std::array<Limit, kSize>;
    /// The members' decisions, in the order of the members.
    using Decisions = std::array<Decision, kSize>;

    struct State {
        detail::StateList<typename Ms::State...> members;
    };

    /// The members' quotas, and in the base what a storage reads of any quota: the smallest
    /// capacity (no cost above it can pass), the tick and the late-call tolerance.
    struct QuotaType : Quota {
        std::array<Quota, kSize> members{};
        /// The members in dry-run (`LimiterOptions::dryRunMembers`), bit `i` for member `i`.
        std::uint64_t dryRunMembers = 0;

        /// Compiles each member's limit (see `Quota::make`). Throws: `std::invalid_argument`.
        template <class Self>
        static QuotaType make(const Limits& limits, std::int64_t nanosPerTick,
                              std::int64_t maxRunsPerKey, Tick lateToleranceTicks = 0) {
            QuotaType q;
            forEach([&]<std::size_t I>() {
                q.members[I] = Quota::make<Member<I>>(limits[I], nanosPerTick, maxRunsPerKey,
                                                      lateToleranceTicks);
            });
            static_cast<Quota&>(q) = q.members[0];
            for (const Quota& m : q.members) {
                q.capacity = m.capacity < q.capacity ? m.capacity : q.capacity;
            }
            return q;
        }

        /// Puts the members of `mask` in dry-run (`LimiterOptions::dryRunMembers`; the limiter
        /// checks it): the smallest capacity is then the enforced members', the most a call
        /// may cost and still pass.
        void setDryRunMembers(std::uint64_t mask) noexcept {
            dryRunMembers = mask;
            capacity = 0;
            for (std::size_t i = 0; i < kSize; ++i) {
                if (((mask >> i) & 1U) == 0 && (capacity == 0 || members[i].capacity < capacity)) {
                    capacity = members[i].capacity;
                }
            }
        }

        /// Whether two sets' quotas agree member by member (`detail::sameQuota`).
        friend bool operator==(const QuotaType& a, const QuotaType& b) noexcept {
            if (a.dryRunMembers != b.dryRunMembers) {
                return false;
            }
            for (std::size_t i = 0; i < kSize; ++i) {
                if (!detail::sameQuota(a.members[i], b.members[i])) {
                    return false;
                }
            }
            return true;
        }
    };

    /// The capacity a client sees of the whole set: the smallest member's.
    static constexpr std::int64_t capacity(const Limits& limits) noexcept {
        std::int64_t smallest = Member<0>::capacity(limits[0]);
        forEach([&]<std::size_t I>() {
            const std::int64_t c = Member<I>::capacity(limits[I]);
            smallest = c < smallest ? c : smallest;
        });
        return smallest;
    }

    /// Steps every member at `now`; keeps the members' writes only if every enforced member
    /// admits (or, for a refusing member alone, its rebase).
    RATELIMIT_INLINE static Decision step(State& state, const QuotaType& q, Tick now,
                                          std::int64_t cost) {
        if (q.dryRunMembers != 0) [[unlikely]] {
            return stepWatched(state, q, now, cost);
        }
        return stepEnforced(state, q, now, cost);
    }

    /// `step`, filling `each` with the members' decisions.
    RATELIMIT_INLINE static Decision step(State& state, const QuotaType& q, Tick now,
                                          std::int64_t cost, Decisions& each) {
        const State before = state;
        each = stepMembers(state, q, now, cost, Indices{});
        return settle(state, before, q, now, each);
    }

    /// Gives back up to `cost` to every member (`RefundableModel`).
    static void refund(State& state, const QuotaType& q, Tick now,
                       std::int64_t cost) requires(RefundableModel<Ms>&&...) {
        forEach([&]<std::size_t I>() {
            Member<I>::refund(detail::member<I>(state.members), q.members[I], now, cost);
        });
    }

    /// Carries every member over to its new quota on its own (`detail::convertedState`).
    static State convert(const State& state, const QuotaType& from, const QuotaType& to, Tick now) {
        State carried;
        forEach([&]<std::size_t I>() {
            detail::member<I>(carried.members) = detail::convertedState<Member<I>>(
                detail::member<I>(state.members), from.members[I], to.members[I], now);
        });
        return carried;
    }

    /// The binding member's decision, with its index in `policy` (see the class comment).
    static Decision bind(const Decisions& each) noexcept { return bindAll(each, 0, Indices{}); }

    /// The set's decision from its members' (`step`, and the Redis script's reply): the
    /// binding member's among the enforced ones (`bindAll`). A dry-run member's refusal is
    /// reported in `each` as admitted and `wouldRefuse`, and marks an admitted set's decision
    /// `wouldRefuse`.
    RATELIMIT_INLINE static Decision bind(Decisions& each, const QuotaType& q) noexcept {
        Decision d = bindAll(each, q.dryRunMembers, Indices{});
        if (q.dryRunMembers != 0) [[unlikely]] {
            markDryRun(d, each, q.dryRunMembers);
        }
        return d;
    }

    static bool isFresh(const State& state, const QuotaType& q, Tick now) {
        bool fresh = true;
        forEach([&]<std::size_t I>() {
            fresh =
                fresh && Member<I>::isFresh(detail::member<I>(state.members), q.members[I], now);
        });
        return fresh;
    }

    static Tick lastWrite(const State& state) noexcept {
        Tick last = detail::kInt64Min;
        forEach([&]<std::size_t I>() {
            const Tick t = Member<I>::lastWrite(detail::member<I>(state.members));
            last = t > last ? t : last;
        });
        return last;
    }

    /// The widest magnitudes of any member (the storages check each member on its own too).
    static ModelRange range(const QuotaType& q) noexcept {
        ModelRange widest{0, 0};
        forEach([&]<std::size_t I>() {
            const ModelRange r = Member<I>::range(q.members[I]);
            widest.span = r.span > widest.span ? r.span : widest.span;
            widest.units = r.units > widest.units ? r.units : widest.units;
        });
        return widest;
    }

    /// The heap a key's members may hold (the sliding log's runs), where one holds any.
    static std::size_t heapBytes(const QuotaType& q) noexcept
        requires(requires(const Quota& x) { Ms::heapBytes(x); } || ...) {
        std::size_t bytes = 0;
        forEach([&]<std::size_t I>() {
            if constexpr (requires(const Quota& x) { Member<I>::heapBytes(x); }) {
                bytes += Member<I>::heapBytes(q.members[I]);
            }
        });
        return bytes;
    }

private:
    using Indices = std::make_index_sequence<kSize>;

    /// Every member's step, each on its own state, unrolled over the members with constant
    /// indices so that the decisions stay in registers: a decision stored whole and read back at
    /// a computed index stalled the step on store-forwarding misses (about a third of its time).
    /// The decisions are returned as the array's initialisers: an array declared first and then
    /// assigned was zeroed on every call, padding and all (a 96-byte `rep stos` for two members).
    template <std::size_t... I>
    RATELIMIT_INLINE static Decisions stepMembers(State& state, const QuotaType& q, Tick now,
                                                  std::int64_t cost,
                                                  std::index_sequence<I...> /*members*/) {
        return Decisions{
            Member<I>::step(detail::member<I>(state.members), q.members[I], now, cost)...};
    }

    /// After the members' steps: undoes the admissions if an enforced member refused, and
    /// returns the binding member's decision.
    RATELIMIT_INLINE static Decision settle(State& state, const State& before, const QuotaType& q,
                                            Tick now, Decisions& each) {
        undoIfRefused(state, before, q, now, each, q.dryRunMembers, Indices{});
        return bind(each, q);
    }

    /// Undoes the members' admissions if a member not in `dryRunMask` refused. The members
    /// step the state itself and are undone afterwards, so the common call, in which every
    /// member admits, keeps what they wrote.
    template <std::size_t... I>
    RATELIMIT_INLINE static void undoIfRefused(State& state, const State& before,
                                               const QuotaType& q, Tick now, Decisions& each,
                                               std::uint64_t dryRunMask,
                                               std::index_sequence<I...> /*members*/) {
        if (!((each[I].allowed || dryRun<I>(dryRunMask)) && ...)) [[unlikely]] {
            (undoAdmission<I>(state, before, q, now, each), ...);
        }
    }

    /// `step` where every member is enforced and the caller asks for no member's decision, so
    /// the members' decisions never leave it (see `bindAll`). A call of its own, whose one
    /// return is the binding decision, so GCC builds that decision in place: inlined in a
    /// table's step beside the step's other returns, it was built on the stack and copied out,
    /// a store-forwarding stall on every call (bench/README.md, "the set's decision in place").
    RATELIMIT_NOINLINE static Decision stepEnforced(State& state, const QuotaType& q, Tick now,
                                                    std::int64_t cost) {
        const State before = state;
        Decisions each = stepMembers(state, q, now, cost, Indices{});
        undoIfRefused(state, before, q, now, each, 0, Indices{});
        return bindAll(each, 0, Indices{});
    }

    /// `step` of a set with members in dry-run, out of the hot path's way.
    RATELIMIT_COLD static Decision stepWatched(State& state, const QuotaType& q, Tick now,
                                               std::int64_t cost) {
        Decisions each;
        return step(state, q, now, cost, each);
    }

    /// No binding member yet (`bindAll`): one past the last.
    static constexpr auto kNone = static_cast<std::uint32_t>(kSize);

    template <std::size_t I>
    static constexpr bool dryRun(std::uint64_t mask) noexcept {
        return ((mask >> I) & 1U) != 0;
    }

    /// A dry-run member's refusal admits (`wouldRefuse`), and so marks an admitted set. Cold:
    /// members are in dry-run while a new limit is watched, and the inlined binding of every
    /// other set stays small.
    RATELIMIT_COLD static void markDryRun(Decision& d, Decisions& each,
                                          std::uint64_t mask) noexcept {
        for (std::size_t i = 0; i < kSize; ++i) {
            if (((mask >> i) & 1U) != 0 && !each[i].allowed) {
                each[i].allowed = true;
                each[i].wouldRefuse = true;
                d.wouldRefuse = d.wouldRefuse || d.allowed;
            }
        }
    }

    /// After the set refused: member `I`, had it admitted, goes back to its state before and
    /// reports its figures as they stand (a zero cost writes nothing).
    template <std::size_t I>
    RATELIMIT_INLINE static void undoAdmission(State& state, const State& before,
                                               const QuotaType& q, Tick now, Decisions& each) {
        if (each[I].allowed) {
            auto& mine = detail::member<I>(state.members);
            mine = detail::member<I>(before.members);
            each[I] = Member<I>::step(mine, q.members[I], now, 0);
        }
    }

    /// The binding member among those not in `dryRunMask` (the first enforced member, then
    /// any that binds more tightly; the last member if all are in dry-run): the one home of
    /// the set's binding rule. The decisions are read field by field at constant indices and
    /// the result is built the same way, so that they stay in registers: copied whole, a
    /// decision was stored field by field and read back as 16-byte words, and each such read
    /// stalled on store forwarding.
    template <std::size_t... I>
    RATELIMIT_INLINE static Decision bindAll(const Decisions& each, std::uint64_t dryRunMask,
                                             std::index_sequence<I...> /*members*/) noexcept {
        std::uint32_t binding = kNone;
        Decision best;  // the binding member's fields that `detail::bindsTighter` compares
        (consider<I>(each, dryRunMask, best, binding), ...);
        binding = binding == kNone ? kNone - 1 : binding;
        Decision d;
        d.allowed = field<&Decision::allowed>(each, binding, Indices{});
        d.limit = field<&Decision::limit>(each, binding, Indices{});
        d.remaining = field<&Decision::remaining>(each, binding, Indices{});
        d.retryAfter = field<&Decision::retryAfter>(each, binding, Indices{});
        d.resetAfter = field<&Decision::resetAfter>(each, binding, Indices{});
        d.degraded = field<&Decision::degraded>(each, binding, Indices{});
        d.wouldRefuse = field<&Decision::wouldRefuse>(each, binding, Indices{});
        d.penaltyStarted = field<&Decision::penaltyStarted>(each, binding, Indices{});
        d.policy = binding;
        constexpr std::size_t kBoundBytes = 48;  // the fields above, padded, on 64-bit targets
        static_assert(sizeof(void*) != sizeof(std::uint64_t) || sizeof(Decision) == kBoundBytes,
                      "a new field of Decision is to be bound here too");
        return d;
    }

    /// Member `I`, enforced, binds instead of `best` if it is the first enforced one or binds
    /// more tightly (`detail::bindsTighter`); `best` takes the fields that rule compares.
    template <std::size_t I>
    RATELIMIT_INLINE static void consider(const Decisions& each, std::uint64_t dryRunMask,
                                          Decision& best, std::uint32_t& binding) noexcept {
        if (!dryRun<I>(dryRunMask) && (binding == kNone || detail::bindsTighter(each[I], best))) {
            best.allowed = each[I].allowed;
            best.remaining = each[I].remaining;
            best.retryAfter = each[I].retryAfter;
            binding = static_cast<std::uint32_t>(I);
        }
    }

    /// Member `i`'s `Field`, selected among constant indices.
    template <auto Field, std::size_t... I>
    RATELIMIT_INLINE static auto field(const Decisions& each, std::uint32_t i,
                                       std::index_sequence<I...> /*members*/) noexcept {
        auto value = each[0].*Field;
        ((value = i == I ? each[I].*Field : value), ...);
        return value;
    }

public:
    /// Calls `f.template operator()<I>()` for each member index, in order.
    template <class F>
    static constexpr void forEach(F&& f) {
        [&]<std::size_t... I>(std::index_sequence<I...>) { (f.template operator()<I>(), ...); }
        (std::make_index_sequence<kSize>{});
    }
};

namespace detail {

template <class... Ms>
struct SetOf {
    using Type = LimitSetModel<Ms...>;
};
template <class M>
struct SetOf<M> {
    using Type = M;
};

template <class M>
inline constexpr bool kIsLimitSet = false;
template <class... Ms>
inline constexpr bool kIsLimitSet<LimitSetModel<Ms...>> = true;

}  // namespace detail

/// The limit set of the models `Ms`, in order (`LimitSetModel`); a set of one model is that
/// model, and costs exactly what it costs alone.
template <AlgorithmModel... Ms>
using LimitSet = typename detail::SetOf<Ms...>::Type;

}  // namespace v1
}  // namespace ratelimit
