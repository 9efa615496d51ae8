#pragma once

// How one step answers, and the late-call rule every storage runs a model's step under. Below
// the models: they build their decisions here, and the storages' internals apply their steps
// through `applyStep`.

#include <cstdint>
#include <type_traits>

#include <ratelimit/decision.hpp>
#include <ratelimit/detail/checked_math.hpp>
#include <ratelimit/detail/chrono.hpp>
#include <ratelimit/detail/inline.hpp>
#include <ratelimit/options.hpp>
#include <ratelimit/quota.hpp>

namespace ratelimit {
inline namespace v1 {
namespace detail {

/// A `Decision` with its durations in ticks converted to nanoseconds.
inline Decision decision(const Quota& q, bool allowed, std::int64_t remaining,
                         std::chrono::nanoseconds retryAfter, Tick resetTicks) noexcept {
    Decision d;
    d.allowed = allowed;
    d.limit = q.capacity;
    d.remaining = remaining < 0 ? 0 : remaining;
    d.retryAfter = retryAfter;
    d.resetAfter = std::chrono::nanoseconds{resetTicks * q.nanosPerTick};
    return d;
}

/// The cost is admitted: `remaining` after it, the key fresh again `resetTicks` from now.
inline Decision admitted(const Quota& q, std::int64_t remaining, Tick resetTicks) noexcept {
    return decision(q, true, remaining, std::chrono::nanoseconds{0}, resetTicks);
}

/// The cost is refused: the same call passes `retryTicks` from now.
inline Decision refused(const Quota& q, std::int64_t remaining, Tick retryTicks,
                        Tick resetTicks) noexcept {
    return decision(q, false, remaining, std::chrono::nanoseconds{retryTicks * q.nanosPerTick},
                    resetTicks);
}

/// The cost is above the capacity: refused for ever, whatever the wait.
inline Decision refusedForever(const Quota& q, std::int64_t remaining, Tick resetTicks) noexcept {
    return decision(q, false, remaining, Decision::kNever, resetTicks);
}

/// What a model reports beside its decision: a limit set's members' decisions
/// (`LimitSetModel::Decisions`), or nothing.
template <class M>
struct EachSelect {
    struct Type {};
};
template <class M>
requires requires { typename M::Decisions; }
struct EachSelect<M> {
    using Type = typename M::Decisions;
};
template <class M>
using EachOf = typename EachSelect<M>::Type;

/// Whether a model's calls take or give more than the decision (`EachOf` is not empty): a limit
/// set's members' decisions, a tiered model's tier.
template <class M>
inline constexpr bool kReportsEach = !std::is_empty_v<EachOf<M>>;

/// Calls `f` on each member decision `each` holds: a limit set's, directly or in a tier's call
/// (`TierCall::each`).
template <class Each, class F>
void forEachDecision(Each& each, F&& f) {
    if constexpr (requires { each.each; }) {
        forEachDecision(each.each, f);
    } else if constexpr (requires { each.begin(); }) {
        for (auto& member : each) {
            f(member);
        }
    }
}

/// A late call's waits count from its own time, `late` ticks before the time it was answered
/// at. Inlined whole: GCC 12 split the body out with the decision's address, which kept every
/// step's decision on the stack (bench/README.md, "The decision's copies").
RATELIMIT_INLINE void shiftLate(Decision& d, Tick late, std::int64_t nanosPerTick) noexcept {
    if (late > 0) {
        const std::chrono::nanoseconds shift{late * nanosPerTick};
        if (!d.never() && d.retryAfter.count() > 0) {
            d.retryAfter += shift;
        }
        if (d.resetAfter.count() > 0) {
            d.resetAfter += shift;
        }
    }
}

/// The late-call rule every storage applies (docs/semantics.md, "Late calls"): a call earlier
/// than the key's last write by at most `lateTolerance` comes from a caller that read the clock
/// just before another caller wrote (or from a host whose clock is slightly behind), not from
/// a clock that stepped back. It is answered at the last write — no rebase, so the interval is
/// never credited twice — and its waits count from its own time. Moves `now` to the time the
/// call is answered at and returns by how much (0 for a call that is not late). Redis applies
/// the same rule in its script (detail/redis_script.hpp).
template <class M, class Q>
RATELIMIT_INLINE Tick answerLate(const typename M::State& state, const Q& q, Tick& now) noexcept {
    const Tick last = M::lastWrite(state);
    if (now < last && satSub(last, now) <= q.lateTolerance) {
        const Tick late = last - now;
        now = last;
        return late;
    }
    return 0;
}

/// `stepLate` of a model that reports more than its decision (`kReportsEach`): one named
/// decision, made by either step. With one per step, GCC built the returned one on the stack
/// and copied it out, a store-forwarding stall on every call.
template <class M, class Q>
RATELIMIT_INLINE Decision stepLateEach(typename M::State& state, const Q& q, Tick now,
                                       std::int64_t cost, Tick late, EachOf<M>* each) {
    Decision d =
        each != nullptr ? M::step(state, q, now, cost, *each) : M::step(state, q, now, cost);
    if (each != nullptr) {
        forEachDecision(*each, [&](Decision& member) { shiftLate(member, late, q.nanosPerTick); });
    }
    shiftLate(d, late, q.nanosPerTick);
    return d;
}

/// One model step at the time a call is answered at, its waits counted from the call's own
/// time, `late` ticks before; a limit set's members' decisions go to `each` when it is given.
template <class M, class Q>
RATELIMIT_INLINE Decision stepLate(typename M::State& state, const Q& q, Tick now,
                                   std::int64_t cost, Tick late, EachOf<M>* each) {
    if constexpr (kReportsEach<M>) {
        return stepLateEach<M>(state, q, now, cost, late, each);
    }
    Decision d = M::step(state, q, now, cost);
    shiftLate(d, late, q.nanosPerTick);
    return d;
}

/// Runs one model step under the late-call rule (`answerLate`). `lateBefore`: how late the call
/// was found before an action moved `now` (`applyAction`).
/// `M` is an `AlgorithmModel` (algorithms/model.hpp).
template <class M, class Q>
RATELIMIT_INLINE Decision applyStep(typename M::State& state, const Q& q, Tick now,
                                    std::int64_t cost, EachOf<M>* each = nullptr,
                                    Tick lateBefore = 0) {
    const Tick late = lateBefore + answerLate<M>(state, q, now);
    return stepLate<M>(state, q, now, cost, late, each);
}

/// What a call other than a step does to the key's state before its figures are answered: a
/// refund gives back up to `cost` (`Limiter::refund`), strikes go toward a penalty
/// (`Limiter::penalize`), each at the time a take would be answered at (`answerLate`, which
/// moves `now` there). Returns how late the call was: its figures are a zero cost's step at
/// that time, their waits counted from the call's own (`applyStep`'s `lateBefore`), as the
/// Redis script answers them. Offered only by the models that have them; the limiter asks no
/// other.
template <class M, class Q>
inline Tick applyAction(StepMode mode, typename M::State& state, const Q& q, Tick& now,
                        std::int64_t cost, const EachOf<M>* each = nullptr) {
    const Tick late = answerLate<M>(state, q, now);
    if constexpr (requires { M::refund(state, q, now, cost, *each); }) {
        if (mode == StepMode::kRefund && each != nullptr) {
            M::refund(state, q, now, cost, *each);  // under the call's tier
            return late;
        }
    }
    if constexpr (requires { M::refund(state, q, now, cost); }) {
        if (mode == StepMode::kRefund) {
            M::refund(state, q, now, cost);
        }
    }
    if constexpr (requires { M::penalize(state, q, now, cost); }) {
        if (mode == StepMode::kPenalize) {
            M::penalize(state, q, now, cost);
        }
    }
    return late;
}

/// The consumption a key carries into a new limit (`Limiter::setLimit`), in the new limit's
/// units: what it consumed under the old one (whole units, rounded up), plus what the new
/// capacity adds over the old, at most the new capacity; a key that consumed nothing meets the
/// new limit fresh. So right after a change a key has left at most what the old limit left it
/// and at most what the new limit leaves after its consumption: a change never admits more than
/// the stricter of the two until the key's windows roll over or its bucket refills
/// (docs/semantics.md, "Changing a limit"). The one home of that rule.
constexpr std::int64_t carriedConsumption(std::int64_t consumed, std::int64_t fromCapacity,
                                          std::int64_t toCapacity) noexcept {
    if (consumed <= 0) {
        return 0;
    }
    const std::int64_t added = toCapacity > fromCapacity ? toCapacity - fromCapacity : 0;
    const std::int64_t carried = satAdd(consumed, added);
    return carried < toCapacity ? carried : toCapacity;
}

/// A key's state made under the quota `from`, carried over to `to` at `now`
/// (`carriedConsumption`): measured with the model's own step (a zero cost's remaining), then
/// spent at `now` from a fresh state. A model with its own `convert` (a limit set: each member
/// on its own) uses that.
template <class M, class Q>
typename M::State convertedState(const typename M::State& state, const Q& from, const Q& to,
                                 Tick now) {
    if constexpr (requires { M::convert(state, from, to, now); }) {
        return M::convert(state, from, to, now);
    } else {
        if (sameQuota(from, to)) {
            return state;  // a limit changed and changed back: nothing to carry
        }
        typename M::State view = state;
        const Decision measured = M::step(view, from, now, 0);
        const std::int64_t target =
            carriedConsumption(from.capacity - measured.remaining, from.capacity, to.capacity);
        typename M::State carried{};
        if (target > 0) {
            (void)M::step(carried, to, now, target);
        }
        return carried;
    }
}

}  // namespace detail
}  // namespace v1
}  // namespace ratelimit
