#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <ratelimit/algorithms/model.hpp>
#include <ratelimit/clock.hpp>
#include <ratelimit/decision.hpp>
#include <ratelimit/detail/inline.hpp>
#include <ratelimit/detail/memory_table.hpp>
#include <ratelimit/detail/slot_lock.hpp>
#include <ratelimit/detail/thread_annotations.hpp>
#include <ratelimit/detail/throw.hpp>
#include <ratelimit/memory_options.hpp>
#include <ratelimit/options.hpp>
#include <ratelimit/storage/storage.hpp>

namespace ratelimit {
inline namespace v1 {

namespace detail {
struct MemoryShared;
}

/// In-process storage: a fixed set of lazily allocated 16-slot groups per limiter, each slot
/// with its own lock and a one-byte tag that filters before it, so request threads share a lock
/// only when they share a key or, 1 time in 255 per key of a group, its tag.
///
/// Keys of up to 16 bytes are stored whole and placed by a fast keyed hash; longer keys are
/// kept as their keyed 128-bit SipHash-2-4 digest (both seeded per storage, so an attacker
/// cannot aim keys at one group or forge a digest). Memory is bounded in bytes: at most `maxKeys`
/// entries are live in each limiter's table, which is sized from `maxKeys` once (see
/// `MemoryStats::byteBound`), so a flood on one limiter never takes another's room. A fresh entry
/// (its key back to untouched) is free space: a new key of its limiter reuses it, and each call
/// that inserts sweeps at most `kSweepPerCall` slots of its table; there is no background thread.
/// When no entry is free, a new key shares one of `spillEntries` spill entries chosen by its hash:
/// it is limited together with other overflow keys, never unlimited, and no tracked key is ever
/// evicted or reset; the hook hears of it once per episode.
///
/// Thread safety: thread-safe; copies are handles sharing one store.
class MemoryStorage {
public:
    using Options = MemoryStorageOptions;

    /// Slots examined by one inserting call, at most.
    static constexpr std::size_t kSweepPerCall = detail::kSweepPerCall;
    using DefaultClock = SteadyClock;
    static constexpr bool kSharedAcrossHosts = false;

    template <AlgorithmModel M>
    class Table;

    MemoryStorage() : MemoryStorage(Options{}) {}
    /// Throws: `std::invalid_argument` naming an option outside its range.
    explicit MemoryStorage(Options options);

    /// Opens (or joins) the table of the limiter `options.name` with model `M`.
    /// Throws: `std::invalid_argument` when the quota is not representable in 64-bit state, or
    /// when a limiter of that name and model already uses a different quota.
    template <AlgorithmModel M>
    [[nodiscard]] Table<M> table(const LimiterOptions& options, const Quota& quota) const;

    /// Counters summed over the live tables. Thread-safe (a snapshot).
    [[nodiscard]] MemoryStats stats() const;

private:
    static constexpr std::size_t kMaxKeysBound = std::size_t{1} << 31;
    static constexpr std::size_t kSpillEntriesBound = std::size_t{1} << 16;

    std::shared_ptr<detail::MemoryShared> shared_;
};

namespace detail {

/// Memory holds 64-bit state with 128-bit intermediates: values and spans below 2^62.
inline constexpr StorageRange kMemoryRange{"memory", "ns", "", 62, 62, 0};

/// What every copy of one `MemoryStorage` handle shares: the keyspace its tables draw from, and
/// the registry that lets limiters of one name and model share a table.
struct MemoryShared {
    /// A table by name and model, held weakly: it lives as long as a limiter uses it.
    struct Registered {
        std::string name;
        std::string_view model;
        std::weak_ptr<MemoryTableBase> table;
    };

    MemoryKeyspace keyspace;
    SlotLock registryLock;  // rarely taken: a limiter's construction, `stats()`
    std::vector<Registered> tables RATELIMIT_GUARDED_BY(registryLock);

    explicit MemoryShared(MemoryStorageOptions options)
        : keyspace(std::move(options), hashSeeds(options.seed)) {}

    /// The live table of `name` and `model`, or null. Forgets the tables no limiter holds.
    std::shared_ptr<MemoryTableBase> find(std::string_view name, std::string_view model)
        RATELIMIT_REQUIRES(registryLock) {
        std::shared_ptr<MemoryTableBase> found;
        std::size_t kept = 0;
        for (std::size_t i = 0; i < tables.size(); ++i) {
            if (tables[i].table.expired()) {
                continue;
            }
            if (tables[i].name == name && tables[i].model == model) {
                found = tables[i].table.lock();
            }
            if (kept != i) {
                tables[kept] = std::move(tables[i]);
            }
            ++kept;
        }
        tables.resize(kept);
        return found;
    }
};

}  // namespace detail

/// One limiter's namespace in a `MemoryStorage`. Thread safety: thread-safe; copies share it.
template <AlgorithmModel M>
class MemoryStorage::Table {
public:
    explicit Table(std::shared_ptr<detail::MemoryTable<M>> impl) : impl_(std::move(impl)) {}

    /// Applies the model's step to `key` atomically. Throws: `std::bad_alloc` only.
    [[nodiscard]] RATELIMIT_ALWAYS_INLINE Decision step(std::string_view key,
                                                        detail::TickSource now, std::int64_t cost,
                                                        StepMode mode) const {
        return impl_->step(key, now, cost, mode);
    }
    /// Makes `key` fresh (a spilled key shares its entry and is left alone).
    void reset(std::string_view key) const { impl_->reset(key); }

private:
    std::shared_ptr<detail::MemoryTable<M>> impl_;
};

inline MemoryStorage::MemoryStorage(Options options) {
    if (options.maxKeys < 1 || options.maxKeys > kMaxKeysBound) {
        detail::throwInvalidArgument({"MemoryStorage::Options.maxKeys must be in 1..2^31 (got ",
                                      detail::Decimal(options.maxKeys), ")"});
    }
    if (options.spillEntries < 1 || options.spillEntries > kSpillEntriesBound) {
        detail::throwInvalidArgument(
            {"MemoryStorage::Options.spillEntries must be in 1..65536 (got ",
             detail::Decimal(options.spillEntries), ")"});
    }
    shared_ = std::make_shared<detail::MemoryShared>(std::move(options));
}

template <AlgorithmModel M>
MemoryStorage::Table<M> MemoryStorage::table(const LimiterOptions& options,
                                             const Quota& quota) const {
    detail::checkRange<M>(quota, detail::kMemoryRange);
    const detail::SlotGuard lock(shared_->registryLock);
    if (const auto existing = shared_->find(options.name, M::kName)) {
        const Quota& q = existing->quota();
        // Keys' times and how long entries stay must agree too, or one limiter would read
        // the other's entries on another timeline.
        if (q.count != quota.count || q.burst != quota.burst || q.period != quota.period ||
            q.nanosPerTick != quota.nanosPerTick || q.maxRunsPerKey != quota.maxRunsPerKey ||
            q.lateTolerance != quota.lateTolerance || q.keyTimeSpread != quota.keyTimeSpread) {
            detail::throwInvalidArgument({"a ", M::kName, " limiter named \"", options.name,
                                          "\" already uses this storage with another limit or ",
                                          "options; give each limiter its own name"});
        }
        return Table<M>(std::static_pointer_cast<detail::MemoryTable<M>>(existing));
    }
    // The table shares the storage's lifetime through its keyspace (an aliasing pointer), so
    // it outlives every handle of the storage that made it.
    auto created = std::make_shared<detail::MemoryTable<M>>(
        std::shared_ptr<detail::MemoryKeyspace>(shared_, &shared_->keyspace), options.name, quota);
    shared_->tables.push_back({options.name, M::kName, created});
    return Table<M>(std::move(created));
}

inline MemoryStats MemoryStorage::stats() const {
    MemoryStats stats;
    const detail::SlotGuard lock(shared_->registryLock);
    for (const detail::MemoryShared::Registered& r : shared_->tables) {
        if (const auto table = r.table.lock()) {
            table->addStats(stats);
        }
    }
    return stats;
}

}  // namespace v1
}  // namespace ratelimit
