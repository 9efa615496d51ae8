#pragma once

#include <cstdint>
#include <string>

#include <ratelimit/detail/chrono.hpp>

namespace ratelimit {
inline namespace v1 {

class DecisionListener;

/// Whether a step spends the cost it admits (`tryAcquire`), only reports (`peek`), gives back
/// what an admitted call spent (`refund`), or gives the cost as strikes toward a penalty
/// (`penalize`). The Redis script reads the same numbers (`ARGV[3]`).
enum class StepMode : std::uint8_t { kPeek, kConsume, kRefund, kPenalize };

/// What a limiter answers when its store fails (a shared store such as Redis; the memory
/// storage never fails). Every answer it makes is marked `Decision::degraded`.
enum class FailurePolicy {
    /// Allowed, `remaining = limit − cost`, `resetAfter = 0`: availability first.
    kFailOpen,
    /// Refused, `retryAfter` = the time until the store is probed again: protection first.
    kFailClosed,
    /// Decided by an in-process memory table on this host alone: N hosts falling back admit up
    /// to N× the limit; nothing is reconciled when the store comes back.
    kFallBackToMemory,
    /// Throws `ratelimit::StoreException`.
    kThrow,
};

/// Options of a `Limiter` beyond its limit, storage and clock. Fields only ever get added at
/// the end.
struct LimiterOptions {
    /// The limiter's namespace in its storage: limiters sharing a storage need distinct names
    /// (or the same name and limit, to share keys). With Redis it is part of every key and
    /// must not contain `{` or `}`.
    std::string name = "default";
    /// Window algorithms only: shift each key's windows by a phase derived from the key, so
    /// that all keys do not reset at the same instant. Off: windows start at multiples of the
    /// period from the clock's epoch (UTC for `SteadyClock`, `SystemClock` and Redis time).
    bool spreadWindowResets = false;
    /// Sliding log only: runs of (time, count) kept per key; beyond it the two oldest merge
    /// (conservatively). 1 … 2^20; default 64.
    std::int64_t maxRunsPerKey = 64;
    /// Shared stores only: the answer when the store fails.
    FailurePolicy failurePolicy = FailurePolicy::kFallBackToMemory;
    /// A call whose time is earlier than the key's last write by at most this is a late call —
    /// its caller read the clock before another caller wrote, or its host's clock is a little
    /// behind — not a clock that stepped back: it is answered at the last write, so no interval
    /// is credited twice, and its waits count from its own time (so they exceed the usual
    /// bounds by up to its lateness). Earlier calls are clock steps and rebase the key. The
    /// default, 1 s, is several times the longest delay between reading the clock and the
    /// call that threads preempted on a loaded machine show, and above the skew of hosts
    /// whose clocks NTP keeps. 0 makes every step back, however small, a clock step that
    /// rebases the key. 0 … 1 h.
    std::chrono::nanoseconds lateCallTolerance = std::chrono::seconds{1};
    /// Dry-run (shadow mode): the limiter decides as usual but admits what it would refuse,
    /// marking the decision `Decision::wouldRefuse` and counting it
    /// (`Limiter::dryRunRefusals`), so a new limit can be watched before it is enforced. A
    /// refusal consumes nothing, so every key's state is the one enforcing would have.
    /// Default off.
    bool dryRun = false;
    /// A limit set's members in dry-run, bit `i` for member `i` (0: none, the default): such a
    /// member decides and reports its decision in the members' decisions, marked `wouldRefuse`
    /// when it would refuse, but never refuses the set; an admitted set whose dry-run member
    /// would have refused is marked `wouldRefuse` and counted (`Limiter::dryRunRefusals`). Some
    /// member must stay enforced (`dryRun` puts the whole set in dry-run).
    std::uint64_t dryRunMembers = 0;
    /// Hears every request's decision (<ratelimit/listener.hpp>; the ready one, with counters,
    /// top offenders and alerts, is `DecisionMetrics`): attached once, at construction, and
    /// called on the calling thread. Not owned: it must outlive the limiter and its copies.
    /// None by default, and then a call pays one test of a null pointer.
    DecisionListener* listener = nullptr;
};

}  // namespace v1
}  // namespace ratelimit
