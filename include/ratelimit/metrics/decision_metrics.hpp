#pragma once

// The ready decision listener: counters per policy, early retries, top offenders and attack
// alerts, and the store's health (docs/semantics.md, "Listeners"). Exported to Prometheus by
// <ratelimit/metrics/prometheus.hpp>.

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include <ratelimit/decision.hpp>
#include <ratelimit/detail/checked_math.hpp>
#include <ratelimit/detail/chrono.hpp>
#include <ratelimit/detail/throw.hpp>
#include <ratelimit/listener.hpp>
#include <ratelimit/memory_options.hpp>
#include <ratelimit/metrics/refusal_summary.hpp>
#include <ratelimit/store_error.hpp>

namespace ratelimit {
inline namespace v1 {

/// An attack alert: one key's refusals within the window crossed the threshold (`started`),
/// or fell back below it.
struct AttackAlert {
    std::string_view policy;
    std::string_view key;  ///< its first `RefusalSummaryOptions::maxKeyBytes` bytes
    bool started = true;
    /// Its refusals in the window: certainly made (`Offender::guaranteed`) when it starts,
    /// at most (`Offender::count`) when it ends.
    std::int64_t refusals = 0;
};

/// Options of a `DecisionMetrics`. Fields only ever get added at the end.
struct DecisionMetricsOptions {
    /// The time the summaries count by; default: `std::chrono::steady_clock` (a test passes
    /// its `ManualClock`'s time). Read on refusals only.
    std::function<std::chrono::nanoseconds()> clock{};
    /// The top offenders' window and memory; the alerts count over the same window.
    RefusalSummaryOptions offenders{};
    /// Keys whose last refusal's `retryAfter` is remembered, per policy (1 … 2^24): a refused
    /// key whose slot another refused key took since is not counted as an early retry.
    std::size_t earlyRetrySlots = 4096;
    /// An alert starts when one key's refusals certainly made within the window reach this
    /// (1 … 2^48), and ends when its refusals at most fall below it. 0: no alerts.
    std::int64_t alertThreshold = 100;
    /// Hears alerts: on the calling thread, outside every lock, once per episode. Must not
    /// throw (an exception ends the program, as from any listener).
    std::function<void(const AttackAlert&)> onAlert{};
    /// Keys in alert at once, per policy (1 … 2^20); beyond them no new alert starts until one
    /// ends (`PolicyReport::alertsDropped` counts them).
    std::size_t maxAlerting = 1024;

    /// Throws: `std::invalid_argument` naming the field.
    void validate() const {
        offenders.validate("DecisionMetricsOptions.offenders");
        if (earlyRetrySlots < 1 || earlyRetrySlots > kMaxEarlyRetrySlots) {
            detail::throwInvalidArgument(
                "DecisionMetricsOptions.earlyRetrySlots must be in 1..2^24 (got {})",
                {static_cast<std::int64_t>(earlyRetrySlots)});
        }
        if (alertThreshold < 0 || alertThreshold > kMaxAlertThreshold) {
            detail::throwInvalidArgument(
                "DecisionMetricsOptions.alertThreshold must be in 0..2^48 (got {})",
                {alertThreshold});
        }
        if (maxAlerting < 1 || maxAlerting > kMaxAlerting) {
            detail::throwInvalidArgument(
                "DecisionMetricsOptions.maxAlerting must be in 1..2^20 (got {})",
                {static_cast<std::int64_t>(maxAlerting)});
        }
    }

    static constexpr std::size_t kMaxEarlyRetrySlots = std::size_t{1} << 24;
    static constexpr std::int64_t kMaxAlertThreshold = std::int64_t{1} << 48;
    static constexpr std::size_t kMaxAlerting = std::size_t{1} << 20;
};

/// A policy's decisions since the metrics were made.
struct PolicyCounts {
    std::uint64_t allowed = 0;
    std::uint64_t refused = 0;
    std::uint64_t degraded = 0;
    std::uint64_t dryRunRefused = 0;
    /// Refusals of a key before the `retryAfter` of its previous refusal had passed.
    std::uint64_t retriedEarly = 0;
    /// Refusals that started a penalty's block (`Decision::penaltyStarted`).
    std::uint64_t penaltiesStarted = 0;

    [[nodiscard]] std::uint64_t decisions() const noexcept {
        return allowed + refused + degraded + dryRunRefused;
    }
    friend bool operator==(const PolicyCounts&, const PolicyCounts&) = default;
};

/// One policy's figures at one time (`DecisionMetrics::report`).
struct PolicyReport {
    std::string policy;
    PolicyCounts counts;
    TopOffenders topOffenders;
    std::vector<std::string> alerting;  ///< keys in alert now
    std::uint64_t alertsDropped = 0;    ///< alerts not started: `maxAlerting` keys were in alert
};

/// The health of the limiters' storages, as their events told it
/// (`DecisionMetrics::onStoreEvent`, `onMemoryEvent`).
struct StoreHealthReport {
    bool healthy = true;
    std::uint64_t failingEpisodes = 0;  ///< times it went from healthy to failing
    std::string lastError;              ///< the message of the last episode's first failure
    std::vector<std::string> spilling;  ///< memory tables whose new keys share spill entries
};

/// The ready listener (`LimiterOptions::listener`): per policy (a limiter's name, or a route
/// rule's), lock-free counts of each outcome, early retries, the keys refused most over a
/// sliding window (`RefusalSummary`, with its error bound) and attack alerts; and the health of
/// the storages its limiters use, which they tell it (`onStoreEvent`, `onMemoryEvent`). An allowed
/// call adds one to a counter its thread alone writes (no atomic read-modify-write: about 2 ns); a
/// refusal also reads the clock and takes its policy's lock for the summaries (a few hundred
/// nanoseconds).
/// Memory: fixed per policy (the summary's bound, plus 16 bytes per early-retry slot).
/// Thread safety: thread-safe. It must outlive the limiters built with it.
class DecisionMetrics final : public DecisionListener {
public:
    /// Throws: `std::invalid_argument` naming the field.
    explicit DecisionMetrics(DecisionMetricsOptions options = {})
        : options_(validated(std::move(options))) {
        if (!options_.clock) {
            options_.clock = [] { return std::chrono::steady_clock::now().time_since_epoch(); };
        }
    }
    DecisionMetrics(const DecisionMetrics&) = delete;
    DecisionMetrics& operator=(const DecisionMetrics&) = delete;
    DecisionMetrics(DecisionMetrics&&) = delete;
    DecisionMetrics& operator=(DecisionMetrics&&) = delete;
    ~DecisionMetrics() override = default;

    /// The policy `name`'s listener, made on first use; limiters of one name share it.
    DecisionListener& attach(std::string_view name) override { return policy(name); }

    /// A decision heard without a policy (a direct call) counts under the policy "".
    void onDecision(const DecisionEvent& event) noexcept override { policy("").onDecision(event); }

    /// A Redis storage's change of health, heard from the storage of every limiter built with
    /// this listener (or fed by hand from `RedisStorageOptions::onEvent`).
    void onStoreEvent(const StoreEvent& event) noexcept override {
        const std::lock_guard guard(healthLock_);
        if (event.health == StoreEvent::Health::kFailing) {
            if (health_.healthy) {
                ++health_.failingEpisodes;
            }
            health_.healthy = false;
            keepLastError(event.message);
        } else {
            health_.healthy = true;
        }
    }

    /// A memory table's spill starting or ending, heard as `onStoreEvent`.
    void onMemoryEvent(MemoryEvent event, std::string_view table) noexcept override {
        const std::lock_guard guard(healthLock_);
        auto& spilling = health_.spilling;
        const auto found = std::find(spilling.begin(), spilling.end(), table);
        if (event == MemoryEvent::kSpillEnded && found != spilling.end()) {
            spilling.erase(found);
        } else if (event == MemoryEvent::kSpillStarted && found == spilling.end()) {
            try {
                spilling.emplace_back(table);
            } catch (const std::bad_alloc&) {
                // Out of memory for the name: the report misses this table's spill.
            }
        }
    }

    /// The counts of `name` (zeros for a policy never attached).
    [[nodiscard]] PolicyCounts counts(std::string_view name) const {
        const Policy* p = find(name);
        return p != nullptr ? p->counts() : PolicyCounts{};
    }

    /// Every policy's figures now, with its `top` most refused keys, in the order the policies
    /// were attached. Ends the alerts whose keys' refusals fell below the threshold.
    [[nodiscard]] std::vector<PolicyReport> report(std::size_t top = 10) {
        std::vector<Policy*> all;
        {
            const std::lock_guard guard(policiesLock_);
            all.reserve(policies_.size());
            for (const auto& p : policies_) {
                all.push_back(p.get());
            }
        }
        std::vector<PolicyReport> reports;
        reports.reserve(all.size());
        for (Policy* p : all) {
            reports.push_back(p->report(top));
        }
        return reports;
    }

    [[nodiscard]] StoreHealthReport storeHealth() const {
        const std::lock_guard guard(healthLock_);
        return health_;
    }

    [[nodiscard]] const DecisionMetricsOptions& options() const noexcept { return options_; }

private:
    void keepLastError(std::string_view message) noexcept {
        try {
            health_.lastError = message;
        } catch (const std::bad_alloc&) {
            health_.lastError.clear();  // out of memory for the message: none rather than stale
        }
    }

    static DecisionMetricsOptions validated(DecisionMetricsOptions options) {
        options.validate();
        return options;
    }

    /// One policy's listener: counters in stripes, and the refusal summaries under a lock.
    /// A thread claims the stripe its id picks, once, and from then on is its one writer, so
    /// it adds with a plain load and store: a lock-prefixed add cost an admission 6 ns more
    /// (bench/README.md, "Listeners"). A thread whose stripe another thread holds adds to the
    /// shared stripe atomically. A stripe stays with its thread's id: a later thread given the
    /// same id (after the first has exited, which the thread library orders before the new
    /// one's start) goes on writing it alone.
    class Policy final : public DecisionListener {
    public:
        Policy(std::string name, const DecisionMetricsOptions& options)
            : name_(std::move(name)),
              options_(options),
              offenders_(options.offenders),
              retryAt_(options.earlyRetrySlots) {}
        Policy(const Policy&) = delete;
        Policy& operator=(const Policy&) = delete;
        Policy(Policy&&) = delete;
        Policy& operator=(Policy&&) = delete;
        ~Policy() override = default;

        void onDecision(const DecisionEvent& event) noexcept override {
            count(static_cast<std::size_t>(event.outcome));
            if (event.outcome == DecisionOutcome::kRefused) {
                if (event.decision.penaltyStarted) {
                    penaltiesStarted_.fetch_add(1, std::memory_order_relaxed);
                }
                refused(event);
            }
        }

        [[nodiscard]] const std::string& name() const noexcept { return name_; }

        [[nodiscard]] PolicyCounts counts() const noexcept {
            std::array<std::uint64_t, kOutcomes> sums{};
            const auto add = [&sums](const Stripe& s) {
                for (std::size_t i = 0; i < kOutcomes; ++i) {
                    sums.at(i) += s.outcomes.at(i).load(std::memory_order_relaxed);
                }
            };
            for (const Stripe& s : owned_) {
                add(s);
            }
            add(shared_);
            return PolicyCounts{sums[0],
                                sums[1],
                                sums[2],
                                sums[3],
                                retriedEarly_.load(std::memory_order_relaxed),
                                penaltiesStarted_.load(std::memory_order_relaxed)};
        }

        PolicyReport report(std::size_t top) {
            const std::chrono::nanoseconds now = options_.clock();
            PolicyReport r;
            r.policy = name_;
            r.counts = counts();
            std::vector<Pending> ended;
            {
                const std::lock_guard guard(lock_);
                r.topOffenders = offenders_.top(top, now);
                endAlerts(now, ended);
                r.alerting.reserve(alerting_.size());
                for (const auto& entry : alerting_) {
                    r.alerting.push_back(entry.second);
                }
                r.alertsDropped = alertsDropped_;
            }
            fire(ended);
            return r;
        }

    private:
        static constexpr std::size_t kOutcomes = 4;
        static constexpr int kStripeBits = 4;
        static constexpr std::size_t kStripes = std::size_t{1} << kStripeBits;

        struct alignas(64) Stripe {
            std::atomic<std::thread::id> owner{};  ///< its one writer; none yet: `id{}`
            std::array<std::atomic<std::uint64_t>, kOutcomes> outcomes{};
        };

        /// Where a key's previous refusal said to retry, by its digest.
        struct RetryAt {
            std::uint64_t id = 0;
            std::int64_t at = 0;  ///< ns; 0 with no refusal remembered
        };

        /// An alert to tell once the lock is let go.
        struct Pending {
            std::string key;
            bool started = true;
            std::int64_t refusals = 0;
        };

        /// Adds one to outcome `i` (see the class comment).
        void count(std::size_t i) noexcept {
            const std::thread::id me = std::this_thread::get_id();
            const std::uint64_t hash = std::hash<std::thread::id>{}(me);
            Stripe& s = owned_[(hash * kSpread) >> (kWordBits - kStripeBits)];
            std::thread::id owner = s.owner.load(std::memory_order_relaxed);
            if (owner != me &&
                (owner != std::thread::id{} ||
                 !s.owner.compare_exchange_strong(owner, me, std::memory_order_relaxed))) {
                shared_.outcomes.at(i).fetch_add(1, std::memory_order_relaxed);
                return;
            }
            std::atomic<std::uint64_t>& c = s.outcomes.at(i);
            c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
        }

        void refused(const DecisionEvent& event) noexcept {
            std::vector<Pending> pending;
            try {
                const std::chrono::nanoseconds now = options_.clock();
                const std::uint64_t id = RefusalSummary::keyId(event.key);
                const std::lock_guard guard(lock_);
                countEarlyRetry(id, now, event.decision);
                const bool slid = offenders_.add(event.key, id, now);
                if (slid) {
                    endAlerts(now, pending);
                }
                startAlert(event.key, id, now, pending);
            } catch (...) {
                // Out of memory for a summary's key: the counts above stand; the summaries
                // miss this refusal.
                return;
            }
            fire(pending);
        }

        void countEarlyRetry(std::uint64_t id, std::chrono::nanoseconds now, const Decision& d) {
            RetryAt& slot = retryAt_[id % retryAt_.size()];
            if (slot.id == id && slot.at != 0 && now.count() < slot.at) {
                retriedEarly_.fetch_add(1, std::memory_order_relaxed);
            }
            slot.id = id;
            slot.at =
                d.never() ? detail::kInt64Max : detail::satAdd(now.count(), d.retryAfter.count());
        }

        void startAlert(std::string_view key, std::uint64_t id, std::chrono::nanoseconds now,
                        std::vector<Pending>& pending) {
            if (options_.alertThreshold == 0 || alerting_.contains(id)) {
                return;
            }
            const std::int64_t certain = offenders_.bounds(id, now).second;
            if (certain < options_.alertThreshold) {
                return;
            }
            if (alerting_.size() >= options_.maxAlerting) {
                ++alertsDropped_;
                return;
            }
            const std::string shown(key.substr(0, options_.offenders.maxKeyBytes));
            alerting_.emplace(id, shown);
            pending.push_back(Pending{shown, true, certain});
        }

        void endAlerts(std::chrono::nanoseconds now, std::vector<Pending>& pending) {
            for (auto it = alerting_.begin(); it != alerting_.end();) {
                const std::int64_t atMost = offenders_.bounds(it->first, now).first;
                if (atMost < options_.alertThreshold) {
                    pending.push_back(Pending{std::move(it->second), false, atMost});
                    it = alerting_.erase(it);
                } else {
                    ++it;
                }
            }
        }

        void fire(const std::vector<Pending>& pending) const noexcept {
            if (!options_.onAlert) {
                return;
            }
            for (const Pending& p : pending) {
                options_.onAlert(AttackAlert{name_, p.key, p.started, p.refusals});
            }
        }

        static constexpr int kWordBits = 64;
        static constexpr std::uint64_t kSpread = 0x9e3779b97f4a7c15ULL;  // 2^64 / golden ratio

        std::string name_;
        const DecisionMetricsOptions& options_;
        std::array<Stripe, kStripes> owned_{};
        Stripe shared_;
        std::atomic<std::uint64_t> retriedEarly_{0};
        std::atomic<std::uint64_t> penaltiesStarted_{0};
        std::mutex lock_;
        RefusalSummary offenders_;                                 // guarded by lock_
        std::vector<RetryAt> retryAt_;                             // guarded by lock_
        std::unordered_map<std::uint64_t, std::string> alerting_;  // guarded by lock_
        std::uint64_t alertsDropped_ = 0;                          // guarded by lock_
    };

    Policy& policy(std::string_view name) {
        const std::lock_guard guard(policiesLock_);
        for (const auto& p : policies_) {
            if (p->name() == name) {
                return *p;
            }
        }
        return *policies_.emplace_back(std::make_unique<Policy>(std::string(name), options_));
    }

    [[nodiscard]] const Policy* find(std::string_view name) const {
        const std::lock_guard guard(policiesLock_);
        for (const auto& p : policies_) {
            if (p->name() == name) {
                return p.get();
            }
        }
        return nullptr;
    }

    DecisionMetricsOptions options_;
    mutable std::mutex policiesLock_;
    std::vector<std::unique_ptr<Policy>> policies_;  // guarded by policiesLock_
    mutable std::mutex healthLock_;
    StoreHealthReport health_;  // guarded by healthLock_
};

}  // namespace v1
}  // namespace ratelimit
