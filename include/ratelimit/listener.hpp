#pragma once

// Decision listeners: what a limiter tells an observer about each request it decides
// (docs/semantics.md, "Listeners"). Kept apart from the counters and summaries that listen
// (<ratelimit/metrics/decision_metrics.hpp>), so a limiter without a listener compiles and
// runs as before.

#include <cstdint>
#include <string_view>

#include <ratelimit/decision.hpp>
#include <ratelimit/memory_options.hpp>
#include <ratelimit/store_error.hpp>

namespace ratelimit {
inline namespace v1 {

/// What became of one request, each decision exactly one of them.
enum class DecisionOutcome : std::uint8_t {
    kAllowed,        ///< admitted, its cost consumed
    kRefused,        ///< refused by the limit (`Decision::policy` names the binding member)
    kDegraded,       ///< the store failed and the failure policy answered (either way)
    kDryRunRefused,  ///< admitted in dry-run, where enforcing would have refused
};

/// The outcome `d` reports: degraded first (whatever the failure policy answered), then a
/// dry-run's would-be refusal, then allowed or refused.
[[nodiscard]] constexpr DecisionOutcome outcomeOf(const Decision& d) noexcept {
    if (d.degraded) {
        return DecisionOutcome::kDegraded;
    }
    if (d.wouldRefuse) {
        return DecisionOutcome::kDryRunRefused;
    }
    return d.allowed ? DecisionOutcome::kAllowed : DecisionOutcome::kRefused;
}

/// One request's decision, as a listener hears it. Every view lives for the call alone.
struct DecisionEvent {
    std::string_view key;  ///< the key as the caller passed it (any bytes)
    std::int64_t cost = 0;
    const Decision& decision;
    DecisionOutcome outcome = DecisionOutcome::kAllowed;
};

/// Hears the decisions of the limiters built with it (`LimiterOptions::listener`): every
/// consuming call (`tryAcquire`, a limit set's and a tier's included); not peeks, refunds or
/// strikes, which decide no request. It also hears the health of the storages those limiters
/// use (`onStoreEvent`, `onMemoryEvent`): each change once, however many of its limiters share
/// the storage, for as long as one of them (or a copy) lives.
///
/// A listener is called on the calling thread, after the decision is made and outside every
/// lock of the limiter, so it may call the limiter again. `onDecision` is `noexcept`: a
/// listener that throws ends the program (`std::terminate`), as an exception cannot be
/// allowed to turn an answered request into a failed one. It must outlive every limiter
/// built with it (they keep a pointer, shared by their copies).
/// Thread safety: called from every thread that calls the limiters, concurrently.
class DecisionListener {
public:
    DecisionListener() = default;
    virtual ~DecisionListener() = default;
    DecisionListener(const DecisionListener&) = delete;
    DecisionListener& operator=(const DecisionListener&) = delete;
    DecisionListener(DecisionListener&&) = delete;
    DecisionListener& operator=(DecisionListener&&) = delete;

    /// Called once by each limiter built with this listener, from its constructor, with its
    /// name (`LimiterOptions::name`; a route rule's limiter's name is the rule's): the listener
    /// that limiter then calls. A listener that keeps figures per policy returns one of its own
    /// here, so the hot path never looks a name up. Default: this one.
    virtual DecisionListener& attach(std::string_view policy) {
        (void)policy;
        return *this;
    }

    /// One decision (see the class comment).
    virtual void onDecision(const DecisionEvent& event) noexcept = 0;

    /// A Redis storage's calls started failing, or succeed again (`StoreEvent`): the same
    /// changes `RedisStorageOptions::onEvent` hears, told on the calling thread outside every
    /// lock. Default: nothing.
    virtual void onStoreEvent(const StoreEvent& event) noexcept { (void)event; }

    /// A memory table (named by its limiters' name) started or stopped answering new keys from
    /// shared spill entries (`MemoryStorageOptions::onEvent` hears the same). Default: nothing.
    virtual void onMemoryEvent(MemoryEvent event, std::string_view table) noexcept {
        (void)event;
        (void)table;
    }
};

}  // namespace v1
}  // namespace ratelimit
