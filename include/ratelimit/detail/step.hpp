#pragma once

// How one step answers, and the late-call rule every storage runs a model's step under. Below
// the models: they build their decisions here, and the storages' internals apply their steps
// through `applyStep`.

#include <cstdint>
#include <type_traits>

#include <ratelimit/decision.hpp>
#include <ratelimit/detail/checked_math.hpp>
#include <ratelimit/detail/chrono.hpp>
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
    struct type {};
};
template <class M>
requires requires { typename M::Decisions; }
struct EachSelect<M> {
    using type = typename M::Decisions;
};
template <class M>
using EachOf = typename EachSelect<M>::type;

/// A late call's waits count from its own time, `late` ticks before the time it was answered
/// at.
inline void shiftLate(Decision& d, Tick late, std::int64_t nanosPerTick) noexcept {
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

/// Runs one model step with the late-call rule every storage applies (docs/semantics.md, "Late
/// calls"): a call earlier than the key's last write by at most `lateTolerance` comes from a
/// caller that read the clock just before another caller wrote (or from a host whose clock is
/// slightly behind), not from a clock that stepped back. It is answered at the last write — no
/// rebase, so the interval is never credited twice — and its waits count from its own time.
/// Redis applies the same rule in its script (detail/redis_script.hpp). A limit set's members'
/// decisions go to `each` when it is given.
/// `M` is an `AlgorithmModel` (algorithms/model.hpp).
template <class M, class Q>
inline Decision applyStep(typename M::State& state, const Q& q, Tick now, std::int64_t cost,
                          EachOf<M>* each = nullptr) {
    const Tick last = M::lastWrite(state);
    Tick late = 0;
    if (now < last && satSub(last, now) <= q.lateTolerance) {
        late = last - now;
        now = last;
    }
    if constexpr (!std::is_empty_v<EachOf<M>>) {
        if (each != nullptr) {
            Decision d = M::step(state, q, now, cost, *each);
            for (Decision& member : *each) {
                shiftLate(member, late, q.nanosPerTick);
            }
            shiftLate(d, late, q.nanosPerTick);
            return d;
        }
    }
    Decision d = M::step(state, q, now, cost);
    shiftLate(d, late, q.nanosPerTick);
    return d;
}

}  // namespace detail
}  // namespace v1
}  // namespace ratelimit
