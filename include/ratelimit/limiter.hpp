#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <ratelimit/algorithms/fixed_window.hpp>
#include <ratelimit/algorithms/leaky_bucket.hpp>
#include <ratelimit/algorithms/limit_set.hpp>
#include <ratelimit/algorithms/model.hpp>
#include <ratelimit/algorithms/penalty.hpp>
#include <ratelimit/algorithms/sliding_counter.hpp>
#include <ratelimit/algorithms/sliding_log.hpp>
#include <ratelimit/algorithms/token_bucket.hpp>
#include <ratelimit/clock.hpp>
#include <ratelimit/decision.hpp>
#include <ratelimit/detail/checked_math.hpp>
#include <ratelimit/detail/chrono.hpp>
#include <ratelimit/detail/inline.hpp>
#include <ratelimit/detail/lease_call.hpp>
#include <ratelimit/detail/ref_counted.hpp>
#include <ratelimit/detail/siphash.hpp>
#include <ratelimit/detail/throw.hpp>
#include <ratelimit/limit.hpp>
#include <ratelimit/listener.hpp>
#include <ratelimit/options.hpp>
#include <ratelimit/storage/memory.hpp>
#include <ratelimit/storage/storage.hpp>

namespace ratelimit {
inline namespace v1 {

/// A rate limiter: one algorithm (`Model`) over one store of per-key state (`Storage`) read
/// at the time of one `Clock`. Use the aliases `TokenBucket<>`, `FixedWindow<>`, … .
///
/// Thread safety: thread-safe; a limiter may be shared by any number of request threads.
/// Copies share the same storage table and clock.
template <AlgorithmModel Model, StoragePolicy<Model> Storage = MemoryStorage,
          ClockPolicy Clock = typename Storage::DefaultClock>
class Limiter {
    static_assert(!(Storage::kSharedAcrossHosts && detail::kHostLocalClock<Clock>),
                  "ratelimit: SteadyClock counts from an origin local to this host, so its times "
                  "mean nothing to other hosts sharing this storage; use the storage's default "
                  "clock (RedisServerClock) or SystemClock");
    static_assert(!detail::kStoreSideClock<Clock> || Storage::kSharedAcrossHosts,
                  "ratelimit: a store-side clock (RedisServerClock) is read by the store itself "
                  "and only works with RedisStorage; with MemoryStorage use SteadyClock (the "
                  "default), SystemClock or ManualClock");
    static_assert(detail::kNanosPerTick<Clock> > 0,
                  "ratelimit: the clock's duration must be a whole number of nanoseconds");

    /// The tick of the arithmetic: the clock's in memory, or the storage's own (Redis counts
    /// whole microseconds) when it has one.
    static constexpr std::int64_t kNanosPerTick = detail::kStorageNanosPerTick<Storage> > 0
                                                      ? detail::kStorageNanosPerTick<Storage>
                                                      : detail::kNanosPerTick<Clock>;

    /// The storage's table for this limiter's namespace.
    using Table = decltype(std::declval<const Storage&>().template table<Model>(
        std::declval<const LimiterOptions&>(), std::declval<const QuotaOf<Model>&>()));

    /// Whether the storage keeps a lease ledger for the model (`lease`).
    static constexpr bool kLeaseLedger =
        requires(const Table& t, std::string_view key, detail::TickSource now,
                 const detail::LeaseCall& call) {
        t.lease(key, now, call);
    };

public:
    using Options = LimiterOptions;
    using time_point = typename Clock::time_point;
    /// The algorithm, as its model.
    using ModelType = Model;
    /// What the limiter enforces: a `Limit`, or for a limit set one per member.
    using LimitType = LimitOf<Model>;
    /// A limit set's members' decisions, in the order of its members (`LimitSetModel`).
    using Decisions = detail::EachOf<Model>;

    /// Builds a limiter enforcing `limit` per key.
    /// Throws: `std::invalid_argument` naming the field when the options are out of range or the
    /// storage cannot hold the limit's arithmetic exactly (the message names the bound and the
    /// largest accepted value). Does no I/O.
    explicit Limiter(LimitType limit, Storage storage = Storage{}, Clock clock = Clock{},
                     Options options = Options{})
        : phasePeriodNs_(phasePeriodNs(limit)),
          storage_(std::move(storage)),
          clock_(std::move(clock)),
          options_(std::move(options)),
          dryRunRefusals_(options_.dryRun || options_.dryRunMembers != 0
                              ? detail::Ref<DryRunCount>::make()
                              : detail::Ref<DryRunCount>{}),
          table_(storage_.template table<Model>(options_, makeQuota(limit, options_))),
          listener_(options_.listener != nullptr ? &options_.listener->attach(options_.name)
                                                 : nullptr) {}

    /// Decides whether `key` may spend `cost` now, and spends it if so. The storage reads the
    /// clock so that calls on one key take effect in the order of their times (in memory: just
    /// before the key's lock; docs/semantics.md, "Concurrent calls").
    ///
    /// Any byte string is a key, the empty one included. `cost == 0` is a peek: allowed, nothing
    /// changes. A refusal consumes nothing. A cost above the limit is refused with
    /// `retryAfter == Decision::kNever`.
    /// Throws: `std::invalid_argument` for a negative cost; `std::bad_alloc`.
    /// Complexity: O(1) (sliding log: O(maxRunsPerKey)).
    Decision tryAcquire(std::string_view key, std::int64_t cost = 1) {
        Decision d = stepNow(key, cost, StepMode::kConsume);
        dryRun(d, StepMode::kConsume);
        notify(key, cost, d);
        return d;
    }

    /// `tryAcquire` at a time the caller already read from this limiter's clock (not offered
    /// for a store-side clock, whose time only the store reads). A time earlier than the key's
    /// last write by at most `LimiterOptions::lateCallTolerance` (1 s by default) is a late
    /// call, answered at that write; an earlier one is a clock step back (docs/semantics.md,
    /// "Late calls" and "Clock steps").
    Decision tryAcquire(std::string_view key, std::int64_t cost,
                        time_point now) requires(!detail::kStoreSideClock<Clock>) {
        Decision d = step(key, cost, now, StepMode::kConsume);
        dryRun(d, StepMode::kConsume);
        notify(key, cost, d);
        return d;
    }

    /// The decision `tryAcquire(key, cost)` would return now, without consuming anything.
    /// Thread safety: thread-safe, but the answer may be outdated at once.
    Decision peek(std::string_view key, std::int64_t cost = 1) {
        Decision d = stepNow(key, cost, StepMode::kPeek);
        dryRun(d, StepMode::kPeek);
        return d;
    }

    /// `peek` at a given time of this limiter's clock.
    Decision peek(std::string_view key, std::int64_t cost,
                  time_point now) requires(!detail::kStoreSideClock<Clock>) {
        Decision d = step(key, cost, now, StepMode::kPeek);
        dryRun(d, StepMode::kPeek);
        return d;
    }

    /// A limit set's `tryAcquire`, with every member's own decision in `each` (for the
    /// `RateLimit` fields of each member): after a refusal, a member that would have admitted
    /// reports its figures as they stand. A tiered model's (`TieredLimiter`): `each` names the
    /// tier, and holds a set's members' decisions after.
    Decision tryAcquire(std::string_view key, std::int64_t cost,
                        Decisions& each) requires detail::kReportsEach<Model> {
        Decision d = stepNow(key, cost, StepMode::kConsume, &each);
        dryRun(d, StepMode::kConsume);
        dryRunMembers(d, each);
        notify(key, cost, d);
        return d;
    }

    /// A limit set's `peek`, with every member's own decision in `each` (a tiered model's, as
    /// `tryAcquire`).
    Decision peek(std::string_view key, std::int64_t cost,
                  Decisions& each) requires detail::kReportsEach<Model> {
        Decision d = stepNow(key, cost, StepMode::kPeek, &each);
        dryRun(d, StepMode::kPeek);
        dryRunMembers(d, each);
        return d;
    }

    /// Gives back up to `cost` of what `key` has consumed, as its state stands now: for a call
    /// it admitted whose work did not happen (the upstream call failed, a later check
    /// refused). A bucket never holds more than its burst and no window's count goes below 0;
    /// the sliding log gives back its newest entries first (docs/semantics.md, "Refunds").
    /// Returns the key's decision after the refund, as `peek(key, 0)` would then (in dry-run
    /// admitted, and marked, as a peek is). A key with nothing consumed is left as it is.
    /// Throws: as `tryAcquire`.
    Decision refund(std::string_view key, std::int64_t cost = 1) requires RefundableModel<Model> {
        Decision d = stepNow(key, cost, StepMode::kRefund);
        dryRun(d, StepMode::kRefund);
        return d;
    }

    /// A limit set's `refund`: every member gives back up to `cost`, and fills its figures in
    /// `each` (a tiered model's, as `tryAcquire`).
    Decision refund(std::string_view key, std::int64_t cost, Decisions& each) requires(
        detail::kReportsEach<Model>&& RefundableModel<Model>) {
        Decision d = stepNow(key, cost, StepMode::kRefund, &each);
        dryRun(d, StepMode::kRefund);
        dryRunMembers(d, each);
        return d;
    }

    /// A penalized limiter's (`PenalizedModel`) strikes: gives `key` `strikes` strikes toward
    /// its penalty now, as many refusals would (after a failed login, say); the strike that
    /// completes the count blocks the key for the penalty's duration. A blocked key's block
    /// stays as it is. Returns the key's decision after it, as `peek(key, 0)` would then
    /// (refused while blocked; in dry-run admitted, and marked, as a peek is).
    /// Throws: as `tryAcquire`.
    Decision penalize(std::string_view key,
                      std::int64_t strikes = 1) requires detail::kIsPenalized<Model> {
        Decision d = stepNow(key, strikes, StepMode::kPenalize);
        dryRun(d, StepMode::kPenalize);
        return d;
    }

    /// A `LeasedLimiter`'s store call on `key`, where the storage keeps a lease ledger (Redis):
    /// the step of `call.cost`, heard by the listener as `tryAcquire`'s, and the calling host's
    /// entry in the key's ledger, at once (docs/semantics.md, "Token leases").
    /// Throws: as `tryAcquire`.
    Decision lease(std::string_view key, const detail::LeaseCall& call) requires kLeaseLedger {
        checkCost(call.cost);
        Decision d;
        if constexpr (detail::kStoreSideClock<Clock>) {
            d = table_.leaseAtStoreTime(key, call);
        } else {
            const auto read = [this, &key] {
                return detail::satSub(ticks(clock_.now()), phaseOf(key));
            };
            d = table_.lease(key, detail::TickSource(read, detail::kSteadyClock<Clock>), call);
        }
        notify(key, call.cost, d);
        return d;
    }

    /// Forgets everything about `key`: its next request meets a fresh limit.
    void reset(std::string_view key) { table_.reset(key); }

    /// Enforces `limit` from now on for every key, without a restart, while other threads go on
    /// calling (and for every limiter sharing this one's table: its copies, and limiters of the
    /// same name and model on the same storage). Each key keeps what it consumed, carried over
    /// at its next call and rounded toward fewer admissions: it has left at most what the old
    /// limit left it, and at most the new limit less what it consumed (docs/semantics.md,
    /// "Changing a limit"). In Redis each key's state records the limit it was written under, so
    /// hosts still on the old limit and hosts on the new one both carry it over.
    /// Throws: `std::invalid_argument` as the constructor for a bad limit, and when the limiter
    /// spreads its window resets (`LimiterOptions::spreadWindowResets`: each key's phase
    /// follows its period).
    /// A change is meant for a deploy or a reload of configuration, not for every request: the
    /// table keeps each limit it enforced (about 200 bytes) while it lives. Setting the limit
    /// in force changes nothing.
    void setLimit(LimitType limit) {
        if (options_.spreadWindowResets) {
            detail::throwInvalidArgument(
                "setLimit: not offered with LimiterOptions.spreadWindowResets (each key's window "
                "phase follows its period)");
        }
        const QuotaOf<Model> quota = makeQuota(limit, options_);
        if (!detail::sameQuotaOf<Model>(table_.quota(), quota)) {
            table_.setQuota(quota, [this] { return ticksNow(); });
        }
    }

    /// Dry-run only (`LimiterOptions::dryRun`, `dryRunMembers`): the calls to `tryAcquire` it
    /// admitted that enforcing would have refused (a dry-run member's refusal included), since
    /// it was made (shared by its copies); 0 otherwise.
    [[nodiscard]] std::uint64_t dryRunRefusals() const noexcept {
        return dryRunRefusals_ ? dryRunRefusals_->count.load(std::memory_order_relaxed) : 0;
    }

    /// The limit in force (`setLimit` may replace it at any time).
    [[nodiscard]] LimitType limit() const { return detail::limitOf<Model>(table_.quota()); }
    [[nodiscard]] const Options& options() const noexcept { return options_; }
    [[nodiscard]] const Clock& clock() const noexcept { return clock_; }
    [[nodiscard]] const Storage& storage() const noexcept { return storage_; }

private:
    /// What a dry-run limiter counts, shared by its copies.
    struct DryRunCount final : detail::RefCounted {
        std::atomic<std::uint64_t> count{0};
    };

    /// Dry-run: admits what enforcing refuses, and counts it with what a set's dry-run members
    /// would have refused (a branch on refusals alone otherwise).
    void dryRun(Decision& d, StepMode mode) noexcept {
        if ((!d.allowed || d.wouldRefuse) && dryRunRefusals_) [[unlikely]] {
            if (!d.allowed) {
                if (!options_.dryRun) {
                    return;  // an enforced member refused
                }
                d.allowed = true;
                d.wouldRefuse = true;
            }
            if (mode == StepMode::kConsume) {
                dryRunRefusals_->count.fetch_add(1, std::memory_order_relaxed);
            }
        }
    }

    /// Tells the listener, if there is one, of a consuming call's decision: a test of a null
    /// pointer on the inlined path, the event built out of line.
    void notify(std::string_view key, std::int64_t cost, const Decision& d) const noexcept {
        if (listener_ != nullptr) [[unlikely]] {
            notifyCold(key, cost, d);
        }
    }

    RATELIMIT_COLD void notifyCold(std::string_view key, std::int64_t cost,
                                   const Decision& d) const noexcept {
        listener_->onDecision(DecisionEvent{key, cost, d, outcomeOf(d)});
    }

    /// Dry-run: the members' refusals admit too, as the set's did.
    static void dryRunMembers(const Decision& d, Decisions& each) noexcept {
        if (d.wouldRefuse) [[unlikely]] {
            detail::forEachDecision(each, [](Decision& member) {
                member.wouldRefuse = member.wouldRefuse || !member.allowed;
                member.allowed = true;
            });
        }
    }

    /// `LimiterOptions::maxRunsPerKey` accepts 1 … 2^20.
    static constexpr std::int64_t kMaxRunsPerKey = std::int64_t{1} << 20;

    static QuotaOf<Model> makeQuota(const LimitType& limit, const Options& options) {
        if (options.maxRunsPerKey < 1 || options.maxRunsPerKey > kMaxRunsPerKey) {
            detail::throwInvalidArgument("LimiterOptions.maxRunsPerKey must be in 1..2^20 (got {})",
                                         {options.maxRunsPerKey});
        }
        if (options.lateCallTolerance < std::chrono::nanoseconds{0} ||
            options.lateCallTolerance > std::chrono::hours{1}) {
            detail::throwInvalidArgument(
                "LimiterOptions.lateCallTolerance must be in 0..1h (got {}ns)",
                {options.lateCallTolerance.count()});
        }
        if (!kPlainLimit && options.spreadWindowResets) {
            detail::throwInvalidArgument(
                "LimiterOptions.spreadWindowResets is offered for a single limit alone (a limit "
                "set's members' periods differ, and so would their phases; a penalty's spans "
                "are not windows)");
        }
        QuotaOf<Model> quota =
            QuotaOf<Model>::template make<Model>(limit, kNanosPerTick, options.maxRunsPerKey,
                                                 options.lateCallTolerance.count() / kNanosPerTick);
        if constexpr (kPlainLimit) {
            quota.keyTimeSpread = phased(options) ? phaseTicks(limit.period.count() - 1) : 0;
        }
        setDryRunMembers(quota, options.dryRunMembers);
        return quota;
    }

    /// Puts `mask`'s members of a limit set (a tier's set, each) in dry-run. Throws:
    /// `std::invalid_argument` for a member the set lacks, all of its members, or any member
    /// of a model that is not a set.
    template <class Q>
    static void setDryRunMembers(Q& quota, std::uint64_t mask) {
        if constexpr (requires { quota.tiers; }) {
            for (auto& tier : quota.tiers) {
                setDryRunMembers(tier, mask);
            }
        } else if constexpr (requires { quota.dryRunMembers; }) {
            const std::size_t size = quota.members.size();
            const std::uint64_t all =
                size >= 64 ? ~std::uint64_t{0} : (std::uint64_t{1} << size) - 1;
            if ((mask & ~all) != 0 || mask == all) {
                detail::throwInvalidArgument(
                    "LimiterOptions.dryRunMembers names members of a set of {} (bits 0..{}) and "
                    "leaves one enforced (got {}); LimiterOptions.dryRun puts the whole set in "
                    "dry-run",
                    {static_cast<std::int64_t>(size), static_cast<std::int64_t>(size - 1),
                     static_cast<std::int64_t>(mask)});
            }
            quota.setDryRunMembers(mask);
        } else if (mask != 0) {
            detail::throwInvalidArgument(
                "LimiterOptions.dryRunMembers is for a limit set's members (got {}); "
                "LimiterOptions.dryRun puts a single limit in dry-run",
                {static_cast<std::int64_t>(mask)});
        }
    }

    /// Whether the limiter enforces one `Limit` (not a limit set, nor a penalty around one):
    /// only its windows may be shifted per key.
    static constexpr bool kPlainLimit = std::is_same_v<LimitType, Limit>;

    static std::uint64_t phasePeriodNs(const LimitType& limit) noexcept {
        if constexpr (!kPlainLimit) {
            return 1;
        } else {
            return static_cast<std::uint64_t>(limit.period.count() > 0 ? limit.period.count() : 1);
        }
    }

    static void checkCost(std::int64_t cost) {
        if (cost < 0) {
            detail::throwInvalidArgument("cost must be >= 0 (got {})", {cost});
        }
    }

    /// Lets the storage read the clock (see `tryAcquire`): calls on one key then take effect
    /// in the order of their times.
    Decision stepNow(std::string_view key, std::int64_t cost, StepMode mode,
                     Decisions* each = nullptr) {
        checkCost(cost);
        const Tick phase = phaseOf(key);
        // A set's members' decisions (or a tier) are passed only for such models: a storage of
        // single models need not take them.
        const auto tail = [&](auto&& call) {
            if constexpr (detail::kReportsEach<Model>) {
                return call(each);
            } else {
                return call();
            }
        };
        if constexpr (detail::kStoreSideClock<Clock>) {
            return tail(
                [&](auto... e) { return table_.stepAtStoreTime(key, phase, cost, mode, e...); });
        } else {
            const auto read = [this, phase] { return detail::satSub(ticks(clock_.now()), phase); };
            const detail::TickSource now(read, detail::kSteadyClock<Clock>);
            // Not through `tail`, whose lambda takes `now` by reference: called here, and the
            // memory table's step inlined, the compiler sees the clock behind `now` and reads it
            // inline, where it was a call per check.
            if constexpr (detail::kReportsEach<Model>) {
                return table_.step(key, now, cost, mode, each);
            } else {
                return table_.step(key, now, cost, mode);
            }
        }
    }

    Decision step(std::string_view key, std::int64_t cost, time_point now, StepMode mode) {
        checkCost(cost);
        const auto fixed = [tick = detail::satSub(ticks(now), phaseOf(key))] { return tick; };
        return table_.step(key, detail::TickSource(fixed), cost, mode);
    }

    /// The time now in ticks: of this limiter's clock, or, where the store reads the time, of
    /// this host's system clock (what its fallback table steps at).
    [[nodiscard]] Tick ticksNow() const {
        if constexpr (detail::kStoreSideClock<Clock>) {
            return detail::hostTicks(kNanosPerTick);
        } else {
            return ticks(clock_.now());
        }
    }

    static Tick ticks(time_point t) noexcept {
        const auto sinceEpoch =
            std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
        return detail::floorDiv(sinceEpoch, kNanosPerTick);
    }

    /// Whether each key's windows are shifted by a phase of its own (windows only: a bucket
    /// has none to shift).
    static bool phased(const Options& options) noexcept {
        return !Model::kBucket && options.spreadWindowResets;
    }

    /// The key's window phase in ticks: a fixed (unseeded) hash, so every host and every
    /// restart agrees on it. A whole number of microseconds whatever the tick, so memory and
    /// Redis (whole microseconds) shift a key's windows by exactly the same time.
    [[nodiscard]] Tick phaseOf(std::string_view key) const noexcept {
        if constexpr (!kPlainLimit) {
            return 0;
        } else {
            return phased(options_) ? phaseOfKey(key) : 0;
        }
    }

    [[nodiscard]] Tick phaseOfKey(std::string_view key) const noexcept {
        const detail::Digest128 d =
            detail::SipHash128(0x7261746531696d69ULL, 0x7068617365000000ULL)(key);
        return phaseTicks(static_cast<Tick>(d.low % phasePeriodNs_));
    }

    /// The phase, in ticks, of a key whose hash modulo the period (in ns) is `offsetNs`: rounded
    /// up to whole microseconds, so it may exceed the period by up to a microsecond less a
    /// nanosecond, and the largest is that of `period − 1`.
    static Tick phaseTicks(Tick offsetNs) noexcept {
        const Tick phaseUs = detail::ceilDiv(offsetNs, 1000);
        return detail::ceilDiv(phaseUs * 1000, kNanosPerTick);
    }

    /// The period each key's window phase is drawn from (`spreadWindowResets`; a limiter that
    /// spreads them keeps its period).
    std::uint64_t phasePeriodNs_;
    Storage storage_;
    Clock clock_;
    Options options_;
    detail::Ref<DryRunCount> dryRunRefusals_;  ///< dry-run only
    Table table_;
    /// What `LimiterOptions::listener` attached for this limiter; null without one.
    DecisionListener* listener_;
};

// The algorithms by name: each alias fixes the model and takes `Limiter`'s storage and clock
// (`P`) with their defaults, so `TokenBucket<>` is in memory on the steady clock,
// `TokenBucket<RedisStorage>` reads Redis server time, `TokenBucket<MemoryStorage, ManualClock>`
// runs on a hand-driven clock. `Gcra` is another name for `LeakyBucket`; each model's header
// says what it admits. (One line each, as the table they are.)
// clang-format off
template <class... P> using FixedWindow = Limiter<FixedWindowModel, P...>;
template <class... P> using SlidingLog = Limiter<SlidingLogModel, P...>;
template <class... P> using SlidingCounter = Limiter<SlidingCounterModel, P...>;
template <class... P> using TokenBucket = Limiter<TokenBucketModel, P...>;
template <class... P> using LeakyBucket = Limiter<LeakyBucketModel, P...>;
template <class... P> using Gcra = Limiter<GcraModel, P...>;
// clang-format on

}  // namespace v1
}  // namespace ratelimit
