#pragma once

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <utility>

#include <ratelimit/algorithms/limit_set.hpp>
#include <ratelimit/algorithms/model.hpp>
#include <ratelimit/decision.hpp>
#include <ratelimit/detail/checked_math.hpp>
#include <ratelimit/detail/ref_counted.hpp>
#include <ratelimit/detail/throw.hpp>
#include <ratelimit/detail/tick_source.hpp>
#include <ratelimit/options.hpp>
#include <ratelimit/quota.hpp>

namespace ratelimit {
inline namespace v1 {

/// What a limiter needs from a store of per-key state.
///
/// A storage is a cheap handle whose copies share one store. `table<M>(options, quota)` opens
/// the namespace of one limiter (its `options.name` and model) and throws `std::invalid_argument`
/// when the store cannot hold the quota's arithmetic exactly. A table's `step(key, now, cost,
/// mode)` reads the time from `now` and applies one step to the key's state atomically (a peek,
/// or a zero cost, writes nothing) and `reset(key)` makes the key fresh; `quota()` is the quota
/// in force and `setQuota(quota, readNow)` replaces it from the tick after `readNow()`, each
/// key carried over by its next step (`detail::convertedState`). `DefaultClock` is the
/// storage's natural clock; `kSharedAcrossHosts` says whether other hosts see the same state (so
/// a host-local clock would be wrong there). A storage may fix the tick of the arithmetic with
/// `static constexpr std::int64_t kNanosPerTick` (Redis: 1000); otherwise the clock's tick is
/// used. A storage with a store-side clock also offers `stepAtStoreTime(key, phase, cost, mode)`.
template <class S, class M>
concept StoragePolicy = AlgorithmModel<M> && std::copy_constructible<S> &&
    requires(const S& storage, const LimiterOptions& options, const QuotaOf<M>& quota) {
    typename S::DefaultClock;
    { S::kSharedAcrossHosts } -> std::convertible_to<bool>;
    { storage.template table<M>(options, quota) } -> std::copy_constructible;
    requires requires(decltype(storage.template table<M>(options, quota)) table,
                      std::string_view key, detail::TickSource now, std::int64_t cost,
                      Tick(*readNow)()) {
        { table.step(key, now, cost, StepMode::kConsume) } -> std::same_as<Decision>;
        table.reset(key);
        { table.quota() } -> std::convertible_to<const QuotaOf<M>&>;
        table.setQuota(quota, readNow);
    };
};

namespace detail {

/// The handle a storage is (see `StoragePolicy`): copies share one `Shared` (a `RefCounted`),
/// which is made from the storage's options and checks them. With no options, the defaults.
template <class Shared, class StorageOptions, class Stats>
class StorageHandle {
public:
    using Options = StorageOptions;

    StorageHandle() : StorageHandle(Options{}) {}
    explicit StorageHandle(Options options) : shared_(Ref<Shared>::make(std::move(options))) {}

    /// The store's counters, a snapshot. Thread-safe.
    [[nodiscard]] Stats stats() const { return shared_->stats(); }

protected:
    [[nodiscard]] const Ref<Shared>& shared() const noexcept { return shared_; }

private:
    Ref<Shared> shared_;
};

template <class S>
inline constexpr std::int64_t kStorageNanosPerTick = [] {
    if constexpr (requires { S::kNanosPerTick; }) {
        return std::int64_t{S::kNanosPerTick};
    } else {
        return std::int64_t{0};
    }
}();

/// What a storage holds exactly: every bucket unit and count below 2^`valueBits`, every span
/// below 2^`spanBits` ticks (and 2^62 ns, so that a `Decision` can report it), and, where the
/// arithmetic has no wider intermediates, count·period below 2^`productBits` ticks (0: no such
/// bound).
struct StorageRange {
    std::string_view store;     ///< the storage's name in messages
    std::string_view tickUnit;  ///< how messages write a period in ticks
    std::string_view why;       ///< why the bound exists, or empty
    int valueBits{};
    int spanBits{};
    int productBits{};
};

/// Refuses `q`, whose arithmetic under `model` meets the magnitudes `r`, when they leave
/// `range`, naming the bound and the largest accepted value. `periodHint` says how to lower
/// the longest span. Throws: `std::invalid_argument`.
inline void checkRange(const Quota& q, const ModelRange& r, const StorageRange& range,
                       std::string_view model, std::string_view periodHint) {
    const auto bound = [](int bits) { return Int128{1} << bits; };
    const auto fail = [&](std::string_view what, Int128 value, int bits, std::string_view hint,
                          Int128 largest, std::string_view unit) {
        throwInvalidArgument(
            "{} with Limit{count={}, period={}{}, burst={}} is not representable in {}: {} = {} "
            "reaches 2^{}{}; {}{}{}",
            {model, q.count, q.period, range.tickUnit, q.burst, range.store, what,
             clampToInt64(value), bits, range.why, hint, clampToInt64(largest), unit});
    };
    if (r.units >= bound(range.valueBits)) {
        fail("burst·period/gcd(count, period) units", r.units, range.valueBits,
             "the largest accepted burst here is ", (bound(range.valueBits) - 1) / q.unitsPerToken,
             "");
    }
    const Int128 product = Int128{q.count} * q.period;
    if (range.productBits > 0 && product >= bound(range.productBits)) {
        fail("count·period", product, range.productBits, "the largest accepted count here is ",
             (bound(range.productBits) - 1) / q.period, "");
    }
    constexpr int kNanosecondBits = 62;
    const bool inTicks = r.span >= bound(range.spanBits);
    if (inTicks || r.span * q.nanosPerTick >= bound(kNanosecondBits)) {
        const int bits = inTicks ? range.spanBits : kNanosecondBits;
        fail(inTicks ? "the longest span in ticks" : "the longest span in nanoseconds",
             inTicks ? r.span : r.span * q.nanosPerTick, bits, periodHint,
             (bound(bits) - 1) * q.period / r.span, inTicks ? range.tickUnit : "ns");
    }
}

/// Refuses a quota whose arithmetic under model `M` leaves `range` (see above); a limit set's,
/// member by member. Throws: `std::invalid_argument`.
template <AlgorithmModel M>
void checkRange(const QuotaOf<M>& q, const StorageRange& range) {
    if constexpr (kIsLimitSet<M>) {
        M::forEach([&]<std::size_t I>() {
            checkRange<typename M::template Member<I>>(q.members[I], range);
        });
    } else {
        // A window's span is a multiple of its period: the period scales down with it. A
        // bucket's refill scales with burst·period/count.
        checkRange(q, M::range(q), range, M::kName,
                   M::kBucket ? "lower burst·period/count; the largest accepted period here is "
                              : "the largest accepted period is ");
    }
}

}  // namespace detail
}  // namespace v1
}  // namespace ratelimit
