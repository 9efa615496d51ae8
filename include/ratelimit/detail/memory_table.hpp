#pragma once

// The table behind one limiter of a `MemoryStorage`: groups of 14 slots, each with its own
// lock (one byte, which also holds the length of the slot's key), found through two candidate
// groups per key and byte tags and lengths that filter before any lock;
// segments of groups that split in two, unevenly, as keys arrive, up to room for `maxKeys`,
// after a key moved to its other group could not make room; fresh entries reused in place, a
// constant sweep per inserting call, spill entries at the bound.

#include <array>
#include <atomic>
#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <unistd.h>
#include <utility>

#include <ratelimit/algorithms/model.hpp>
#include <ratelimit/decision.hpp>
#include <ratelimit/detail/checked_math.hpp>
#include <ratelimit/detail/chrono.hpp>
#include <ratelimit/detail/counter_words.hpp>
#include <ratelimit/detail/inline.hpp>
#include <ratelimit/detail/limit_epochs.hpp>
#include <ratelimit/detail/ref_counted.hpp>
#include <ratelimit/detail/segment_memory.hpp>
#include <ratelimit/detail/short_key_hash.hpp>
#include <ratelimit/detail/siphash.hpp>
#include <ratelimit/detail/slot_lock.hpp>
#include <ratelimit/detail/step.hpp>
#include <ratelimit/detail/store_listeners.hpp>
#include <ratelimit/detail/thread_annotations.hpp>
#include <ratelimit/detail/throw.hpp>
#include <ratelimit/detail/tick_source.hpp>
#include <ratelimit/detail/window_words.hpp>
#include <ratelimit/detail/word_pair.hpp>
#include <ratelimit/memory_options.hpp>
#include <ratelimit/options.hpp>
#include <ratelimit/quota.hpp>

namespace ratelimit {
inline namespace v1 {
namespace detail {

/// The keys of a storage's two hashes: `ShortKeyHash`'s four words, then `SipHash128`'s two.
inline constexpr std::size_t kShortKeySeedWords = 4;
using HashSeeds = std::array<std::uint64_t, kShortKeySeedWords + 2>;

/// The hash keys of one storage: drawn from the operating system (`getentropy`), or spread
/// from a given seed (SplitMix64) so tests can replay a layout. Where the system has no
/// entropy source (Linux before 3.17), the time and an address stand in for the seed.
inline HashSeeds hashSeeds(std::uint64_t seed) {
    HashSeeds seeds{};
    if (seed == 0) {
        if (::getentropy(seeds.data(), sizeof seeds) == 0) {
            return seeds;
        }
        seed = static_cast<std::uint64_t>(
                   std::chrono::steady_clock::now().time_since_epoch().count()) ^
               reinterpret_cast<std::uintptr_t>(&seeds);  // NOLINT(*-reinterpret-cast)
    }
    // SplitMix64 (Steele, Lea and Flood): its increment, shifts and multipliers are its
    // definition, not tunables to name.
    // NOLINTBEGIN(cppcoreguidelines-avoid-magic-numbers,readability-magic-numbers)
    for (auto& s : seeds) {
        seed += 0x9e3779b97f4a7c15ULL;
        std::uint64_t z = seed;
        z = (z ^ (z >> 30U)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27U)) * 0x94d049bb133111ebULL;
        s = z ^ (z >> 31U);
    }
    // NOLINTEND(cppcoreguidelines-avoid-magic-numbers,readability-magic-numbers)
    return seeds;
}

/// The type-erased face of a table, for the storage's registry and statistics (never on the
/// step path).
class MemoryTableBase : public RefCounted {
public:
    MemoryTableBase(std::string name, std::string_view model)
        : name_(std::move(name)), model_(model) {}
    MemoryTableBase(const MemoryTableBase&) = delete;
    MemoryTableBase& operator=(const MemoryTableBase&) = delete;
    MemoryTableBase(MemoryTableBase&&) = delete;
    MemoryTableBase& operator=(MemoryTableBase&&) = delete;
    virtual ~MemoryTableBase() = default;

    virtual void addStats(MemoryStats& stats) const = 0;
    [[nodiscard]] virtual const Quota& quota() const noexcept = 0;
    /// The name of the limiters that use it.
    [[nodiscard]] const std::string& name() const noexcept { return name_; }

private:
    friend class MemoryRegistry;

    std::string name_;
    std::string_view model_;
    MemoryTableBase* next_ = nullptr;  // in its storage's registry
};

/// The live tables of one storage, by name and model, so that limiters of one name and model
/// share a table. It lists tables without owning them: a table lives while a limiter holds
/// it, and unlists itself first thing in its destructor.
/// Thread safety: thread-safe; its lock is taken only by a limiter's construction, `stats()`
/// and a table's end.
class MemoryRegistry {
public:
    /// The live table of `name` and `model` (a `Table`), or, when there is none, the one
    /// `make()` returns, listed: made under the lock, so two limiters never make two.
    template <class Table, class Make>
    [[nodiscard]] Ref<Table> tableOf(std::string_view name, std::string_view model, Make make)
        RATELIMIT_EXCLUDES(lock_) {
        const SlotGuard guard(lock_);
        for (MemoryTableBase* t = tables_; t != nullptr; t = t->next_) {
            // A table whose last handle is gone is on its way out: a new one takes its place.
            if (t->name_ == name && t->model_ == model && t->retainIfAlive()) {
                return Ref<Table>::adopt(static_cast<Table*>(t));
            }
        }
        Ref<Table> made = make();
        made->next_ = tables_;
        tables_ = made.get();
        return made;
    }

    /// Unlists `table`.
    void remove(const MemoryTableBase& table) RATELIMIT_EXCLUDES(lock_) {
        const SlotGuard guard(lock_);
        for (MemoryTableBase** link = &tables_; *link != nullptr; link = &(*link)->next_) {
            if (*link == &table) {
                *link = table.next_;
                return;
            }
        }
    }

    /// The counters of the listed tables, summed.
    [[nodiscard]] MemoryStats stats() RATELIMIT_EXCLUDES(lock_) {
        MemoryStats stats;
        const SlotGuard guard(lock_);
        for (const MemoryTableBase* t = tables_; t != nullptr; t = t->next_) {
            if (t->alive()) {  // else its destructor waits for this lock to unlist it
                t->addStats(stats);
            }
        }
        return stats;
    }

private:
    SlotLock lock_;
    MemoryTableBase* tables_ RATELIMIT_GUARDED_BY(lock_) = nullptr;  // a linked list
};

/// `options`, once each is in its range. Throws: `std::invalid_argument` naming one that is not.
inline const MemoryStorageOptions& checkedMemoryOptions(const MemoryStorageOptions& options) {
    constexpr std::size_t kMaxKeysBound = std::size_t{1} << 31;
    constexpr std::size_t kSpillEntriesBound = std::size_t{1} << 16;
    if (options.maxKeys < 1 || options.maxKeys > kMaxKeysBound) {
        throwInvalidArgument("MemoryStorage::Options.maxKeys must be in 1..2^31 (got {})",
                             {options.maxKeys});
    }
    if (options.spillEntries < 1 || options.spillEntries > kSpillEntriesBound) {
        throwInvalidArgument("MemoryStorage::Options.spillEntries must be in 1..65536 (got {})",
                             {options.spillEntries});
    }
    if (options.hugePages != HugePages::kOff && options.hugePages != HugePages::kOnCall &&
        options.hugePages != HugePages::kBackground) {
        throwInvalidArgument(
            "MemoryStorage::Options.hugePages must be kOff, kOnCall or kBackground (got {})",
            {static_cast<int>(options.hugePages)});
    }
    return options;
}

/// What every handle of one `MemoryStorage` and each of its tables share: its options, its
/// hashes (and so its hook), its registry and its tables' listeners. The last handle or table to go
/// deletes it. Thread safety: thread-safe.
struct MemoryKeyspace final : RefCounted {
    /// Throws: `std::invalid_argument` naming an option outside its range.
    explicit MemoryKeyspace(const MemoryStorageOptions& opts)
        : MemoryKeyspace(checkedMemoryOptions(opts), hashSeeds(opts.seed)) {}
    MemoryKeyspace(MemoryStorageOptions opts, const HashSeeds& seeds)
        : options(std::move(opts)),
          shortKeyHasher(seeds[0], seeds[1], seeds[2], seeds[3]),
          longKeyHasher(seeds[kShortKeySeedWords], seeds[kShortKeySeedWords + 1]) {}

    /// The counters of its tables, summed.
    [[nodiscard]] MemoryStats stats() { return registry.stats(); }

    const MemoryStorageOptions options;
    const ShortKeyHash shortKeyHasher;
    const SipHash128 longKeyHasher;
    MemoryRegistry registry;
    StoreListeners listeners;
};

/// A fixed-size array on the heap, sized at run time: a `std::vector` would add a capacity and
/// a size that nothing uses, and `std::unique_ptr<T[]>` the `<memory>` header.
/// Thread safety: thread-compatible.
template <class T>
class HeapArray {
public:
    explicit HeapArray(std::size_t size)
        : elements_(new T[size]{}) {}  // NOLINT(cppcoreguidelines-owning-memory): owned here
    HeapArray(const HeapArray&) = delete;
    HeapArray& operator=(const HeapArray&) = delete;
    HeapArray(HeapArray&&) = delete;
    HeapArray& operator=(HeapArray&&) = delete;
    ~HeapArray() {
        delete[] elements_;  // NOLINT(cppcoreguidelines-owning-memory): owned here
    }

    T& operator[](std::size_t i) const noexcept { return elements_[i]; }

private:
    T* elements_;
};

/// A key's bytes as a slot holds them: up to 16 inline, zero-padded, or a longer key's digest.
/// Its length sits in the slot's `SlotMeta`.
class KeyBytes {
public:
    static constexpr std::size_t kInline = 16;

    // A char view of the words (char may alias any object).
    // NOLINTBEGIN(cppcoreguidelines-pro-type-reinterpret-cast)
    [[nodiscard]] char* data() noexcept { return reinterpret_cast<char*>(words_.data()); }
    [[nodiscard]] const char* data() const noexcept {
        return reinterpret_cast<const char*>(words_.data());
    }
    // NOLINTEND(cppcoreguidelines-pro-type-reinterpret-cast)

    /// Whether a slot's key, `stored`, is this one: two word compares instead of a `memcmp`
    /// call (this runs on every step). The slot's words are read atomically: a bucket table
    /// compares them without the slot's lock, and its writers hold the lock.
    [[nodiscard]] bool matches(KeyBytes& stored) const noexcept {
        return words_[0] == load(stored.words_[0]) && words_[1] == load(stored.words_[1]);
    }

    /// Gives a slot, this one, the key `key`. The caller holds the slot's lock.
    void assign(const KeyBytes& key) noexcept {
        for (std::size_t i = 0; i < words_.size(); ++i) {
            std::atomic_ref<std::uint64_t>(words_[i]).store(key.words_[i],
                                                            std::memory_order_relaxed);
        }
    }

    /// A key of at most kInline bytes, zero-padded. Built in registers from overlapping loads,
    /// as the short-key hash reads it: a `memcpy` of a variable length is a libc call on every
    /// step, and its byte stores, read back as words by `matches`, would miss store forwarding.
    /// Always inlined: GCC 12 left it out of line, a call on every lookup (bench/README.md,
    /// "the key's bytes built inline").
    [[nodiscard]] RATELIMIT_INLINE static KeyBytes padded(std::string_view key) noexcept {
        KeyBytes out;
        const std::size_t n = key.size();
        const char* const p = key.data();
        if constexpr (std::endian::native != std::endian::little) {
            if (n > 0) {
                std::memcpy(out.data(), p, n);
            }
        } else if (n > sizeof(std::uint64_t)) {
            constexpr std::size_t kWord = sizeof(std::uint64_t);
            out.words_[0] = loadWord<std::uint64_t>(p);
            out.words_[1] = loadWord<std::uint64_t>(p + n - kWord) >> (kByteBits * (2 * kWord - n));
        } else if (n == sizeof(std::uint64_t)) {
            out.words_[0] = loadWord<std::uint64_t>(p);
        } else if (n >= sizeof(std::uint32_t)) {
            const std::uint64_t tail = loadWord<std::uint32_t>(p + n - sizeof(std::uint32_t));
            out.words_[0] =
                loadWord<std::uint32_t>(p) | (tail << (kByteBits * (n - sizeof(std::uint32_t))));
        } else if (n > 0) {
            out.words_[0] = byteValue(p[0]) | (byteValue(p[n / 2]) << (kByteBits * (n / 2))) |
                            (byteValue(p[n - 1]) << (kByteBits * (n - 1)));
        }
        return out;
    }

    /// The words as they are, read atomically.
    [[nodiscard]] KeyBytes snapshot() noexcept {
        KeyBytes copy;
        copy.words_ = {load(words_[0]), load(words_[1])};
        return copy;
    }

private:
    static constexpr unsigned kByteBits = 8;

    static std::uint64_t load(std::uint64_t& word) noexcept {
        return std::atomic_ref<std::uint64_t>(word).load(std::memory_order_relaxed);
    }

    std::array<std::uint64_t, 2> words_{};
};

/// A key as stored: its bytes, and its length (0…16 inline bytes, or kDigested).
struct StoredKey {
    static constexpr std::uint8_t kInline = KeyBytes::kInline;
    static constexpr std::uint8_t kDigested = kInline + 1;
    static_assert(kDigested <= SlotMeta::kMaxLength, "a slot's lock byte holds every length");
    std::uint8_t length = 0;
    KeyBytes bytes;
};

/// A group's slots: 14, so that its header fits 32 bytes (two tag words, 14 lengths and locks,
/// the insert lock) and a group of 32-byte slots (the buckets', the fixed window's, the sliding
/// log's) is 480 bytes. With 16 slots the header's insert lock and a count took the 8 bytes
/// past 32, padded to 16 before a bucket's 16-byte aligned slots: 560 bytes for 16 slots, 2 %
/// more a slot. 15 slots would make 512-byte groups, whose tag words all fall in one eighth of
/// the cache's sets: 10^5 keys took 1.08-1.15× as long (bench/README.md, "Memory: 14-slot
/// groups").
inline constexpr std::size_t kGroupSlots = 14;
/// Tables are sized for 13 keys in every 16 slots at `maxKeys` (11.4 keys a group). Two
/// candidate groups per key, and a key moved to its other group when both are full
/// (`displace`), fill a segment to about 13.9 keys a group before a new key finds no room
/// (lowest 13.70 over 20 seeds); at 13 in 16, a segment of one directory entry (33 to 64
/// groups) has room for 4.0 to 6.0 standard deviations above its share of `maxKeys` keys, so a
/// key spills before the table holds `maxKeys` only rarely. (12 in 16 without moves left 47
/// bytes a token-bucket key at 10^6 keys.)
inline constexpr std::size_t kSizedKeys = 13;
inline constexpr std::size_t kSizedSlots = 16;

/// The groups that hold `keys` keys at kSizedKeys in kSizedSlots.
[[nodiscard]] constexpr std::size_t groupsFor(std::size_t keys) noexcept {
    constexpr std::size_t kKeysIn = kSizedKeys * kGroupSlots;  // keys in kSizedSlots groups
    return (keys * kSizedSlots + kKeysIn - 1) / kKeysIn;
}
/// A table grows a segment of groups at a time. Segments hold about this many groups (fewer
/// in small tables, more in tables of about 12 million keys and more, whose directory stops
/// at 2^kMaxDirectoryBits segments).
inline constexpr std::size_t kSegmentGroupsTarget = 64;
inline constexpr unsigned kMaxDirectoryBits = 14;
static_assert((std::size_t{1} << kMaxDirectoryBits) <= UINT16_MAX,
              "a directory entry's width takes 16 bits");

/// A table's segments up to this size are taken to stay in a core's cache (a core's L2 is
/// 1-2 MiB on current x86 servers): its steps read the clock before the key's lookup, and a
/// larger table's steps on a steady clock fetch the key's slots first (`MemoryTable::step`).
inline constexpr std::size_t kCachedTableBytes = std::size_t{1} << 20U;

/// Slots examined by one inserting call, at most: half a group.
inline constexpr std::size_t kSweepPerCall = 7;

/// How many times a new key looks again, when a key of its full groups could move but for
/// another call's lock on the group it would move to, before its segment counts as full.
inline constexpr int kBusyLooks = 8;

/// How a table of `maxKeys` grows: it starts as one segment of `segmentGroups` groups, named by
/// every entry of a directory of `entries`, and a segment whose groups are full splits in two
/// (extendible hashing, Fagin et al. 1979, with uneven splits: `splitWidth`) until each entry
/// names a segment of its own, room for `maxKeys` (`groupsFor`).
struct TableShape {
    std::size_t entries = 1;
    std::size_t segmentGroups = 1;

    [[nodiscard]] std::size_t maxSegments() const noexcept { return entries; }
};

inline TableShape tableShape(std::size_t maxKeys) noexcept {
    const std::size_t groups = groupsFor(maxKeys);
    unsigned bits = 0;
    while (bits < kMaxDirectoryBits && (groups >> bits) > kSegmentGroupsTarget) {
        ++bits;
    }
    TableShape shape;
    shape.segmentGroups = (groups + (std::size_t{1} << bits) - 1) >> bits;
    // As few entries as hold `groups`, not 2^bits: that would round every segment up by part
    // of a group, up to 1 in 33 of a full table's memory (1 in 580 at the default maxKeys).
    shape.entries = (groups + shape.segmentGroups - 1) / shape.segmentGroups;
    return shape;
}

/// How many of the `width` (2 or more) consecutive directory entries of a splitting segment go
/// to the new segment: about 2 in 5, at least 1 and at most width − 1. Halves would leave every
/// segment of a table at the same share of the keys, so all would fill, and split, within a
/// few thousand keys of one another: the table's memory would double at once, half of it empty
/// right after (70 bytes a token-bucket key). Uneven parts fill at different rates, so the
/// splits spread out and memory follows the keys (bench/README.md, "Memory: uneven splits").
/// The new segment takes the smaller part, so a split moves the fewer keys.
[[nodiscard]] constexpr std::size_t splitWidth(std::size_t width) noexcept {
    constexpr std::size_t kShare = 2;  // in kOf, rounded to the nearest
    constexpr std::size_t kOf = 5;
    const std::size_t share = (kShare * width + kOf / 2) / kOf;
    return share == 0 ? 1 : share;  // not std::max: <algorithm> costs every includer compile time
}

/// Where a key lives in a table: the directory entry that names its segment, its two candidate
/// groups in that segment (two choices keep groups evenly filled, so a key rarely finds both
/// full before the segment splits), the tag that marks its slot (0 is an empty slot), and its
/// home: the slot it takes when that one is empty or holds a key away from its own home
/// (`vacateHome`), which a lookup fetches while it reads the tags, so a key at home costs one
/// cache miss, not two in a row.
struct KeyPlacement {
    std::size_t entry = 0;
    std::array<std::uint64_t, 2> groups{};
    std::uint8_t tag = 0;
    std::uint8_t home = 0;
    std::uint16_t mark = 0;  ///< 16 more bits of the key's hash, for bucket slots' words
};

/// Maps a 64-bit hash onto [0, n) without a division (Lemire's multiply-shift), so neither the
/// directory nor a segment need be a power of two. For n = 2^d it is the hash's top d bits.
inline std::uint64_t reduce(std::uint64_t hash, std::size_t n) noexcept {
    return static_cast<std::uint64_t>((UInt128{hash} * n) >> 64U);
}

/// Places a key whose digest is `d` in a table of `shape`. The directory entry takes the top
/// bits of `d.high` (consecutive entries take consecutive ranges of it; a split moves the keys
/// at or above its cut), the groups the top bits of
/// `d.low` and of the low half of `d.high`, the tag the low half of `d.low`, the home the 16
/// bits above it, the mark the 16 bits above the low half of `d.high`: from shared bits, the keys
/// of one group would share tags (and a lookup would lock all of them) or homes. It writes into `p`
/// in place: a returned struct, copied into the caller's lookup, costs the step path a
/// store-forwarding stall.
RATELIMIT_INLINE void placeKey(const Digest128& d, const TableShape& shape,
                               KeyPlacement& p) noexcept {
    constexpr std::size_t kTagValues = 255;
    constexpr unsigned kHalf = 32;
    const std::size_t groups = shape.segmentGroups;
    p.entry = reduce(d.high, shape.maxSegments());
    // Two distinct groups where there are two: a segment has few groups, so one key in 41
    // would otherwise have a single choice, and find it full long before the others.
    const std::uint64_t first = reduce(d.low, groups);
    const std::uint64_t second = reduce(d.high << kHalf, groups > 1 ? groups - 1 : 1);
    p.groups = {first, second + static_cast<std::uint64_t>(groups > 1 && second >= first)};
    p.tag = static_cast<std::uint8_t>(1 + reduce(d.low << kHalf, kTagValues));
    // Scaled to a slot by a multiply-shift, not a division by kGroupSlots.
    constexpr unsigned kHomeBits = 16;
    constexpr std::uint64_t kHomeMask = (std::uint64_t{1} << kHomeBits) - 1;
    p.home = static_cast<std::uint8_t>((((d.low >> kHalf) & kHomeMask) * kGroupSlots) >> kHomeBits);
    p.mark = static_cast<std::uint16_t>(d.high >> kHalf);  // below the entry's bits
}

/// Hears every slot lock a table takes for a key, `foreign` when the slot holds another key,
/// and every step of a bucket table that swaps a slot's words without its lock (always the
/// key's own): what tests count to check that tags filter. Spill entries, shared by design,
/// are not heard. Hears too each key moved, to its other group or aside within its own, while
/// it is in both slots; each call that found its key's segment full, before it splits it (where
/// a test holds calls that found one segment full, so that they split together); each step
/// right after it read its limit's epoch, before it looks for its key (where a test writes the
/// key and replaces the limit in between, as another thread may); and each step that started
/// fetching its key's slots before it read the clock (`MemoryTable::stepFetchingFirst`).
template <class P>
concept SlotProbePolicy = requires(P& probe, bool foreign) {
    { probe.slotLocked(foreign) }
    noexcept->std::same_as<void>;
    { probe.keyMoving() }
    noexcept->std::same_as<void>;
    { probe.segmentFull() }
    noexcept->std::same_as<void>;
    { probe.epochRead() }
    noexcept->std::same_as<void>;
    { probe.fetchedFirst() }
    noexcept->std::same_as<void>;
};

/// The probe of every user's table: an empty member whose calls compile to nothing.
struct NoSlotProbe {
    void slotLocked(bool /*foreign*/) noexcept {}
    void keyMoving() noexcept {}
    void segmentFull() noexcept {}
    void epochRead() noexcept {}
    void fetchedFirst() noexcept {}
};
static_assert(SlotProbePolicy<NoSlotProbe>);

/// A model whose state also holds memory on the heap (the sliding log's runs) says how much.
template <class M>
concept HasHeapBound = requires(const QuotaOf<M>& q) {
    { M::heapBytes(q) } -> std::convertible_to<std::size_t>;
};

/// A bucket's state: the tick of its last write and a deficit of at most its capacity in
/// units. A table keeps it as a `WordPair` and, where the processor has a 16-byte
/// compare-and-swap and the capacity leaves the deficit's high bits free, steps it with one
/// swap instead of the slot's lock.
template <class M>
concept PairState = M::kBucket && std::is_trivially_copyable_v<typename M::State> &&
                        sizeof(typename M::State) == sizeof(WordPair) &&
                    requires(typename M::State s) {
    { s.last } -> std::same_as<Tick&>;
    { s.deficit } -> std::same_as<std::int64_t&>;
};

/// A fixed window's state: its last write, how far into its window, the count used. A table
/// keeps it in 16 bytes (`WindowWords`) where the model says it may (`kStateInWindowWords`: a
/// fresh state is all zeros, and `into` and `used` stay within its `range`).
template <class M>
concept CountedWindowState = M::kStateInWindowWords &&
                                 std::is_trivially_copyable_v<typename M::State> &&
                                 sizeof(typename M::State) == 3 * sizeof(std::int64_t) &&
                             requires(typename M::State s) {
    { s.last } -> std::same_as<Tick&>;
    { s.into } -> std::same_as<Tick&>;
    { s.used } -> std::same_as<std::int64_t&>;
};

/// A sliding counter's state: its last write, how far into its window, the counts of the
/// previous window and the current one. A table keeps it in 16 bytes (`CounterWords`) where
/// the model says it may (`kStateInCounterWords`: a fresh state is all zeros, the counts stay
/// within its `range`, and `into` is aligned but after a clock step back).
template <class M>
concept SlidingCounterState = M::kStateInCounterWords &&
                                  std::is_trivially_copyable_v<typename M::State> &&
                                  sizeof(typename M::State) == 4 * sizeof(std::int64_t) &&
                              requires(typename M::State s) {
    { s.last } -> std::same_as<Tick&>;
    { s.into } -> std::same_as<Tick&>;
    { s.previous } -> std::same_as<std::int64_t&>;
    { s.current } -> std::same_as<std::int64_t&>;
};

/// `M` is an `AlgorithmModel` (algorithms/model.hpp; the storage checks it). `Probe` is
/// `NoSlotProbe` but in tests.
template <class M, SlotProbePolicy Probe = NoSlotProbe>
class MemoryTable final : public MemoryTableBase {
    struct Group;

public:
    MemoryTable(Ref<MemoryKeyspace> keyspace, std::string name, const QuotaOf<M>& quota)
        : MemoryTableBase(std::move(name), M::kName),
          keyspace_(std::move(keyspace)),
          epochs_(quota),
          reclaimLag_(satAdd(quota.lateTolerance, quota.keyTimeSpread)),
          shape_(tableShape(keyspace_->options.maxKeys)),
          segmentMemory_(segmentBytes(), alignof(Group), shape_.maxSegments(),
                         keyspace_->options.hugePages != HugePages::kOff && hugePagesOffered()
                             ? keyspace_->options.hugePages
                             : HugePages::kOff),
          directory_(shape_.maxSegments()),
          widths_(shape_.maxSegments()),
          segments_(shape_.maxSegments()),
          cachedSegments_(kCachedTableBytes / segmentBytes()),
          spill_(keyspace_->options.spillEntries),
          swaps_(kPairs && hasWordPairCas() && fitsMarkedWords(quota)),
          mayHoldWhole_(holdsWhole(quota)),
          firstPeriod_(quota.perPeriod) {
        Group* const first = newSegment();
        for (std::size_t e = 0; e < shape_.maxSegments(); ++e) {
            directory_[e].store(first, std::memory_order_relaxed);
            widths_[e].store(static_cast<std::uint16_t>(shape_.maxSegments()),
                             std::memory_order_relaxed);
        }
        segments_[0] = first;
        segmentCount_.store(1, std::memory_order_release);
    }

    ~MemoryTable() override {
        keyspace_->registry.remove(*this);
        const std::size_t count = segmentCount_.load(std::memory_order_relaxed);
        for (std::size_t i = 0; i < count; ++i) {
            if constexpr (!std::is_trivially_destructible_v<Group>) {
                for (std::size_t g = 0; g < shape_.segmentGroups; ++g) {
                    segments_[i][g].~Group();
                }
            }
            segmentMemory_.give(segments_[i]);  // a chunk's are unmapped with segmentMemory_
        }
    }
    MemoryTable(const MemoryTable&) = delete;
    MemoryTable& operator=(const MemoryTable&) = delete;
    MemoryTable(MemoryTable&&) = delete;
    MemoryTable& operator=(MemoryTable&&) = delete;

    /// Calls on one key take effect in the order of their times: the time is read before the
    /// key's lock (so the lock is held for the step alone, or, in a bucket table that swaps,
    /// before the key's words). A call that finds a later write steps at that write's time
    /// where the clock is steady, and reads the clock again otherwise (`run`). Inlined, so the
    /// first read of `now` is the limiter's clock itself, not a call through `TickSource` (but
    /// on a steady clock in a large table: `stepFetchingFirst`).
    RATELIMIT_INLINE Decision step(std::string_view key, TickSource now, std::int64_t cost,
                                   StepMode mode, EachOf<M>* each = nullptr) {
        // A steady clock the limiter reads itself (the vDSO's `lfence; rdtsc`) waits for the
        // instructions before it to finish. In a table that fits a core's cache it goes first,
        // so the lookup runs beside its wait; in a larger one the key's slots are likely cache
        // misses, so their fetches start first, out of line, and overlap the read
        // (bench/README.md, "the clock and the fetches"). Other times are read first: a time
        // the caller gave has no wait to overlap (there the fetches first cost up to 8 %), and
        // `steady()`, known where `step` is inlined, folds the test away. The test is the
        // clock's `is_steady`: a system clock, which waits as long, reads first; a cheap clock
        // that declares itself steady fetches first, at the cost of a call. Either way the time
        // is read before the key's lock or words. `[[unlikely]]` keeps the small table's path
        // the straight line, whichever path a table takes more often.
        if (now.steady() && outgrowsCache()) [[unlikely]] {
            return stepFetchingFirst(key, now, cost, mode, each);
        }
        const Tick read = now();
        return stepLooked(lookupKey(key), read, now, cost, mode, each);
    }

    void reset(std::string_view key) {
        // A spilled key shares its entry, so resetting it would reset others: it is left alone.
        const auto never = [] { return Tick{0}; };
        const Lookup k = lookupKey(key);
        const Request r{TickSource(never), 0,       0,       StepMode::kPeek,
                        Action::kReset,    nullptr, nullptr, 0};
        Decision unused;
        bool moved = true;
        while (moved) {
            // Under the insert locks, so a split cannot carry the entry past the look.
            Group* const segment = segmentOf(k);
            withInsertLocks(segment, k,
                            [&](Group& x, Group& y) RATELIMIT_NO_THREAD_SAFETY_ANALYSIS {
                                moved = !holds(segment, k);
                                if (!moved) {
                                    (void)revisit(x, y, k, r, unused);
                                }
                            });
        }
    }

    void addStats(MemoryStats& stats) const override {
        stats.trackedKeys += tracked_.load(std::memory_order_relaxed);
        stats.allocatedBytes += fixedBytes() +
                                segmentCount_.load(std::memory_order_relaxed) * segmentBytes() +
                                segmentMemory_.slackBytes();
        stats.byteBound += fixedBytes() + shape_.maxSegments() * segmentBytes() +
                           segmentMemory_.maxSlackBytes() +
                           (shape_.maxSegments() * shape_.segmentGroups * kGroupSlots +
                            keyspace_->options.spillEntries) *
                               heapBytes();
        stats.spilledCalls += spilledCalls_.load(std::memory_order_relaxed);
        stats.sweeps += sweeps_.load(std::memory_order_relaxed);
        stats.sweptSlots += sweptSlots_.load(std::memory_order_relaxed);
        stats.movedKeys += moves_.load(std::memory_order_relaxed);
        stats.hugePageBytes += segmentMemory_.hugePageBytes();
    }

    [[nodiscard]] const QuotaOf<M>& quota() const noexcept override {
        return epochs_.current().value;
    }

    /// Enforces `quota` from the tick after `readNow()` (`Limiter::setLimit`), or after the
    /// latest write if that is later: each key's state is carried over by its next step
    /// (`convertedState`). A pass over the table, each slot under its lock. Throws:
    /// `std::invalid_argument` when a bucket table that swaps cannot mark the new capacity's words.
    template <class ReadNow>
    void setQuota(const QuotaOf<M>& quota, ReadNow readNow) {
        if (swaps_ && !fitsMarkedWords(quota)) {
            throwInvalidArgument(
                "Limit: a bucket of 2^{} units or more cannot replace a live limit in memory; "
                "make a new limiter",
                {std::int64_t{kMarkShift}});
        }
        // The epoch starts after every write so far, even one at a time the clock has since
        // stepped back from (a clock that is not steady, or a time a caller gave).
        const Tick latest = latestWrite();
        if (holdsWhole(quota)) {
            mayHoldWhole_.store(true, std::memory_order_relaxed);
        }
        if (quota.period != firstPeriod_.divisor()) {
            periodChanged_.store(true, std::memory_order_relaxed);
        }
        carry_.store(&convertedState<M, QuotaOf<M>>, std::memory_order_release);
        epochs_.replace(quota, [&] {
            const Tick now = readNow();
            return now > latest ? now : latest;
        });
    }

    [[nodiscard]] const Probe& probe() const noexcept { return probe_; }
    [[nodiscard]] Probe& probe() noexcept { return probe_; }

    /// How many keys sit in their home slot (`vacateHome`). For tests, with no call running.
    [[nodiscard]] std::size_t keysAtHome() noexcept {
        std::size_t atHome = 0;
        const std::size_t count = segmentCount_.load(std::memory_order_relaxed);
        for (std::size_t s = 0; s < count; ++s) {
            for (std::size_t g = 0; g < shape_.segmentGroups; ++g) {
                Group& group = segments_[s][g];
                for (std::size_t i = 0; i < kGroupSlots; ++i) {
                    if (tagAt(group, i) == 0) {
                        continue;  // empty, whatever key bytes a sweep left in it
                    }
                    const StoredKey key{group.meta[i].length(), group.slots[i].key.snapshot()};
                    atHome += placementOf(key).home == i ? 1U : 0U;
                }
            }
        }
        return atHome;
    }

    /// Whether the table's segments have outgrown `kCachedTableBytes`, so that a step on a steady
    /// clock fetches its key's slots before it reads the clock (`step`). Tables do not shrink.
    /// Public for tests.
    [[nodiscard]] bool outgrowsCache() const noexcept {
        return segmentCount_.load(std::memory_order_relaxed) > cachedSegments_;
    }

    /// Whether the directory is as splits must leave it: entry by entry, runs of consecutive
    /// entries that name one segment and record the run's length, as many runs as segments.
    /// For tests, with no call running: a split whose first entry was found wrong leaves a
    /// run whose widths disagree.
    [[nodiscard]] bool directoryIsWhole() const noexcept {
        std::size_t runs = 0;
        const Group* previous = nullptr;
        for (std::size_t e = 0; e < shape_.maxSegments(); ++runs) {
            const Group* const segment = directory_[e].load(std::memory_order_relaxed);
            const std::size_t width = widths_[e].load(std::memory_order_relaxed);
            if (segment == previous || width == 0 || width > shape_.maxSegments() - e) {
                return false;
            }
            for (const std::size_t end = e + width; e < end; ++e) {
                if (directory_[e].load(std::memory_order_relaxed) != segment ||
                    widths_[e].load(std::memory_order_relaxed) != width) {
                    return false;
                }
            }
            previous = segment;
        }
        return runs == segmentCount_.load(std::memory_order_relaxed);
    }

private:
    /// A limit the table has enforced (`setQuota`).
    using Epoch = typename LimitEpochs<QuotaOf<M>>::Epoch;

    /// A bucket's state is a word pair (`kPairs`); see "Bucket slots" below. A fixed window's
    /// and a sliding counter's are packed in two words (`kPackedWords`): each held whole on the
    /// heap where it does not fit.
    static constexpr bool kPairs = PairState<M>;
    static constexpr bool kWindowWords = CountedWindowState<M>;
    static constexpr bool kCounterWords = SlidingCounterState<M>;
    static constexpr bool kPackedWords = kWindowWords || kCounterWords;
    using PackedWords = std::conditional_t<kWindowWords, WindowWords<typename M::State>,
                                           CounterWords<typename M::State>>;
    using SlotState =
        std::conditional_t<kPairs, WordPair,
                           std::conditional_t<kPackedWords, PackedWords, typename M::State>>;

    /// A slot's key bytes and state, guarded by the slot's `SlotMeta` in its group (which
    /// clang's analysis cannot name from here), and for a bucket steppable without it: 32 bytes
    /// for every model but the sliding log.
    struct Slot {
        KeyBytes key;
        SlotState state{};
    };

    /// A spill entry: shared by keys, so it keeps no key.
    struct SpillEntry {
        SlotLock lock;
        typename M::State state RATELIMIT_GUARDED_BY(lock){};
    };

    static constexpr std::size_t kTagsPerWord = sizeof(std::uint64_t);
    static constexpr std::size_t kTagWords = (kGroupSlots + kTagsPerWord - 1) / kTagsPerWord;
    /// A group's header: its tags (16 bytes), its slots' `SlotMeta` (14), its insert lock and
    /// a spare byte.
    static constexpr std::size_t kHeaderBytes = 32;
    static constexpr std::size_t kGroupBytes = kHeaderBytes + kGroupSlots * sizeof(Slot);
    /// Groups of 32-byte slots start on 32 bytes, so that no slot straddles two cache lines.
    static constexpr std::size_t kSlotAlign = 32;
    static constexpr std::size_t kGroupAlign =
        sizeof(Slot) == kSlotAlign && kGroupBytes % kSlotAlign == 0 ? kSlotAlign : alignof(Slot);

    struct alignas(kGroupAlign) Group {
        /// Byte i % 8 of word i / 8 is slot i's tag: 0 empty, otherwise its key's (1 … 255,
        /// `placeKey`), so one load matches 8 slots at once. The last word's bytes past the
        /// slots stay 0 (`slotBytes` leaves them out of the empty slots). Written under
        /// `insertLock`; read without it as a hint, confirmed under the slot's lock or, by a
        /// look under the insert lock (`findIn`), by the slot's key.
        std::array<std::atomic<std::uint64_t>, kTagWords> tags{};
        /// Slot i's lock and its key's length: a lookup locks only slots whose tag and length
        /// are its key's.
        std::array<SlotMeta, kGroupSlots> meta{};
        /// Guards the tags, and so which slot holds which key. A `SlotMeta` whose length stays
        /// 0: one byte, where a 4-byte lock that sleeps in the kernel would not fit the header.
        /// Its waiters nap instead. It is held to place, move or free keys (a new key, a
        /// sweep, a split, which holds every group's of its segment), and to look for a key
        /// under it (a peek at or reset of a key without a slot in its first look).
        SlotMeta insertLock;
        std::array<Slot, kGroupSlots> slots{};
    };
    static_assert(sizeof(Group) == kGroupBytes, "a group is its header and its slots");

    /// The high bit of each byte of tag word w that is a slot's tag.
    static constexpr std::uint64_t slotBytes(std::size_t w) noexcept {
        const std::size_t slots = kGroupSlots - w * kTagsPerWord;
        return slots >= kTagsPerWord ? kHighBits
                                     : kHighBits >> (kTagsPerWord * (kTagsPerWord - slots));
    }

    static constexpr std::uint64_t kLowBytes = 0x0101010101010101ULL;
    static constexpr std::uint64_t kLow7Bits = 0x7f7f7f7f7f7f7f7fULL;
    static constexpr std::uint64_t kHighBits = 0x8080808080808080ULL;

    /// The high bit of every zero byte of `x`, exactly (no borrow from a neighbouring byte).
    static std::uint64_t zeroBytes(std::uint64_t x) noexcept {
        return ~(((x & kLow7Bits) + kLow7Bits) | x | kLow7Bits);
    }
    /// The high bit of every byte of `word` equal to `tag`.
    static std::uint64_t matchingBytes(std::uint64_t word, std::uint8_t tag) noexcept {
        return zeroBytes(word ^ (kLowBytes * tag));
    }
    static std::size_t byteIndex(std::uint64_t highBits) noexcept {
        return static_cast<std::size_t>(std::countr_zero(highBits)) / kTagsPerWord;
    }
    /// The high bit of each byte of tag word w of `g` that is an empty slot's.
    static std::uint64_t emptyBytes(const Group& g, std::size_t w) noexcept {
        return zeroBytes(g.tags[w].load(std::memory_order_relaxed)) & slotBytes(w);
    }
    static std::uint8_t tagAt(const Group& g, std::size_t i) noexcept {
        const std::uint64_t word = g.tags[i / kTagsPerWord].load(std::memory_order_relaxed);
        return static_cast<std::uint8_t>(word >> (kTagsPerWord * (i % kTagsPerWord)));
    }
    static void setTag(Group& g, std::size_t i, std::uint8_t tag) noexcept
        RATELIMIT_REQUIRES(g.insertLock) {
        std::atomic<std::uint64_t>& word = g.tags[i / kTagsPerWord];
        const unsigned shift = kTagsPerWord * (i % kTagsPerWord);
        constexpr std::uint64_t kByte = 0xFF;
        const std::uint64_t others = word.load(std::memory_order_relaxed) & ~(kByte << shift);
        word.store(others | (std::uint64_t{tag} << shift), std::memory_order_release);
    }

    /// A key as stored, where it lives, and the hash that picks its spill entry (reduced only
    /// when a call spills, so the step path never divides).
    struct Lookup : KeyPlacement {
        StoredKey key;
        std::uint64_t spillHash = 0;
    };

    SpillEntry& spillOf(const Lookup& k) noexcept {
        return spill_[k.spillHash % keyspace_->options.spillEntries];
    }

    [[nodiscard]] Lookup lookupKey(std::string_view key) const noexcept {
        static_assert(StoredKey::kInline == ShortKeyHash::kMaxLength);
        const Digest128 d = key.size() <= StoredKey::kInline ? keyspace_->shortKeyHasher(key)
                                                             : keyspace_->longKeyHasher(key);
        Lookup k{};
        if (key.size() <= StoredKey::kInline) {
            k.key.length = static_cast<std::uint8_t>(key.size());
            k.key.bytes = KeyBytes::padded(key);
        } else {
            k.key.length = StoredKey::kDigested;
            std::memcpy(k.key.bytes.data(), &d.low, sizeof d.low);
            std::memcpy(k.key.bytes.data() + sizeof d.low, &d.high, sizeof d.high);
        }
        placeKey(d, shape_, k);
        k.spillHash = d.high;
        return k;
    }

    /// Where a stored key lives: what a split reads to tell the keys that move, and a
    /// displacement to find a key's other group.
    [[nodiscard]] KeyPlacement placementOf(const StoredKey& key) const noexcept {
        Digest128 d{};
        if (key.length == StoredKey::kDigested) {
            std::memcpy(&d.low, key.bytes.data(), sizeof d.low);
            std::memcpy(&d.high, key.bytes.data() + sizeof d.low, sizeof d.high);
        } else {
            d = keyspace_->shortKeyHasher(std::string_view(key.bytes.data(), key.length));
        }
        KeyPlacement p;
        placeKey(d, shape_, p);
        return p;
    }

    /// The segment that holds the key's entry, if it has one: a split moves keys from it only
    /// under its groups' insert locks and each moved slot's lock.
    [[nodiscard]] Group* segmentOf(const KeyPlacement& k) const noexcept {
        return directory_[k.entry].load(std::memory_order_acquire);
    }

    /// Whether `segment` is still the key's. Callers hold an insert lock of `segment`, so the
    /// answer holds until they release it.
    [[nodiscard]] bool holds(const Group* segment, const KeyPlacement& k) const noexcept {
        return directory_[k.entry].load(std::memory_order_relaxed) == segment;
    }

    enum class Action : bool { kStep, kReset };

    /// What to do with a key's slot once it is found and locked.
    struct Request {
        TickSource clock;
        Tick now = 0;  ///< read before any lock
        std::int64_t cost = 0;
        StepMode mode = StepMode::kPeek;
        Action action = Action::kStep;
        EachOf<M>* each = nullptr;     ///< a limit set's members' decisions, when asked for
        const Epoch* epoch = nullptr;  ///< the limit it is stepped under (not for a reset)
        Tick since = 0;                ///< `epoch`'s first tick

        /// Whether the request may write the key's state: a consuming step, a refund or
        /// strikes, of a cost above 0.
        [[nodiscard]] bool writes() const noexcept { return mode != StepMode::kPeek && cost > 0; }
        /// Whether the model acts on the state before its step (`actedCold`): a refund, or
        /// strikes.
        [[nodiscard]] bool acts() const noexcept { return mode > StepMode::kConsume; }
        /// The cost the model's step is asked: a refund or strikes are answered as a zero cost.
        [[nodiscard]] std::int64_t stepCost() const noexcept { return acts() ? 0 : cost; }
        /// Whether a key without an entry takes one: a refund gives back nothing there, and a
        /// consuming cost above the capacity is refused there as anywhere, writing nothing
        /// (but a penalty's strike).
        [[nodiscard]] bool inserts(std::int64_t capacity) const noexcept {
            return cost > 0 &&
                   ((mode == StepMode::kConsume && (cost <= capacity || kRefusalsWrite<M>)) ||
                    mode == StepMode::kPenalize);
        }
    };

    /// `step` on a steady clock in a table that outgrew the cache (`outgrowsCache`), reading the
    /// clock through `TickSource`: a call beside the cache misses it overlaps. Its key's slots are
    /// fetched again where they are looked at (`stepUnlocked`, `lockOwnSlot`), which costs a hint
    /// each.
    RATELIMIT_NOINLINE Decision stepFetchingFirst(std::string_view key, TickSource now,
                                                  std::int64_t cost, StepMode mode,
                                                  EachOf<M>* each) {
        const Lookup k = lookupKey(key);
        prefetchLookup(segmentOf(k), k);
        probe_.fetchedFirst();
        const Tick read = now();
        return stepLooked(k, read, now, cost, mode, each);
    }

    /// `step` for the key `k`, the clock read at `read`.
    RATELIMIT_INLINE Decision stepLooked(const Lookup& k, Tick read, TickSource now,
                                         std::int64_t cost, StepMode mode, EachOf<M>* each) {
        // The epoch after the clock (see `LimitEpochs`).
        Tick since = 0;
        const Epoch& epoch = epochs_.current(since);
        probe_.epochRead();
        const Request r{now,  read < since ? since : read, cost, mode, Action::kStep, each, &epoch,
                        since};
        Group* const segment = segmentOf(k);
        if constexpr (kPairs) {
            if (swaps_) {
                return stepSwapping(segment, k, r);
            }
        }
        return stepLocked(segment, k, r);
    }

    /// Steps a key's `state`, under its lock. The epoch was read after the call's clock, so a
    /// step at that time writes before any later change's `since` (`LimitEpochs`); a step that
    /// finds the key written after that time (by a step that may have read a later epoch)
    /// checks the epoch once more (`answerFor`). A bucket's usual such call (two threads on
    /// one key, a steady clock) is answered inline at that write (`answersAtLast`): out of
    /// line, each retry of its swap took longer than the first try, so the other thread's
    /// next write failed it again, and two threads on one key took up to twice the time per
    /// check (bench/README.md, "Two threads on one key"). A window steps under its lock,
    /// without retries, and inlined there its step waited for the state before it placed the
    /// time in its window. The other paths run out of line on a copy of the state, so that
    /// the inlined step knows they were not taken (the late-call rule folds away: it steps at
    /// a time no earlier than `last`), and neither the decision nor the state has its address
    /// taken on the inlined path: either would put it on the stack, where copying it out
    /// stalled every step on store forwarding (bench/README.md, "The decision's copies"; a
    /// bucket's state is a local decoded from its words).
    RATELIMIT_INLINE Decision run(typename M::State& state, const Request& r) {
        const Tick last = M::lastWrite(state);
        if constexpr (std::is_trivially_copyable_v<typename M::State>) {
            Tick now = r.now;
            if (last > now) [[unlikely]] {
                if (!(kPairs && answersAtLast(last, r))) {
                    return kept(state, r, runLate(state, r, last));
                }
                now = last;  // as `answeredAt`: after r.now, so after the epoch's start too
            }
            return runAt(state, r, *r.epoch, r.since, now, last);
        } else {
            return runInPlace(state, r, answerFor(last, r));
        }
    }

    /// What a step out of line made: its decision, and the state to keep when the call writes.
    struct Stepped {
        Decision decision;
        typename M::State state;
    };

    /// `stepped`'s decision, its state kept in `state` when the call writes.
    RATELIMIT_INLINE static Decision kept(typename M::State& state, const Request& r,
                                          const Stepped& stepped) {
        if (r.writes()) {
            state = stepped.state;
        }
        return stepped.decision;
    }

    /// `run` for a key written after the call's time (`last`) that `run` does not answer
    /// inline: any model's but a bucket's, and a bucket's on a clock that is not steady,
    /// further back than a late call, or with the call's epoch replaced since; and
    /// `runPlainCold`'s steps of a spill entry or a fresh bucket, late or not. Answered as
    /// `answerFor` says (for a key written at or before the call's time, that is `run`'s
    /// answer). Not rare where threads share a window's key, so it keeps a copy of the step of
    /// its own, not the cold one of `runPreparedCold` (bench/README.md, "One copy of the
    /// model's step fewer").
    RATELIMIT_NOINLINE Stepped runLate(typename M::State state, const Request& r, Tick last) {
        const Answer a = answerFor(last, r);
        // Left to right: the step, then the state it wrote.
        return Stepped{runAt(state, r, *a.epoch, a.since, a.now, last), state};
    }

    /// `run` under `epoch` (first tick `since`), answered at `now`, the key last written at
    /// `last`. A state of an earlier epoch is carried over, and a refund or strikes act, out of
    /// line (`runPreparedCold`).
    RATELIMIT_INLINE Decision runAt(typename M::State& state, const Request& r, const Epoch& epoch,
                                    Tick since, Tick now, Tick last) {
        // One return, of a call either way: a named decision returned beside another would be
        // built on the stack and copied out.
        return last < since || r.acts()
                   ? kept(state, r, runPreparedCold(state, r, epoch, since, now))
                   : stepCopy(state, r, epoch.value, now);
    }

    /// One step of a copy of `state`, kept when the call writes: one copy of the model's step
    /// for peeks and writes alike.
    RATELIMIT_INLINE Decision stepCopy(typename M::State& state, const Request& r,
                                       const QuotaOf<M>& quota, Tick now) {
        typename M::State next = state;
        // Not const: GCC 12 builds a const local apart and copies it out.
        Decision d = applyStep<M>(next, quota, now, r.stepCost(), r.each);
        if (r.writes()) {
            state = next;
        }
        return d;
    }

    /// `runAt` for a state made under an earlier epoch, or a refund or strikes, on a copy of the
    /// state (`stepPrepared`).
    RATELIMIT_COLD Stepped runPreparedCold(typename M::State state, const Request& r,
                                           const Epoch& epoch, Tick since, Tick now) {
        // Left to right: the step, then the state it wrote.
        return Stepped{stepPrepared(state, r, epoch, since, now), state};
    }

    /// The step of `state` under `epoch` (first tick `since`) at `now`, for the rare paths: a
    /// state made under an earlier epoch is carried over first (`carriedCold`), and a refund or
    /// strikes act on it (`actedCold`), then are answered as a zero cost.
    RATELIMIT_INLINE Decision stepPrepared(typename M::State& state, const Request& r,
                                           const Epoch& epoch, Tick since, Tick now) {
        if (M::lastWrite(state) < since) {
            state = carriedCold(std::move(state), epoch, now);
        }
        Tick late = 0;
        if (r.acts()) {
            state = actedCold(std::move(state), r, epoch, now, late);
        }
        return applyStep<M>(state, epoch.value, now, r.stepCost(), r.each, late);
    }

    /// The time a step is answered at: the call's, unless another call wrote a later time
    /// (`last`) since this one read the clock. Steps take effect in the order of their times:
    /// a steady clock read that later time while this call was under way, so this call steps
    /// at it, with no clock read under the lock. Otherwise (another clock, which may really
    /// have stepped back, or a time further back than a late call's) the clock is read again,
    /// and the model rebases on a real step. Never before the limit's epoch.
    [[nodiscard]] RATELIMIT_INLINE static Tick answeredAt(Tick last, const Request& r) {
        Tick now = r.now;
        if (now < last) {
            const Tick read = stepsAtLast(last, r) ? last : r.clock();
            now = read < r.since ? r.since : read;
        }
        return now;
    }

    /// For a call whose time is before `last`: whether that time was stale when the key was
    /// written at `last` (a steady clock, and no further back than a late call), so the call
    /// steps at `last` rather than reading the clock again.
    [[nodiscard]] static bool stepsAtLast(Tick last, const Request& r) noexcept {
        return r.clock.steady() && satSub(last, r.now) <= r.epoch->value.lateTolerance;
    }

    /// Whether a step on a key last written at `last` writes under the call's own epoch: false
    /// only when the key was written after the call's time, the call writes, and that epoch
    /// has been replaced.
    [[nodiscard]] bool keepsEpoch(Tick last, const Request& r) const noexcept {
        return last <= r.now || !r.writes() || epochs_.isCurrent(*r.epoch);
    }

    /// For a call whose time is before `last`: whether `answerFor` answers it at `last` under
    /// its own epoch (`run` then steps a bucket's inline).
    [[nodiscard]] bool answersAtLast(Tick last, const Request& r) const noexcept {
        return stepsAtLast(last, r) && keepsEpoch(last, r);
    }

    /// The epoch a step writes under (first tick `since`), and the time it is answered at there.
    struct Answer {
        const Epoch* epoch;
        Tick since;
        Tick now;
    };

    /// Where a step on a key last written at `last` is answered: at `answeredAt` under the
    /// call's epoch, unless the key was written after the call's time and the call writes: the
    /// key may then have been written under a later epoch, and a step of the earlier one would
    /// read that state by the wrong limit, so the epoch is checked again. After `answeredAt`,
    /// which may read the clock again: a change that publishes its epoch after the check reads
    /// its clock after that read too, so the step's time stays before the change's `since`.
    [[nodiscard]] RATELIMIT_INLINE Answer answerFor(Tick last, const Request& r) const {
        const Tick now = answeredAt(last, r);
        if (!keepsEpoch(last, r)) [[unlikely]] {
            return renewedCold(last, r);
        }
        return {r.epoch, r.since, now};
    }

    /// For a step whose epoch was replaced before it wrote, on a key last written at `last`:
    /// the epoch in force, and the time the step is answered at under it (no earlier than its
    /// start).
    [[nodiscard]] RATELIMIT_COLD Answer renewedCold(Tick last, const Request& r) const {
        Request again = r;
        for (;;) {
            again.epoch = &epochs_.current(again.since);
            again.now = r.now < again.since ? again.since : r.now;
            const Tick now = answeredAt(last, again);
            if (epochs_.isCurrent(*again.epoch)) {
                return {again.epoch, again.since, now};
            }
        }
    }

    /// `run` for the sliding log's runs, answered as `a` says: a write steps them in place. A
    /// peek, a state of an earlier epoch or an action goes out of line (`runInPlaceRare`), so
    /// that the inlined step knows none was taken (as `runAt` does for the other models).
    RATELIMIT_INLINE Decision runInPlace(typename M::State& state, const Request& r,
                                         const Answer& a) {
        if (!r.writes() || r.acts() || M::lastWrite(state) < a.since) [[unlikely]] {
            return runInPlaceRare(state, r, a);
        }
        return applyStep<M>(state, a.epoch->value, a.now, r.cost, r.each);
    }

    /// `runInPlace` for a peek (on a copy of the runs), a state carried over from an earlier
    /// epoch, or a refund or strikes (`stepPrepared`). A call that writes nothing (a zero
    /// cost's refund or strikes included) is answered as a peek.
    RATELIMIT_NOINLINE Decision runInPlaceRare(typename M::State& state, const Request& r,
                                               const Answer& a) {
        if (!r.writes()) {
            typename M::State copy = state;
            Request peek = r;
            peek.mode = StepMode::kPeek;
            return stepPrepared(copy, peek, *a.epoch, a.since, a.now);
        }
        return stepPrepared(state, r, *a.epoch, a.since, a.now);
    }

    /// `state`, made under an earlier epoch, carried over to `epoch` at `now`.
    RATELIMIT_COLD typename M::State carriedCold(typename M::State state, const Epoch& epoch,
                                                 Tick now) {
        const Epoch& from = LimitEpochs<QuotaOf<M>>::at(epoch, M::lastWrite(state));
        return carry_.load(std::memory_order_acquire)(state, from.value, epoch.value, now);
    }

    /// `state` after a refund gives back (`Limiter::refund`, which only refundable models
    /// offer) or strikes are given (`Limiter::penalize`, penalized models only), at `now`
    /// moved to the time the call is answered at, `late` after it (`applyAction`).
    RATELIMIT_COLD typename M::State actedCold(typename M::State state, const Request& r,
                                               const Epoch& epoch, Tick& now, Tick& late) {
        late = applyAction<M>(r.mode, state, epoch.value, now, r.cost, r.each);
        return state;
    }

    /// A slot and its lock, held by whoever has it (clang's analysis cannot follow a lock out of
    /// a function, so the functions that return one and their callers opt out of it); empty
    /// when no slot was found.
    struct Locked {
        Slot* slot = nullptr;
        SlotMeta* meta = nullptr;

        explicit operator bool() const noexcept { return slot != nullptr; }
    };

    /// Among many keys a key's groups and its slot are cache misses: starts the key's home slots
    /// and the second group's tags, so a key at home waits for one miss, not two or three in a
    /// row. A slot's key and state may sit in two cache lines (not in a group of 32-byte
    /// slots, `kGroupAlign`).
    static void prefetchLookup(Group* segment, const Lookup& k) noexcept {
        Group& first = segment[k.groups[0]];
        Group& second = segment[k.groups[1]];
        __builtin_prefetch(&first.slots[k.home].key);
        __builtin_prefetch(&first.slots[k.home].state);
        __builtin_prefetch(lastByte(first.slots[k.home].state));
        __builtin_prefetch(&second);
        __builtin_prefetch(&second.slots[k.home].key);
        __builtin_prefetch(&second.slots[k.home].state);
        __builtin_prefetch(lastByte(second.slots[k.home].state));
    }

    /// The last byte of a slot's state: a state wider than 16 bytes (a limit set's) may end in
    /// the next cache line.
    static const char* lastByte(const SlotState& state) noexcept {
        // NOLINTNEXTLINE(*-reinterpret-cast): an address to prefetch, never read through
        return reinterpret_cast<const char*>(&state) + sizeof(SlotState) - 1;
    }

    /// Calls `visit(i)` for each slot `i` of `g` tagged `tag`, until one returns true; returns
    /// whether one did. A tag is only a hint: the slot may be another key's by the visit.
    template <class Visit>
    static bool visitTagged(const Group& g, std::uint8_t tag, Visit visit) {
        for (std::size_t w = 0; w < kTagWords; ++w) {
            std::uint64_t match = matchingBytes(g.tags[w].load(std::memory_order_acquire), tag);
            for (; match != 0; match &= match - 1) {
                if (visit(w * kTagsPerWord + byteIndex(match))) {
                    return true;
                }
            }
        }
        return false;
    }

    /// The key's slot in `segment`, returned locked, or none when the key has no slot there.
    Locked lockOwnSlot(Group* segment, const Lookup& k) RATELIMIT_NO_THREAD_SAFETY_ANALYSIS {
        prefetchLookup(segment, k);
        const Locked s = lockOwnSlot(segment[k.groups[0]], k);
        return s ? s : lockOwnSlot(segment[k.groups[1]], k);
    }

    /// The key's slot in `g`, returned locked, or none.
    Locked lockOwnSlot(Group& g, const Lookup& k) RATELIMIT_NO_THREAD_SAFETY_ANALYSIS {
        Locked found;
        visitTagged(g, k.tag, [&](std::size_t i) RATELIMIT_NO_THREAD_SAFETY_ANALYSIS {
            if (!g.meta[i].lockIfLength(k.key.length)) {
                return false;  // a key of another length
            }
            const bool mine = k.key.bytes.matches(g.slots[i].key) && tagAt(g, i) == k.tag;
            probe_.slotLocked(!mine);
            if (mine) {
                found = {&g.slots[i], &g.meta[i]};
                return true;
            }
            g.meta[i].unlock();
            return false;
        });
        return found;
    }

    /// Always inlined: GCC 12 left it out of line once `place` took no counts from it, a call
    /// on every locked step (a window's step, time given, 1.10× as long).
    RATELIMIT_INLINE Decision stepLocked(Group* segment, const Lookup& k,
                                         const Request& r) RATELIMIT_NO_THREAD_SAFETY_ANALYSIS {
        if (const Locked s = lockOwnSlot(segment, k)) {
            // Returned as it is built: copied into a `Decision` declared here, the step's
            // 48 bytes stalled the call on a store-forwarding miss (15 % of a hot key's time).
            const SlotMetaGuard guard(*s.meta, kAdoptLock);
            return stepHeldHot(s.slot->state, r);
        }
        return place(segment, k, r);
    }

    /// A bucket table that swaps: the key's words swapped without a lock, or, where they are
    /// sealed (the slot changing hands) or the key has none, the locked path, out of line: the
    /// swap's path with it inlined took 1.04-1.11× as long.
    Decision stepSwapping(Group* segment, const Lookup& k, const Request& r) {
        Decision d;
        if (!stepUnlocked(segment, k, r, d)) {
            d = stepLockedCold(segment, k, r);
        }
        return d;
    }

    RATELIMIT_COLD Decision stepLockedCold(Group* segment, const Lookup& k, const Request& r) {
        return stepLocked(segment, k, r);
    }

    /// Whether a locked step on the hot path runs in a call of its own (`stepHeldOutOfLine`):
    /// where the state is plain (trivially copyable) and locked. That is the windows', and that
    /// of every limit set, penalty or tier without a sliding log among its members (a set's
    /// bucket is a plain member, not a word pair). Not the sliding log's, whose runs are not
    /// plain and whose model step (`stepAt`) is already a call, so its table step stays inline;
    /// not a lone bucket's, whose locked step is the fallback of the unlocked one where the
    /// table swaps (`swaps_`), and reads the mode again after its atomic load of the words (GCC
    /// built both copies alike).
    static constexpr bool kHeldStepCall =
        std::is_trivially_copyable_v<typename M::State> && !kPairs;

    /// The step of a held slot on the hot path. Where `kHeldStepCall`, the caller keeps the
    /// key's lookup inlined, and a consuming call, the common one, runs its own copy of the
    /// step, in which the request's tests of its mode (`writes`, `acts`) fold.
    RATELIMIT_INLINE Decision stepHeldHot(SlotState& state, const Request& r) {
        if constexpr (kHeldStepCall) {
            return r.mode == StepMode::kConsume ? stepHeldOutOfLine<true>(state, r)
                                                : stepHeldOutOfLine<false>(state, r);
        } else {
            return stepHeld(state, r);
        }
    }

    /// `stepHeldInline` in a call; where `Consuming`, the caller has just tested that the call
    /// consumes, and telling the compiler so lets `writes()` and `acts()` fold.
    template <bool Consuming>
    RATELIMIT_NOINLINE Decision stepHeldOutOfLine(SlotState& state, const Request& r) {
        if constexpr (Consuming) {
            RATELIMIT_ASSUME(r.mode == StepMode::kConsume);
        }
        return stepHeldInline(state, r);
    }

    /// `stepHeldInline`, inlined where the compiler chooses: on the cold paths (`runCold`), and
    /// on the hot paths of the sliding log (and of sets, penalties and tiers with one) and of
    /// the lone buckets, in the shape GCC gives them. The sliding log's was measured
    /// (bench/README.md, "a consuming step of its own"); a lone bucket's hot path is the
    /// unlocked step where the table swaps.
    Decision stepHeld(SlotState& state, const Request& r) { return stepHeldInline(state, r); }

    /// Steps the state of a slot whose lock the caller holds.
    RATELIMIT_INLINE Decision stepHeldInline(SlotState& state, const Request& r) {
        if constexpr (kPairs) {
            WordPair seen = loadWords(state);
            for (;;) {
                WordPair next;
                Decision d = stepWords(seen, r, next, swaps_);
                if (!swaps_) {
                    state = next;
                    return d;
                }
                if (compareExchangeWords(state, seen, next)) {
                    return d;
                }
            }
        } else if constexpr (kPackedWords) {
            if (!state.packed()) [[unlikely]] {
                return runWholeCold(state, r);
            }
            return runPackedWords<true>(state, r);
        } else {
            return run(state, r);
        }
    }

    /// Steps a state packed in words (`kPackedWords`): the state unpacked, run, and packed again
    /// when the call writes, as a bucket's words are (`stepWords`). `Packed`: the caller found
    /// the state in the words, not on the heap.
    template <bool Packed>
    RATELIMIT_INLINE Decision runPackedWords(SlotState& words, const Request& r) {
        typename M::State state = unpackWords<Packed>(words);
        const Tick lastBefore = state.last;
        Decision d = run(state, r);
        if (r.writes()) {
            packWords<Packed>(words, state, lastBefore);
        }
        return d;
    }

    /// The state in packed words; a sliding counter's words take the period its state was made
    /// under (`periodOf`).
    template <bool Packed>
    [[nodiscard]] RATELIMIT_INLINE typename M::State unpackWords(const SlotState& words) const {
        if constexpr (kCounterWords) {
            const auto periodAt = [this](Tick last) -> const Divisor& { return periodOf(last); };
            return Packed ? words.unpack(periodAt) : words.get(periodAt);
        } else {
            return Packed ? words.unpack() : words.get();
        }
    }

    /// Packs `state`, stepped from one last written at `lastBefore`, back into its words.
    template <bool Packed>
    RATELIMIT_INLINE void packWords(SlotState& words, const typename M::State& state,
                                    [[maybe_unused]] Tick lastBefore) {
        if constexpr (kCounterWords) {
            const auto periodAt = [this](Tick last) -> const Divisor& { return periodOf(last); };
            if constexpr (Packed) {
                words.pack(state, lastBefore, periodAt);
            } else {
                words.set(state, periodAt);
            }
        } else if constexpr (Packed) {
            words.pack(state);
        } else {
            words.set(state);
        }
    }

    /// The period (its divisor) of the limit a sliding counter's state last written at `last`
    /// was made under: `CounterWords` derives the state's `into` from it. The first limit's
    /// while no limit change has changed the period; otherwise the epoch `last` falls in
    /// (`LimitEpochs::at`, as `carriedCold` finds it). A call that reads `periodChanged_` false
    /// under the slot's lock reads it after every write to the slot, and each of those writers
    /// read its epoch after the flag was set, if that epoch's period was another; so no state in
    /// the slot was made under another period, nor is the call's own epoch of another.
    [[nodiscard]] RATELIMIT_INLINE const Divisor& periodOf(Tick last) const {
        if (periodChanged_.load(std::memory_order_relaxed)) [[unlikely]] {
            return periodAtCold(last);
        }
        return firstPeriod_;
    }

    [[nodiscard]] RATELIMIT_COLD const Divisor& periodAtCold(Tick last) const {
        return LimitEpochs<QuotaOf<M>>::at(epochs_.current(), last).value.perPeriod;
    }

    RATELIMIT_COLD Decision runWholeCold(SlotState& words, const Request& r) {
        return runPackedWords<false>(words, r);
    }

    /// `stepHeld` out of line, for the cold paths, and resets.
    RATELIMIT_COLD Decision runCold(SlotState& state, const Request& r) {
        if (r.action == Action::kReset) {
            resetHeld(state);
            return Decision{};
        }
        return stepHeld(state, r);
    }

    /// `run` out of line on a state of the model's own type: a spill entry's, or a bucket's
    /// fresh state before it is published in its slot's words. A plain state takes `runLate`
    /// and its copy of the model's step, rather than a copy of its own: each is about 1 KB of
    /// code that every file making a call compiles.
    RATELIMIT_COLD Decision runPlainCold(typename M::State& state, const Request& r) {
        if constexpr (std::is_trivially_copyable_v<typename M::State>) {
            return kept(state, r, runLate(state, r, M::lastWrite(state)));
        } else {
            return run(state, r);
        }
    }

    // Bucket slots (`kPairs`). A bucket's state is a word pair: `last`, then `deficit`. Where
    // the table swaps (`swaps_`), the deficit's word carries marks above the deficit (which
    // is at most the capacity, below 2^54: `kMarkShift` bits): 8 bits of the key's hash (its
    // mark), a generation bit that flips whenever the slot changes hands, and a seal that
    // a holder of the slot's lock sets while it hands the slot over, moves or frees it. A step
    // without the lock reads the words, then the key, and swaps only words still marked for
    // its key and unsealed: a slot that changed hands in between was sealed first, so the swap
    // fails. Steps under the lock swap too, as unlocked ones may write meanwhile. Where the
    // table does not swap (no 16-byte compare-and-swap, ThreadSanitizer builds, a capacity of
    // 2^54 units or more) the words hold the state unmarked, under the slot's lock alone.
    static constexpr unsigned kMarkBits = 8;
    static constexpr unsigned kGenerationBit = 62;
    /// Where a bucket's marks start in its deficit's word: fixed, so that a limit may change
    /// (`setQuota`) while unlocked steps read the words.
    static constexpr unsigned kMarkShift = kGenerationBit - kMarkBits;

    /// Whether a bucket of `quota` fits the deficit's bits of marked words.
    static bool fitsMarkedWords(const QuotaOf<M>& quota) noexcept {
        return std::bit_width(static_cast<std::uint64_t>(quota.capacityUnits)) <= kMarkShift;
    }
    static constexpr std::uint64_t kGeneration = std::uint64_t{1} << kGenerationBit;
    static constexpr std::uint64_t kSeal = std::uint64_t{1} << 63;

    [[nodiscard]] static constexpr std::uint64_t deficitBits() noexcept {
        return (std::uint64_t{1} << kMarkShift) - 1;
    }
    /// The bits that say whose words they are: the key's mark and the seal.
    [[nodiscard]] static constexpr std::uint64_t ownerBits() noexcept {
        return ~deficitBits() & ~kGeneration;
    }
    [[nodiscard]] std::uint64_t ownerOf(const KeyPlacement& k) const noexcept {
        return (std::uint64_t{k.mark} << kMarkShift) & ~deficitBits() & ~kGeneration & ~kSeal;
    }

    /// The state in words `w`, marked where `marked` (by default, where the table swaps).
    [[nodiscard]] typename M::State decode(const WordPair& w) const noexcept {
        return decode(w, swaps_);
    }
    [[nodiscard]] static typename M::State decode(const WordPair& w, bool marked) noexcept {
        typename M::State state;
        state.last = static_cast<Tick>(w.low);
        state.deficit = static_cast<std::int64_t>(marked ? w.high & deficitBits() : w.high);
        return state;
    }

    /// `state` in words, with the marks `marks` where the table swaps (or where `marked`).
    [[nodiscard]] WordPair encode(const typename M::State& state,
                                  std::uint64_t marks) const noexcept {
        return encode(state, marks, swaps_);
    }
    [[nodiscard]] static WordPair encode(const typename M::State& state, std::uint64_t marks,
                                         bool marked) noexcept {
        return {static_cast<std::uint64_t>(state.last),
                static_cast<std::uint64_t>(state.deficit) | (marked ? marks : 0)};
    }

    /// One step over the words `seen`, marked where `marked`: the decision, and in `next` the
    /// words to swap in. An unlocked step knows its words are marked, and need not ask.
    Decision stepWords(const WordPair& seen, const Request& r, WordPair& next, bool marked) {
        typename M::State state = decode(seen, marked);
        Decision d = run(state, r);
        next = r.writes() ? encode(state, seen.high & ~deficitBits(), marked) : seen;
        return d;
    }

    /// Steps the key in its slot without the slot's lock; false, having written nothing, when
    /// it finds no slot of the key's with its words unsealed.
    bool stepUnlocked(Group* segment, const Lookup& k, const Request& r, Decision& out) {
        prefetchLookup(segment, k);
        for (const std::uint64_t group : k.groups) {
            Group& g = segment[group];
            if (visitTagged(g, k.tag, [&](std::size_t i) {
                    return stepUnlocked(g.slots[i], g.meta[i], k, r, out);
                })) {
                return true;
            }
        }
        return false;
    }

    bool stepUnlocked(Slot& s, SlotMeta& meta, const Lookup& k, const Request& r, Decision& out) {
        WordPair seen = loadWords(s.state);
        for (;;) {
            // The key is read after the words, so a slot handed to another key since was
            // sealed before the read, and the swap below fails.
            if ((seen.high & ownerBits()) != ownerOf(k) || meta.length() != k.key.length ||
                !k.key.bytes.matches(s.key)) {
                return false;
            }
            // Kept local until the swap succeeds: written to `out` on every try, more of the
            // decision was stored before the locked swap, which waits for every earlier store,
            // and two threads on one key fell into step, their first swaps failing about half
            // the time, in a quarter of the runs rather than one in ten or fewer
            // (bench/README.md, "Two threads on one key: runs in step").
            WordPair next;
            const Decision d = stepWords(seen, r, next, true);
            if (compareExchangeWords(s.state, seen, next)) {
                out = d;
                probe_.slotLocked(false);
                return true;
            }
        }
    }

    /// A consistent read of a held slot's state (where unlocked steps may write the words, a
    /// swap of the words for themselves confirms them).
    decltype(auto) heldState(SlotState& state) {
        if constexpr (kPairs) {
            WordPair seen = loadWords(state);
            while (swaps_ && !compareExchangeWords(state, seen, seen)) {
            }
            return decode(seen);
        } else if constexpr (kCounterWords) {
            return state.get([this](Tick last) -> const Divisor& { return periodOf(last); });
        } else if constexpr (kPackedWords) {
            return state.get();
        } else {
            return static_cast<const typename M::State&>(state);
        }
    }

    /// Seals a held slot's words, so no unlocked step writes them until they are published
    /// again, and returns them as they were.
    WordPair sealWords(WordPair& words) {
        WordPair seen = loadWords(words);
        while (swaps_ && (seen.high & kSeal) == 0 &&
               !compareExchangeWords(words, seen, {seen.low, seen.high | kSeal})) {
        }
        return seen;
    }

    /// Gives a held, sealed slot's words to the key `k` with its state `state`: a new mark,
    /// the generation flipped, unsealed.
    void publishWords(WordPair& words, const typename M::State& state, const KeyPlacement& k) {
        const std::uint64_t generation = (loadWords(words).high & kGeneration) ^ kGeneration;
        storeWords(words, encode(state, ownerOf(k) | generation));
    }

    void resetHeld(SlotState& state) {
        if constexpr (kPairs) {
            WordPair seen = loadWords(state);
            for (;;) {
                const WordPair fresh = encode(typename M::State{}, seen.high & ~deficitBits());
                if (!swaps_) {
                    state = fresh;
                    return;
                }
                if (compareExchangeWords(state, seen, fresh)) {
                    return;
                }
            }
        } else {
            state = SlotState{};
        }
    }

    /// Whether a held slot's entry may be taken at `now` (`reclaimable`). A bucket's that may
    /// comes back sealed, to be handed over or freed.
    bool takeIfReclaimable(SlotState& state, Tick now) {
        if constexpr (kPairs) {
            if (!reclaimable(heldState(state), now)) {
                return false;
            }
            const WordPair before = sealWords(state);
            if (reclaimable(decode(before), now)) {
                return true;
            }
            storeWords(state, before);  // stepped meanwhile: unsealed as it was
            return false;
        } else {
            return reclaimable(heldState(state), now);
        }
    }

    /// Runs the request on the key's slot in `g`, if it has one. Under the group's insert lock
    /// no slot's key changes (keys are placed, moved and freed only under it), so the look
    /// compares keys without slot locks and locks only the key's own slot.
    RATELIMIT_COLD bool findIn(Group& g, const Lookup& k, const Request& r, Decision& out)
        RATELIMIT_REQUIRES(g.insertLock) {
        std::size_t own = kGroupSlots;
        visitTagged(g, k.tag, [&](std::size_t i) {
            const bool mine =
                g.meta[i].length() == k.key.length && k.key.bytes.matches(g.slots[i].key);
            own = mine ? i : own;
            return mine;
        });
        if (own == kGroupSlots) {
            return false;
        }
        const SlotMetaGuard guard(g.meta[own]);
        probe_.slotLocked(false);
        out = runCold(g.slots[own].state, r);
        return true;
    }

    /// Looks for the key again, under both groups' insert locks, so the answer holds until
    /// they are released: another call may have placed the key since the call's first look.
    /// (No count of each group's tag changes tells whether it may have: the look locks no other
    /// key's slot, and a count took a header's 4 bytes, `kHeaderBytes`.)
    RATELIMIT_COLD bool revisit(Group& first, Group& second, const Lookup& k, const Request& r,
                                Decision& out)
        RATELIMIT_REQUIRES(first.insertLock, second.insertLock) {
        return findIn(first, k, r, out) || (&second != &first && findIn(second, k, r, out));
    }

    /// How a call on a key without an entry in the segment it looked at ended.
    enum class Placed : std::uint8_t {
        kDone,   ///< answered
        kMoved,  ///< the segment split meanwhile: look again
        kFull,   ///< both groups hold keys in use
        kBusy,   ///< full, but a key that could move had its other group's insert lock held
    };

    /// A key with no entry where the call looked: a call that writes takes one, any other is
    /// answered without. Both look again first, under locks that keep the answer true.
    RATELIMIT_COLD Decision place(Group* segment, const Lookup& k, const Request& r) {
        const bool writes = r.inserts(r.epoch->value.capacity);
        if (writes) {
            sweep(r.now);
        }
        Decision d;
        for (int busy = 0;;) {
            std::size_t width = 0;  // of the key's segment, when it was found full
            Placed p =
                writes ? insertAndStep(segment, k, r, d, width) : answerUnplaced(segment, k, r, d);
            if (p == Placed::kDone) {
                return d;
            }
            // A group locked by a sweep or another insert is let go of soon: look again (with
            // this call's own groups let go of, so a call that waits for them goes on) before
            // the segment counts as full.
            if (p == Placed::kBusy && ++busy > kBusyLooks) {
                p = Placed::kFull;
            }
            if (p == Placed::kFull) {
                probe_.segmentFull();
                if (!grow(segment, k, width)) {
                    return spill(k, r);
                }
            }
            segment = segmentOf(k);
        }
    }

    /// A key with no entry whose call writes nothing (a peek, cost 0, a cost above the limit, a
    /// refund): answered as the entry it would get, fresh or its spill entry, without taking
    /// one.
    RATELIMIT_COLD Placed answerUnplaced(Group* segment, const Lookup& k, const Request& r,
                                         Decision& out) {
        // The time read before the locks only judges freshness, conservatively (a key fresh at
        // an earlier time stays fresh).
        const Tick hint = r.now;
        Placed p = Placed::kDone;
        bool found = false;
        withInsertLocks(segment, k, [&](Group& x, Group& y) RATELIMIT_NO_THREAD_SAFETY_ANALYSIS {
            if (!holds(segment, k)) {
                p = Placed::kMoved;
                return;
            }
            found = revisit(x, y, k, r, out);
            if (!found && !hasRoom(x, y, hint) && !mayGrow(k) &&
                (!belowMaxKeys() || displace(segment, x, y, Displace::kLook, nullptr) == nullptr)) {
                p = Placed::kFull;
            }
        });
        if (p == Placed::kMoved || found) {
            return p;
        }
        if (p == Placed::kDone) {
            typename M::State fresh{};
            // A fresh key has nothing to give back.
            out = applyStep<M>(fresh, r.epoch->value, r.now, r.stepCost(), r.each);
            return p;
        }
        out = spillCold(k, r);
        return Placed::kDone;
    }

    /// Runs `f(first, second)` on the key's groups in `segment` holding both their insert
    /// locks, taken in index order (no deadlock), so no two threads can place one key in
    /// different groups, and no split can move it. (Clang's analysis cannot follow the locks
    /// into `f`, so its callers' lambdas opt out of it.)
    template <class F>
    void withInsertLocks(Group* segment, const Lookup& k, F&& f) {
        Group& first = segment[k.groups[0]];
        Group& second = segment[k.groups[1]];
        if (&first == &second) {
            const SlotMetaGuard insert(first.insertLock);
            f(first, first);
            return;
        }
        const bool inOrder = k.groups[0] < k.groups[1];
        SlotMeta& low = inOrder ? first.insertLock : second.insertLock;
        SlotMeta& high = inOrder ? second.insertLock : first.insertLock;
        const SlotMetaGuard insertLow(low);
        const SlotMetaGuard insertHigh(high);
        f(first, second);
    }

    /// Whether a new key could get an entry of its own in `x` or `y` now.
    RATELIMIT_COLD bool hasRoom(Group& x, Group& y, Tick hint)
        RATELIMIT_REQUIRES(x.insertLock, y.insertLock) {
        if (emptySlots(x) + emptySlots(y) > 0 && belowMaxKeys()) {
            return true;
        }
        return hasFresh(x, hint) || hasFresh(y, hint);
    }

    [[nodiscard]] bool belowMaxKeys() const noexcept {
        return tracked_.load(std::memory_order_relaxed) < keyspace_->options.maxKeys;
    }

    /// Whether the key's segment may still split to make room for it.
    [[nodiscard]] bool mayGrow(const KeyPlacement& k) const noexcept {
        return belowMaxKeys() && widths_[k.entry].load(std::memory_order_relaxed) > 1;
    }

    /// An entry another key may take, or a sweep drop, at `now` (the calling key's time):
    /// fresh even at the earliest time its own key may call at. That key's time may be behind
    /// the caller's by the keys' time spread (their window phases), and a call may be late by
    /// the late-call tolerance, which is answered at its key's last write (docs/semantics.md,
    /// "Late calls"); had the entry gone, either would meet a fresh key.
    [[nodiscard]] bool reclaimable(const typename M::State& state, Tick now) const noexcept {
        // Judged by the limit it was made under (its next step carries it over).
        const Epoch& made = LimitEpochs<QuotaOf<M>>::at(epochs_.current(), M::lastWrite(state));
        return M::isFresh(state, made.value, satSub(now, reclaimLag_));
    }

    RATELIMIT_COLD bool hasFresh(Group& g, Tick hint) RATELIMIT_REQUIRES(g.insertLock) {
        for (std::size_t i = 0; i < kGroupSlots; ++i) {
            if (tagAt(g, i) == 0) {
                continue;
            }
            const SlotMetaGuard guard(g.meta[i]);
            probe_.slotLocked(true);
            if (reclaimable(heldState(g.slots[i].state), hint)) {
                return true;
            }
        }
        return false;
    }

    /// Finds or places the key and runs the request; when both its groups are full, says so
    /// with the width of its segment then (no split can run under the insert locks).
    RATELIMIT_COLD Placed insertAndStep(Group* segment, const Lookup& k, const Request& r,
                                        Decision& out, std::size_t& width) {
        Placed p = Placed::kFull;
        withInsertLocks(segment, k, [&](Group& x, Group& y) RATELIMIT_NO_THREAD_SAFETY_ANALYSIS {
            if (!holds(segment, k)) {
                p = Placed::kMoved;
                return;
            }
            bool busy = false;
            if (findOrClaim(segment, x, y, k, r, out, busy)) {
                p = Placed::kDone;
            } else {
                p = busy ? Placed::kBusy : Placed::kFull;
                width = widths_[k.entry].load(std::memory_order_relaxed);
            }
        });
        if (p == Placed::kDone && spilling_.load(std::memory_order_relaxed) &&
            spilling_.exchange(false)) {
            notify(MemoryEvent::kSpillEnded);
        }
        return p;
    }

    /// Answers a call from its key's spill entry: the table is at its bound.
    RATELIMIT_COLD Decision spill(const Lookup& k, const Request& r) {
        spilledCalls_.fetch_add(1, std::memory_order_relaxed);
        const Decision d = spillCold(k, r);
        if (!spilling_.load(std::memory_order_relaxed) && !spilling_.exchange(true)) {
            notify(MemoryEvent::kSpillStarted);
        }
        return d;
    }

    RATELIMIT_COLD Decision spillCold(const Lookup& k, const Request& r) {
        SpillEntry& s = spillOf(k);
        const SlotGuard guard(s.lock);
        return runPlainCold(s.state, r);
    }

    /// Finds or places the key in one of its groups (`x` and `y` of `segment`): an existing
    /// entry first, then an empty slot of the emptier group (the "power of two choices"), then
    /// a fresh entry, then a slot freed by moving another key to its other group (`displace`);
    /// false when none is found, or the table holds `maxKeys`, with `busy` set when a key could
    /// have moved but for a lock held.
    RATELIMIT_COLD bool findOrClaim(Group* segment, Group& x, Group& y, const Lookup& k,
                                    const Request& r, Decision& out, bool& busy)
        RATELIMIT_REQUIRES(x.insertLock, y.insertLock) {
        if (revisit(x, y, k, r, out)) {
            return true;
        }
        const Tick hint = r.now;
        const bool xFirst = emptySlots(x) >= emptySlots(y);
        const bool empty = xFirst ? (claimEmpty(x, k, r, out) || claimEmpty(y, k, r, out))
                                  : (claimEmpty(y, k, r, out) || claimEmpty(x, k, r, out));
        if (empty || claimFresh(x, k, r, hint, out) || claimFresh(y, k, r, hint, out)) {
            return true;
        }
        if (!belowMaxKeys()) {
            return false;  // a freed slot could not be claimed
        }
        const Group* const freed = displace(segment, x, y, Displace::kMove, &busy);
        if (freed == &x) {
            return claimEmpty(x, k, r, out);
        }
        return freed == &y && claimEmpty(y, k, r, out);
    }

    enum class Displace : bool { kLook, kMove };

    /// For a key whose groups `x` and `y` of `segment` are full: finds a key of theirs whose
    /// other group has an empty slot and, for `kMove`, moves it there (one step of cuckoo
    /// hashing), so that a segment fills to about 13.9 keys a group before it splits, and a
    /// table at `maxKeys` holds them in fewer groups (bench/README.md, "Memory: keys moved to
    /// their other group"). Returns the group with a slot freed (for `kLook`, that would be),
    /// or null. The other group's insert lock is only tried (it may be held by a call that
    /// waits for `x`'s or `y`'s); `*busy`, where given, says whether a try failed.
    RATELIMIT_COLD Group* displace(Group* segment, Group& x, Group& y, Displace mode, bool* busy)
        RATELIMIT_REQUIRES(x.insertLock, y.insertLock) RATELIMIT_NO_THREAD_SAFETY_ANALYSIS {
        for (Group* from : std::array<Group*, 2>{&x, &y}) {
            for (std::size_t i = 0; i < kGroupSlots; ++i) {
                KeyPlacement p;
                Group* const to = roomElsewhere(segment, *from, i, x, y, p);
                if (to == nullptr) {
                    continue;
                }
                if (mode == Displace::kLook) {
                    return from;
                }
                if (to->insertLock.try_lock()) {
                    const bool moved = moveKey(*from, i, *to, p);
                    to->insertLock.unlock();
                    if (moved) {
                        moves_.fetch_add(1, std::memory_order_relaxed);
                        return from;
                    }
                } else if (busy != nullptr) {
                    *busy = true;
                }
            }
        }
        return nullptr;
    }

    /// The other group of the key in slot i of `from` (a group of `segment`), with the key's
    /// placement in `p`, when that group is neither `x` nor `y` and has an empty slot; null
    /// otherwise, and for an empty slot.
    Group* roomElsewhere(Group* segment, Group& from, std::size_t i, const Group& x, const Group& y,
                         KeyPlacement& p) RATELIMIT_REQUIRES(from.insertLock) {
        if (tagAt(from, i) == 0) {
            return nullptr;
        }
        // Stable under the group's insert lock: keys change only under it.
        p = placementOf(StoredKey{from.meta[i].length(), from.slots[i].key.snapshot()});
        const auto index = static_cast<std::uint64_t>(&from - segment);
        Group& to = segment[p.groups[0] == index ? p.groups[1] : p.groups[0]];
        return &to == &x || &to == &y || emptySlots(to) == 0 ? nullptr : &to;
    }

    /// Moves the key in (tagged) slot i of `from` to an empty slot of `to`, its other group or
    /// `from` itself (its home there when empty; never slot i, which is not empty), as a split
    /// moves one: under both groups' insert locks and both slots' locks, its new slot tagged
    /// before its old one is emptied, so a call that finds the old one emptied looks again
    /// under the insert locks and finds the new one. A bucket's old words stay sealed; its new
    /// ones are published to the key afresh. False when `to` has no empty slot.
    RATELIMIT_COLD bool moveKey(Group& from, std::size_t i, Group& to, const KeyPlacement& p)
        RATELIMIT_REQUIRES(from.insertLock, to.insertLock) {
        const std::size_t j = emptySlotOf(to, p.home);
        if (j == kGroupSlots) {
            return false;
        }
        Slot& source = from.slots[i];
        Slot& target = to.slots[j];
        const SlotMetaGuard sourceGuard(from.meta[i]);
        // Empty: only a lookup that read a stale tag may hold it, briefly, waiting for nothing.
        const SlotMetaGuard targetGuard(to.meta[j]);
        if constexpr (kPairs) {
            const WordPair words = sealWords(source.state);  // `source` stays sealed
            (void)sealWords(target.state);
            target.key.assign(source.key.snapshot());
            to.meta[j].setLength(from.meta[i].length());
            setTag(to, j, tagAt(from, i));
            const typename M::State state = decode(words);
            noteMoved(from, to, state);
            publishWords(target.state, state, p);
        } else {
            target.key.assign(source.key.snapshot());
            to.meta[j].setLength(from.meta[i].length());
            target.state = std::move(source.state);
            source.state = SlotState{};
            noteMoved(from, to, heldState(target.state));
            setTag(to, j, tagAt(from, i));
        }
        probe_.keyMoving();  // the key in both slots: a test's probe widens the window
        source.key.assign(KeyBytes{});
        from.meta[i].setLength(0);
        setTag(from, i, 0);
        return true;
    }

    /// `noteMoved` for a state moved from group `from` to `to`: not within a group, which
    /// `latestWrite` reads whole under its insert lock, so it sees the state in one slot or the
    /// other, and the table's shared word is left alone on the insert path.
    void noteMoved(const Group& from, const Group& to, const typename M::State& state) noexcept {
        if (&from != &to) {
            noteMoved(state);
        }
    }

    /// Keeps the latest write of the states moved, to their other group or to a new segment,
    /// for `latestWrite`. Called under the insert lock of the group moved from.
    void noteMoved(const typename M::State& state) noexcept {
        const Tick last = M::lastWrite(state);
        Tick seen = movedLatest_.load(std::memory_order_relaxed);
        while (last > seen &&
               !movedLatest_.compare_exchange_weak(seen, last, std::memory_order_relaxed)) {
        }
    }

    static std::size_t emptySlots(const Group& g) noexcept {
        std::size_t n = 0;
        for (std::size_t w = 0; w < kTagWords; ++w) {
            n += static_cast<std::size_t>(std::popcount(emptyBytes(g, w)));
        }
        return n;
    }

    /// Counts one more entry against this table's `maxKeys`; false at the bound. The bound is per
    /// table: a fresh entry can only be judged fresh by its own table (its quota, its limiters'
    /// clock), so a budget shared with another table would let a flood there, once quiet, keep
    /// this table's new keys spilling for as long as that table makes no call.
    bool reserveEntry() noexcept {
        std::size_t n = tracked_.load(std::memory_order_relaxed);
        while (n < keyspace_->options.maxKeys) {
            if (tracked_.compare_exchange_weak(n, n + 1, std::memory_order_relaxed)) {
                return true;
            }
        }
        return false;
    }

    /// An empty slot of `g`, `home` if that one is empty; kGroupSlots when none is.
    static std::size_t emptySlotOf(const Group& g, std::size_t home)
        RATELIMIT_REQUIRES(g.insertLock) {
        if (tagAt(g, home) == 0) {
            return home;
        }
        for (std::size_t w = 0; w < kTagWords; ++w) {
            const std::uint64_t empty = emptyBytes(g, w);
            if (empty != 0) {
                return w * kTagsPerWord + byteIndex(empty);
            }
        }
        return kGroupSlots;
    }

    /// Gives an empty slot of `g` to the key, within the table's `maxKeys`: its home, if that
    /// one is empty or can be emptied (`vacateHome`), otherwise another.
    RATELIMIT_COLD bool claimEmpty(Group& g, const Lookup& k, const Request& r, Decision& out)
        RATELIMIT_REQUIRES(g.insertLock) {
        std::size_t i = emptySlotOf(g, k.home);
        if (i == kGroupSlots || !reserveEntry()) {
            return false;
        }
        if (i != k.home && vacateHome(g, k.home)) {
            i = k.home;
        }
        const SlotMetaGuard guard(g.meta[i]);
        probe_.slotLocked(false);
        out = assignAndRun(g, i, k, r);
        return true;
    }

    /// Empties slot `home` of `g`, which has an empty slot, for a key whose home it is, where the
    /// key in it is away from its own home: that key moves to its home, if empty, or to another
    /// slot of `g` (`moveKey`). A lookup fetches a key's home slots while it reads the tags, so
    /// a key at home costs one cache miss, and a key elsewhere two in a row; first come, first
    /// served, a third of the keys were at home among 10^5, and yielding to the key whose home
    /// it is places about two in three there (bench/README.md, "Keys at home"). A slot whose
    /// tag is 0 is empty, whatever key bytes a sweep left in it.
    RATELIMIT_COLD bool vacateHome(Group& g, std::size_t home) RATELIMIT_REQUIRES(g.insertLock) {
        if (tagAt(g, home) == 0) {
            return true;
        }
        const KeyPlacement p =
            placementOf(StoredKey{g.meta[home].length(), g.slots[home].key.snapshot()});
        return p.home != home && moveKey(g, home, g, p);
    }

    /// Gives the key a slot whose key is fresh again: free space, reused in place. The check
    /// and the hand-over happen under one hold of the slot's lock, so a concurrent step of the
    /// old key cannot slip between them.
    RATELIMIT_COLD bool claimFresh(Group& g, const Lookup& k, const Request& r, Tick hint,
                                   Decision& out) RATELIMIT_REQUIRES(g.insertLock) {
        for (std::size_t i = 0; i < kGroupSlots; ++i) {
            if (tagAt(g, i) == 0) {
                continue;
            }
            const SlotMetaGuard guard(g.meta[i]);
            probe_.slotLocked(true);
            if (takeIfReclaimable(g.slots[i].state, hint)) {
                out = assignAndRun(g, i, k, r);
                return true;
            }
        }
        return false;
    }

    /// Hands slot i of `g` to the key and runs the request. Callers hold the group's insert
    /// lock, the only place tags change, and the slot's lock.
    RATELIMIT_COLD Decision assignAndRun(Group& g, std::size_t i, const Lookup& k, const Request& r)
        RATELIMIT_REQUIRES(g.insertLock, g.meta[i]) {
        Slot& s = g.slots[i];
        if constexpr (kPairs) {
            (void)sealWords(s.state);  // an empty slot's may be its first, unsealed zeros
        }
        s.key.assign(k.key.bytes);
        g.meta[i].setLength(k.key.length);
        setTag(g, i, k.tag);
        if constexpr (kPairs) {
            typename M::State fresh{};
            Decision d = runPlainCold(fresh, r);
            publishWords(s.state, fresh, k);
            return d;
        } else {
            s.state = SlotState{};
            return runCold(s.state, r);
        }
    }

    /// Splits the key's segment, `segment` of `seenWidth` entries when the call found it full,
    /// in two; false when it has one entry left. True also when another call split it
    /// meanwhile (which narrows it), whether the key stayed or moved: the caller looks again
    /// either way. (Calls that found one segment full together split it once, not once each
    /// down to one entry, after which the next full pair of groups would spill.)
    RATELIMIT_COLD bool grow(Group* segment, const KeyPlacement& k, std::size_t seenWidth) {
        void* filled = nullptr;
        const bool grew = splitFull(segment, k, seenWidth, filled);
        segmentMemory_.makeHuge(filled);  // outside the split lock: it may copy 2 MiB
        return grew;
    }

    /// `grow`'s split, under the split lock; `filled` is the chunk of segments it filled, if
    /// any (`SegmentMemory::takeFilled`).
    RATELIMIT_COLD bool splitFull(Group* segment, const KeyPlacement& k, std::size_t seenWidth,
                                  void*& filled) {
        const SlotGuard guard(splitLock_);
        const std::size_t width = widths_[k.entry].load(std::memory_order_relaxed);
        if (!holds(segment, k) || width != seenWidth) {
            return true;
        }
        if (width == 1 || !belowMaxKeys()) {
            return false;
        }
        // A segment's entries are consecutive: the first split leaves [0, e) and [e, all), and
        // every split after cuts one such range in two.
        std::size_t base = k.entry;
        while (base > 0 && directory_[base - 1].load(std::memory_order_relaxed) == segment) {
            --base;
        }
        const std::size_t end = base + width;
        split(segment, base, end - splitWidth(width), end);
        filled = segmentMemory_.takeFilled();
        return true;
    }

    /// Moves the keys of `segment` whose directory entry lies in [cut, end), the upper part of
    /// its entries [base, end), to a new segment, slot for slot (same group, same index, same
    /// tag), and points that part of the directory at it. It holds every insert lock of
    /// `segment` (so no key is placed or looked for under them meanwhile) and each moved slot's
    /// lock (so no step runs on it while it moves); a call that found the slot emptied looks
    /// again.
    RATELIMIT_COLD void split(Group* segment, std::size_t base, std::size_t cut, std::size_t end)
        RATELIMIT_REQUIRES(splitLock_) RATELIMIT_NO_THREAD_SAFETY_ANALYSIS {
        Group* const upper = newSegment();
        for (std::size_t g = 0; g < shape_.segmentGroups; ++g) {
            segment[g].insertLock.lock();
        }
        for (std::size_t g = 0; g < shape_.segmentGroups; ++g) {
            for (std::size_t i = 0; i < kGroupSlots; ++i) {
                const std::uint8_t tag = tagAt(segment[g], i);
                if (tag == 0) {
                    continue;
                }
                Slot& from = segment[g].slots[i];
                SlotMeta& fromMeta = segment[g].meta[i];
                const SlotMetaGuard guard(fromMeta);
                const StoredKey key{fromMeta.length(), from.key.snapshot()};
                if (placementOf(key).entry < cut) {
                    continue;
                }
                Slot& to = upper[g].slots[i];
                to.key.assign(from.key.snapshot());
                if constexpr (kPairs) {
                    const WordPair words = sealWords(from.state);  // `from` stays sealed
                    noteMoved(decode(words));
                    storeWords(to.state, words);
                } else {
                    to.state = std::move(from.state);
                    from.state = SlotState{};
                    noteMoved(heldState(to.state));
                }
                {  // `upper` is unpublished: its locks are free
                    const SlotMetaGuard toGuard(upper[g].meta[i]);
                    upper[g].meta[i].setLength(key.length);
                }
                setTag(upper[g], i, tag);
                from.key.assign(KeyBytes{});
                fromMeta.setLength(0);
                setTag(segment[g], i, 0);
            }
        }
        for (std::size_t e = base; e < end; ++e) {
            const bool moves = e >= cut;
            widths_[e].store(static_cast<std::uint16_t>(moves ? end - cut : cut - base),
                             std::memory_order_relaxed);
            if (moves) {
                directory_[e].store(upper, std::memory_order_release);
            }
        }
        const std::size_t count = segmentCount_.load(std::memory_order_relaxed);
        RATELIMIT_ASSUME(count < shape_.maxSegments());  // each split narrows a run of entries
        segments_[count] = upper;
        segmentCount_.store(count + 1, std::memory_order_release);
        for (std::size_t g = 0; g < shape_.segmentGroups; ++g) {
            segment[g].insertLock.unlock();
        }
    }

    RATELIMIT_COLD Group* newSegment() {
        // NOLINTNEXTLINE(cppcoreguidelines-owning-memory): segmentMemory_ owns it
        return ::new (segmentMemory_.take()) Group[shape_.segmentGroups]{};
    }

    /// The latest time a key's state was written at: a pass over every slot and spill entry,
    /// each under its lock. A key that moves while the pass runs, to its other group
    /// (`moveKey`) or to a segment split off after the pass counted them (`split`), may be
    /// passed over in both places: every move notes its state's last write (`noteMoved`) under
    /// the insert lock of the group it leaves, and the pass reads each group under that lock,
    /// so a move it passed over was noted before the pass ends.
    RATELIMIT_COLD Tick latestWrite() RATELIMIT_NO_THREAD_SAFETY_ANALYSIS {
        Tick latest = kInt64Min;
        const auto seen = [&latest](const typename M::State& state) {
            const Tick t = M::lastWrite(state);
            latest = t > latest ? t : latest;
        };
        const std::size_t count = segmentCount_.load(std::memory_order_acquire);
        for (std::size_t s = 0; s < count; ++s) {
            for (std::size_t gi = 0; gi < shape_.segmentGroups; ++gi) {
                Group& g = segments_[s][gi];
                const SlotMetaGuard insert(g.insertLock);
                for (std::size_t i = 0; i < kGroupSlots; ++i) {
                    if (tagAt(g, i) == 0) {
                        continue;
                    }
                    const SlotMetaGuard guard(g.meta[i]);
                    seen(heldState(g.slots[i].state));
                }
            }
        }
        for (std::size_t i = 0; i < keyspace_->options.spillEntries; ++i) {
            const SlotGuard guard(spill_[i].lock);
            seen(spill_[i].state);
        }
        const Tick moved = movedLatest_.load(std::memory_order_relaxed);
        return moved > latest ? moved : latest;
    }

    /// Frees up to kSweepPerCall slots whose keys are fresh, so `maxKeys` counts
    /// only keys in use. Never waits for a lock: a busy slot is simply skipped.
    RATELIMIT_COLD void sweep(Tick now) {
        sweeps_.fetch_add(1, std::memory_order_relaxed);
        sweptSlots_.fetch_add(kSweepPerCall, std::memory_order_relaxed);
        constexpr std::size_t kSweep = kSweepPerCall;
        const std::size_t segmentSlots = shape_.segmentGroups * kGroupSlots;
        const std::size_t count = segmentCount_.load(std::memory_order_acquire);
        const std::uint64_t run =
            sweepRuns_.fetch_add(1, std::memory_order_relaxed) % (count * segmentSlots / kSweep);
        const std::uint64_t first = run * kSweep;
        Group& g = segments_[first / segmentSlots][(first % segmentSlots) / kGroupSlots];
        if (!g.insertLock.try_lock()) {
            return;
        }
        for (std::uint64_t i = first % kGroupSlots; i < first % kGroupSlots + kSweep; ++i) {
            if (tagAt(g, i) == 0 || !g.meta[i].try_lock()) {
                continue;
            }
            probe_.slotLocked(true);
            SlotState& state = g.slots[i].state;
            if (takeIfReclaimable(state, now)) {
                if constexpr (!kPairs) {
                    state = SlotState{};  // a bucket's stays sealed
                }
                setTag(g, i, 0);
                tracked_.fetch_sub(1, std::memory_order_relaxed);
            }
            g.meta[i].unlock();
        }
        g.insertLock.unlock();
    }

    RATELIMIT_COLD void notify(MemoryEvent event) const {
        if (keyspace_->options.onEvent) {
            keyspace_->options.onEvent(event, name());
        }
        keyspace_->listeners.tellEach([&](DecisionListener& l) { l.onMemoryEvent(event, name()); });
    }

    [[nodiscard]] std::size_t segmentBytes() const noexcept {
        return shape_.segmentGroups * sizeof(Group);
    }

    [[nodiscard]] std::size_t fixedBytes() const noexcept {
        return sizeof(*this) +
               shape_.maxSegments() *
                   (sizeof(std::atomic<Group*>) + sizeof(std::atomic<std::uint16_t>) +
                    sizeof(void*)) +  // entry, width, segment
               segmentMemory_.chunkListBytes() +
               keyspace_->options.spillEntries * sizeof(SpillEntry);
    }

    /// Whether a key's state under `quota` may not fit its slot's words (`kPackedWords`).
    static bool holdsWhole(const QuotaOf<M>& quota) noexcept {
        if constexpr (kWindowWords) {
            const ModelRange range = M::range(quota);
            return !WindowWords<typename M::State>::fitsEvery(range.span - 1, range.units);
        } else if constexpr (kCounterWords) {
            return true;  // a key's state after a clock step back, until it is fresh
        } else {
            return false;
        }
    }

    [[nodiscard]] std::size_t heapBytes() const noexcept {
        if constexpr (HasHeapBound<M>) {
            return M::heapBytes(epochs_.current().value);
        } else if constexpr (kPackedWords) {
            return mayHoldWhole_.load(std::memory_order_relaxed) ? sizeof(typename M::State) : 0;
        } else {
            return 0;
        }
    }

    static_assert(kSweepPerCall <= kGroupSlots && kGroupSlots % kSweepPerCall == 0,
                  "a sweep stays within one group");

    Ref<MemoryKeyspace> keyspace_;
    LimitEpochs<QuotaOf<M>> epochs_;
    /// `convertedState<M>`, set by the first change: through a pointer, so a file that never
    /// changes a limit never compiles the conversion (no state is older than the first epoch).
    std::atomic<typename M::State (*)(const typename M::State&, const QuotaOf<M>&,
                                      const QuotaOf<M>&, Tick)>
        carry_{nullptr};
    Tick reclaimLag_;  ///< how far before a caller's time an entry must already be fresh
    TableShape shape_;
    /// Where the segments live. `take` and `takeFilled` under `splitLock_` (or in the
    /// constructor).
    SegmentMemory segmentMemory_;
    /// Entry e names the groups of the segment that holds the keys placed at e (`placeKey`);
    /// a segment is named by consecutive entries, as many as its width. Changed only by
    /// `split`, under `splitLock_` and the split segment's insert locks.
    HeapArray<std::atomic<Group*>> directory_;
    /// How many entries name each entry's segment: 2^kMaxDirectoryBits at most.
    HeapArray<std::atomic<std::uint16_t>> widths_;
    HeapArray<Group*> segments_;  ///< in the order they were made
    std::atomic<std::size_t> segmentCount_{0};
    /// The segments that fit `kCachedTableBytes` (`outgrowsCache`).
    const std::size_t cachedSegments_;
    SlotLock splitLock_;
    HeapArray<SpillEntry> spill_;
    /// Bucket slots are stepped by compare-and-swap, their words marked (see "Bucket slots").
    const bool swaps_;
    /// A table of packed states has held a limit under which a state may be held whole on the
    /// heap (`kPackedWords`): its byte bound counts that state. Never cleared: states made under
    /// the limit may outlive it.
    std::atomic<bool> mayHoldWhole_;
    /// A sliding counter's words are read by the period of their state's limit
    /// (`periodOf`): set, never cleared, once a limit of another period than the first was set.
    const Divisor firstPeriod_;
    std::atomic<bool> periodChanged_{false};
    std::atomic<std::size_t> tracked_{0};
    /// Where the next sweep starts, in runs of kSweepPerCall slots: counted in runs, so that
    /// its wrap at 2^64 (not a multiple of 7 slots) cannot start a run inside another.
    std::atomic<std::uint64_t> sweepRuns_{0};
    std::atomic<std::uint64_t> sweeps_{0};
    std::atomic<std::uint64_t> sweptSlots_{0};
    std::atomic<std::uint64_t> moves_{0};
    std::atomic<Tick> movedLatest_{kInt64Min};  ///< the latest write of a moved state
    std::atomic<std::uint64_t> spilledCalls_{0};
    std::atomic<bool> spilling_{false};
    [[no_unique_address]] Probe probe_;  // no bytes, and no code, for NoSlotProbe
};

}  // namespace detail
}  // namespace v1
}  // namespace ratelimit
