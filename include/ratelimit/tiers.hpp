#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <ratelimit/algorithms/model.hpp>
#include <ratelimit/algorithms/tiered.hpp>
#include <ratelimit/clock.hpp>
#include <ratelimit/decision.hpp>
#include <ratelimit/detail/throw.hpp>
#include <ratelimit/limiter.hpp>
#include <ratelimit/options.hpp>
#include <ratelimit/storage/memory.hpp>
#include <ratelimit/storage/storage.hpp>

namespace ratelimit {
inline namespace v1 {

/// A named tier's limit (`TieredLimiter::Tier`).
template <class L>
struct NamedTier {
    std::string name;  ///< 1 … 64 bytes, distinct among the tiers
    L limit;
};

/// Tiers resolved per key: named limits (or limit sets) of one model, registered and validated
/// up front, one of which judges each call, chosen by the caller per key (its resolver: an API
/// key's plan, say). For example free: 30 per minute with a burst of 10 and 1,000 a day; pro:
/// 300/min, burst 50, 50,000 a day:
///
///     using Plan = TieredLimiter<LimitSet<TokenBucketModel, FixedWindowModel>>;
///     Plan plans({{"free", {Limit::perMinute(30).withBurst(10), Limit::perDay(1000)}},
///                 {"pro", {Limit::perMinute(300).withBurst(50), Limit::perDay(50000)}}});
///     const Plan::TierId pro = plans.tier("pro");  // at setup: throws for an unknown name
///     plans.tryAcquire(userId, pro);
///
/// A key whose tier changes keeps what it consumed: its next call carries it over to the new
/// tier's limit, toward fewer admissions, never more (docs/semantics.md, "Tiers"), in memory
/// and in Redis. The hot path parses nothing and throws only for a tier id it never handed out.
///
/// Thread safety: thread-safe, as `Limiter`; copies share the same table.
template <AlgorithmModel Model, StoragePolicy<TieredModel<Model>> Storage = MemoryStorage,
          ClockPolicy Clock = typename Storage::DefaultClock>
class TieredLimiter {
    using Tiered = TieredModel<Model>;

public:
    /// One tier's limit: a `Limit`, or for a limit set one per member.
    using LimitType = LimitOf<Model>;
    /// A limit set's members' decisions (`LimitSetModel::Decisions`).
    using Decisions = detail::EachOf<Model>;
    /// A registered tier: its index, in the order the tiers were given.
    using TierId = std::uint32_t;

    /// A tier as registered (one type for every storage and clock of the model).
    using Tier = NamedTier<LimitType>;

    /// Registers `tiers` (1 … 256) and builds their one table. Throws: `std::invalid_argument`
    /// naming the field, as `Limiter`'s constructor for a bad limit or option, and for an empty,
    /// long or repeated tier name. Does no I/O.
    explicit TieredLimiter(std::vector<Tier> tiers, Storage storage = Storage{},
                           Clock clock = Clock{}, LimiterOptions options = LimiterOptions{})
        : names_(namesOf(tiers)),
          limiter_(limitsOf(tiers), std::move(storage), std::move(clock), std::move(options)) {}

    /// The tier named `name`. Throws: `std::invalid_argument` when there is none.
    [[nodiscard]] TierId tier(std::string_view name) const {
        const std::optional<TierId> found = findTier(name);
        if (!found) {
            detail::throwInvalidArgument("TieredLimiter: no tier named \"{}\"", {name});
        }
        return *found;
    }

    /// The tier named `name`, if there is one.
    [[nodiscard]] std::optional<TierId> findTier(std::string_view name) const noexcept {
        for (std::size_t i = 0; i < names_.size(); ++i) {
            if (names_[i] == name) {
                return static_cast<TierId>(i);
            }
        }
        return std::nullopt;
    }

    [[nodiscard]] std::size_t tierCount() const noexcept { return names_.size(); }
    /// Throws: `std::invalid_argument` for a tier id out of range.
    [[nodiscard]] const std::string& tierName(TierId tier) const { return names_[checked(tier)]; }
    /// The limit in force for `tier`. Throws: as `tierName`.
    [[nodiscard]] LimitType limit(TierId tier) const { return limiter_.limit()[checked(tier)]; }

    /// `Limiter::tryAcquire` judged by `tier`: a key last seen under another tier is carried
    /// over to this one first. Throws: `std::invalid_argument` for a tier id out of range or a
    /// negative cost; as `Limiter::tryAcquire` otherwise.
    Decision tryAcquire(std::string_view key, TierId tier, std::int64_t cost = 1) {
        TierCall<Model> call{checked(tier)};
        return limiter_.tryAcquire(key, cost, call);
    }

    /// A limit set's `tryAcquire`, with every member's own decision in `each`.
    Decision tryAcquire(std::string_view key, TierId tier, std::int64_t cost,
                        Decisions& each) requires detail::kIsLimitSet<Model> {
        TierCall<Model> call{checked(tier)};
        const Decision d = limiter_.tryAcquire(key, cost, call);
        each = call.each;
        return d;
    }

    /// `Limiter::peek` judged by `tier` (nothing is written, a carry-over included).
    Decision peek(std::string_view key, TierId tier, std::int64_t cost = 1) {
        TierCall<Model> call{checked(tier)};
        return limiter_.peek(key, cost, call);
    }

    /// A limit set's `peek`, with every member's own decision in `each`.
    Decision peek(std::string_view key, TierId tier, std::int64_t cost,
                  Decisions& each) requires detail::kIsLimitSet<Model> {
        TierCall<Model> call{checked(tier)};
        const Decision d = limiter_.peek(key, cost, call);
        each = call.each;
        return d;
    }

    /// `Limiter::refund` under `tier`.
    Decision refund(std::string_view key, TierId tier,
                    std::int64_t cost = 1) requires RefundableModel<Model> {
        TierCall<Model> call{checked(tier)};
        return limiter_.refund(key, cost, call);
    }

    /// Forgets everything about `key`, whatever its tier.
    void reset(std::string_view key) { limiter_.reset(key); }

    /// Enforces `limit` for `tier` from now on (`Limiter::setLimit`): its keys carry their
    /// consumption over at their next call. Throws: as `Limiter::setLimit`, and for a tier id
    /// out of range.
    void setLimit(TierId tier, LimitType limit) {
        typename Tiered::Limits limits = limiter_.limit();
        limits[checked(tier)] = std::move(limit);
        limiter_.setLimit(std::move(limits));
    }

    /// Dry-run only: the calls admitted that enforcing would have refused.
    [[nodiscard]] std::uint64_t dryRunRefusals() const noexcept {
        return limiter_.dryRunRefusals();
    }

    [[nodiscard]] const LimiterOptions& options() const noexcept { return limiter_.options(); }

private:
    static constexpr std::size_t kMaxName = 64;

    static std::vector<std::string> namesOf(const std::vector<Tier>& tiers) {
        std::vector<std::string> names;
        for (const Tier& t : tiers) {
            if (t.name.empty() || t.name.size() > kMaxName) {
                detail::throwInvalidArgument(
                    "TieredLimiter: Tier.name must be 1..64 bytes (got {} bytes)",
                    {static_cast<std::int64_t>(t.name.size())});
            }
            for (const std::string& seen : names) {
                if (seen == t.name) {
                    detail::throwInvalidArgument("TieredLimiter: Tier.name \"{}\" is given twice",
                                                 {t.name});
                }
            }
            names.push_back(t.name);
        }
        return names;
    }

    static typename Tiered::Limits limitsOf(const std::vector<Tier>& tiers) {
        typename Tiered::Limits limits;
        limits.reserve(tiers.size());
        for (const Tier& t : tiers) {
            limits.push_back(t.limit);
        }
        return limits;
    }

    [[nodiscard]] TierId checked(TierId tier) const {
        if (tier >= names_.size()) {
            detail::throwInvalidArgument(
                "TieredLimiter: tier id {} is not one of the {} tiers",
                {static_cast<std::int64_t>(tier), static_cast<std::int64_t>(names_.size())});
        }
        return tier;
    }

    std::vector<std::string> names_;
    Limiter<Tiered, Storage, Clock> limiter_;
};

}  // namespace v1
}  // namespace ratelimit
