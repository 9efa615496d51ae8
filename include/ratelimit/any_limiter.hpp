#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include <ratelimit/algorithms/algorithm.hpp>
#include <ratelimit/algorithms/model.hpp>
#include <ratelimit/decision.hpp>
#include <ratelimit/detail/throw.hpp>
#include <ratelimit/limit.hpp>
#include <ratelimit/limiter.hpp>
#include <ratelimit/options.hpp>
#include <ratelimit/storage/storage.hpp>

namespace ratelimit {
inline namespace v1 {

/// A limiter whose algorithm, storage and clock are chosen at run time: any
/// `Limiter<Model, Storage, Clock>` behind one indirect call per operation.
///
/// Made from a limiter (`AnyLimiter{TokenBucket<>{limit}}`) or by name
/// (`AnyLimiter::make(Algorithm::kSlidingLog, limit, storage, options)`). Use it where the choice
/// comes from configuration; where the type is known at compile time, the `Limiter` itself
/// avoids the indirect call (bench/any_limiter_bench.cpp measures the difference).
///
/// Thread safety: thread-safe, as the limiter it holds. Copies are handles that share one
/// limiter (and so its keys). A moved-from `AnyLimiter` may only be assigned to or destroyed.
class AnyLimiter {
public:
    /// Wraps `limiter` (moved in).
    template <AlgorithmModel Model, class Storage, class Clock>
    requires kIsAlgorithmModel<Model>
    explicit AnyLimiter(Limiter<Model, Storage, Clock> limiter)
        : object_(std::make_shared<Limiter<Model, Storage, Clock>>(std::move(limiter))),
          table_(&kTable<Limiter<Model, Storage, Clock>>),
          algorithm_(kAlgorithmOf<Model>) {}

    /// Builds the limiter of `algorithm` over `storage`, with the storage's default clock.
    /// Throws: what the `Limiter` constructor throws (`std::invalid_argument` naming the field).
    template <class Storage>
    static AnyLimiter make(Algorithm algorithm, Limit limit, Storage storage,
                           LimiterOptions options = {}) {
        return make(algorithm, limit, std::move(storage), typename Storage::DefaultClock{},
                    std::move(options));
    }

    /// Builds the limiter of `algorithm` over `storage`, read at the time of `clock`.
    template <class Storage, class Clock>
    static AnyLimiter make(Algorithm algorithm, Limit limit, Storage storage, Clock clock,
                           LimiterOptions options = {}) {
        if (static_cast<std::size_t>(algorithm) >= kAlgorithmCount) {
            detail::throwInvalidArgument("AnyLimiter::make: unknown Algorithm value {}",
                                         {static_cast<int>(algorithm)});
        }
        return visitAlgorithm(algorithm, [&]<class Model>() {
            return AnyLimiter{Limiter<Model, Storage, Clock>{limit, storage, clock, options}};
        });
    }

    /// `Limiter::tryAcquire(key, cost)`: one indirect call, then the limiter's own step.
    Decision tryAcquire(std::string_view key, std::int64_t cost = 1) {
        return table_->tryAcquire(object_.get(), key, cost);
    }

    /// `Limiter::peek(key, cost)`: nothing consumed.
    Decision peek(std::string_view key, std::int64_t cost = 1) {
        return table_->peek(object_.get(), key, cost);
    }

    /// `Limiter::refund(key, cost)`: gives back up to `cost` of what `key` consumed.
    Decision refund(std::string_view key, std::int64_t cost = 1) {
        return table_->refund(object_.get(), key, cost);
    }

    /// `Limiter::reset(key)`.
    void reset(std::string_view key) { table_->reset(object_.get(), key); }

    /// `Limiter::setLimit(limit)`.
    void setLimit(const Limit& limit) { table_->setLimit(object_.get(), limit); }

    [[nodiscard]] Limit limit() const { return table_->limit(object_.get()); }
    [[nodiscard]] const LimiterOptions& options() const noexcept {
        return table_->options(object_.get());
    }
    [[nodiscard]] Algorithm algorithm() const noexcept { return algorithm_; }
    /// `Limiter::dryRunRefusals()`.
    [[nodiscard]] std::uint64_t dryRunRefusals() const noexcept {
        return table_->dryRunRefusals(object_.get());
    }

private:
    struct Table {
        Decision (*tryAcquire)(void*, std::string_view, std::int64_t);
        Decision (*peek)(void*, std::string_view, std::int64_t);
        Decision (*refund)(void*, std::string_view, std::int64_t);
        void (*reset)(void*, std::string_view);
        void (*setLimit)(void*, const Limit&);
        Limit (*limit)(const void*);
        const LimiterOptions& (*options)(const void*) noexcept;
        std::uint64_t (*dryRunRefusals)(const void*) noexcept;
    };

    template <class L>
    static constexpr Table kTable{
        [](void* o, std::string_view key, std::int64_t cost) {
            return static_cast<L*>(o)->tryAcquire(key, cost);
        },
        [](void* o, std::string_view key, std::int64_t cost) {
            return static_cast<L*>(o)->peek(key, cost);
        },
        [](void* o, std::string_view key, std::int64_t cost) {
            return static_cast<L*>(o)->refund(key, cost);
        },
        [](void* o, std::string_view key) { static_cast<L*>(o)->reset(key); },
        [](void* o, const Limit& limit) { static_cast<L*>(o)->setLimit(limit); },
        [](const void* o) { return static_cast<const L*>(o)->limit(); },
        [](const void* o) noexcept -> const LimiterOptions& {
            return static_cast<const L*>(o)->options();
        },
        [](const void* o) noexcept { return static_cast<const L*>(o)->dryRunRefusals(); },
    };

    std::shared_ptr<void> object_;
    const Table* table_;
    Algorithm algorithm_;
};

}  // namespace v1
}  // namespace ratelimit
