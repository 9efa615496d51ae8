#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

#include <ratelimit/algorithms/limit_set.hpp>
#include <ratelimit/algorithms/model.hpp>
#include <ratelimit/clock.hpp>
#include <ratelimit/decision.hpp>
#include <ratelimit/detail/inline.hpp>
#include <ratelimit/detail/memory_table.hpp>
#include <ratelimit/detail/ref_counted.hpp>
#include <ratelimit/detail/slot_lock.hpp>
#include <ratelimit/detail/thread_annotations.hpp>
#include <ratelimit/detail/throw.hpp>
#include <ratelimit/memory_options.hpp>
#include <ratelimit/options.hpp>
#include <ratelimit/storage/storage.hpp>

namespace ratelimit {
inline namespace v1 {

/// In-process storage: a table of 14-slot groups per limiter, grown a segment of groups at a
/// time as keys arrive, each slot with its own lock and a one-byte tag that filters before it,
/// so request threads share a lock only when they share a key or, 1 time in 255 per key of a
/// group of keys of one length, its tag. The token and leaky buckets step a key with one 16-byte
/// compare-and-swap of its state instead, where the processor has one (docs/semantics.md,
/// "Concurrent calls").
///
/// Keys of up to 16 bytes are stored whole and placed by a fast keyed hash; longer keys are
/// kept as their keyed 128-bit SipHash-2-4 digest (both seeded per storage, so an attacker
/// cannot aim keys at one group or forge a digest). Memory is bounded in bytes: at most `maxKeys`
/// entries are live in each limiter's table, which grows with its keys up to room for
/// `maxKeys` (see `MemoryStats::byteBound`), so a flood on one limiter never takes another's
/// room. A fresh entry
/// (its key back to untouched) is free space: a new key of its limiter reuses it, and each call
/// that inserts sweeps at most `kSweepPerCall` slots of its table; there is no background thread.
/// When no entry is free, a new key shares one of `spillEntries` spill entries chosen by its hash:
/// it is limited together with other overflow keys, never unlimited, and no tracked key is ever
/// evicted or reset; the hook hears of it once per episode.
///
/// Thread safety: thread-safe; copies are handles sharing one store.
class MemoryStorage
    : public detail::StorageHandle<detail::MemoryKeyspace, MemoryStorageOptions, MemoryStats> {
public:
    /// Slots examined by one inserting call, at most.
    static constexpr std::size_t kSweepPerCall = detail::kSweepPerCall;
    using DefaultClock = SteadyClock;
    static constexpr bool kSharedAcrossHosts = false;

    template <AlgorithmModel M>
    class Table;

    /// Throws: `std::invalid_argument` naming an option outside its range.
    using StorageHandle::StorageHandle;

    /// Joins the table of a limiter of the same name and model, if there is one.
    /// Throws: `std::invalid_argument` when the quota is not representable in 64-bit state, or
    /// when a limiter of that name and model already uses a different quota.
    template <AlgorithmModel M>
    [[nodiscard]] Table<M> table(const LimiterOptions& options, const QuotaOf<M>& quota) const;
};

namespace detail {

/// Memory holds 64-bit state with 128-bit intermediates: values and spans below 2^62.
inline constexpr StorageRange kMemoryRange{"memory", "ns", "", 62, 62, 0};

}  // namespace detail

/// One limiter's namespace in a `MemoryStorage`. Thread safety: thread-safe; copies share it.
template <AlgorithmModel M>
class MemoryStorage::Table {
public:
    Table(detail::Ref<detail::MemoryTable<M>> impl, detail::Ref<detail::ListenerHold> listening)
        : impl_(std::move(impl)), listening_(std::move(listening)) {}

    /// Applies the model's step to `key` atomically (a limit set's members' decisions to
    /// `each`, when given). Inlined, as the table's step is (`detail::MemoryTable::step`).
    /// Throws: `std::bad_alloc` only.
    [[nodiscard]] RATELIMIT_INLINE Decision step(std::string_view key, detail::TickSource now,
                                                 std::int64_t cost, StepMode mode,
                                                 detail::EachOf<M>* each = nullptr) const {
        return impl_->step(key, now, cost, mode, each);
    }
    /// Makes `key` fresh (a spilled key shares its entry and is left alone).
    void reset(std::string_view key) const { impl_->reset(key); }

    /// The quota in force.
    [[nodiscard]] const QuotaOf<M>& quota() const noexcept { return impl_->quota(); }

    /// Enforces `quota` from the tick after `readNow()`, for every limiter sharing the table.
    /// Throws: `std::invalid_argument` as `MemoryStorage::table`.
    template <class ReadNow>
    void setQuota(const QuotaOf<M>& quota, ReadNow readNow) const {
        detail::checkRange<M>(quota, detail::kMemoryRange);
        impl_->setQuota(quota, readNow);
    }

private:
    detail::Ref<detail::MemoryTable<M>> impl_;  // before `listening_`: it holds the keyspace
    detail::Ref<detail::ListenerHold> listening_;
};

template <AlgorithmModel M>
MemoryStorage::Table<M> MemoryStorage::table(const LimiterOptions& options,
                                             const QuotaOf<M>& quota) const {
    detail::checkRange<M>(quota, detail::kMemoryRange);
    detail::Ref<detail::MemoryTable<M>> table =
        shared()->registry.template tableOf<detail::MemoryTable<M>>(options.name, M::kName, [&] {
            return detail::Ref<detail::MemoryTable<M>>::make(shared(), options.name, quota);
        });
    // Keys' times and how long entries stay must agree too, or one limiter would read the
    // other's entries on another timeline. (Checked outside the registry's lock: should this
    // handle be the table's last, dropping it takes that lock.)
    if (!detail::sameQuotaOf<M>(table->quota(), quota)) {
        detail::throwInvalidArgument(
            "a {} limiter named \"{}\" already uses this storage with another limit or options; "
            "give each limiter its own name",
            {M::kName, options.name});
    }
    return Table<M>(std::move(table), shared()->listeners.hold(options.listener));
}

}  // namespace v1
}  // namespace ratelimit
