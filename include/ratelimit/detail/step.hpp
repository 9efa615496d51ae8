#pragma once

// How one step answers, and the late-call rule every storage runs a model's step under. Below
// the models: they build their decisions here, and the storages' internals apply their steps
// through `applyStep`.

#include <cstdint>

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

/// Runs one model step with the late-call rule every storage applies (docs/semantics.md, "Late
/// calls"): a call earlier than the key's last write by at most `lateTolerance` comes from a
/// caller that read the clock just before another caller wrote (or from a host whose clock is
/// slightly behind), not from a clock that stepped back. It is answered at the last write — no
/// rebase, so the interval is never credited twice — and its waits count from its own time.
/// Redis applies the same rule in its script (detail/redis_script.hpp).
/// `M` is an `AlgorithmModel` (algorithms/model.hpp).
template <class M>
inline Decision applyStep(typename M::State& state, const Quota& q, Tick now, std::int64_t cost) {
    const Tick last = M::lastWrite(state);
    Tick late = 0;
    if (now < last && satSub(last, now) <= q.lateTolerance) {
        late = last - now;
        now = last;
    }
    Decision d = M::step(state, q, now, cost);
    if (late > 0) {
        const std::chrono::nanoseconds shift{late * q.nanosPerTick};
        if (!d.never() && d.retryAfter.count() > 0) {
            d.retryAfter += shift;
        }
        if (d.resetAfter.count() > 0) {
            d.resetAfter += shift;
        }
    }
    return d;
}

}  // namespace detail
}  // namespace v1
}  // namespace ratelimit
