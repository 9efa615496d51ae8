#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include <ratelimit/detail/function.hpp>

namespace ratelimit {
inline namespace v1 {

/// What the memory storage tells its hook.
enum class MemoryEvent {
    kSpillStarted,  ///< a new key found no free entry and now shares a spill entry
    kSpillEnded,    ///< a new key got an entry of its own again
};

/// Counters of a `MemoryStorage`, summed over its tables.
struct MemoryStats {
    std::size_t trackedKeys = 0;     ///< entries holding a key (fresh ones included until reused)
    std::size_t allocatedBytes = 0;  ///< table memory allocated now (sliding-log runs excluded)
    std::size_t byteBound = 0;       ///< the most the tables can ever allocate, runs included
    std::uint64_t spilledCalls = 0;  ///< calls answered from a spill entry
    std::uint64_t sweeps = 0;        ///< calls that swept
    std::uint64_t sweptSlots = 0;    ///< slots those calls examined (≤ kSweepPerCall each)
    std::uint64_t movedKeys = 0;     ///< entries moved to their key's other group for a new key
    /// Table memory the kernel made huge pages when asked (`MemoryStorageOptions::hugePages`).
    std::size_t hugePageBytes = 0;
};

/// Options of a `MemoryStorage` (`MemoryStorage::Options`). Fields only ever get added at the
/// end.
struct MemoryStorageOptions {
    /// Most live entries of each limiter of this storage (limiters of one name and algorithm
    /// share a table, and so this bound). 1 … 2^31. Each limiter's table grows with its keys up
    /// to room for it: 16 slots per 13 keys.
    std::size_t maxKeys = 1'000'000;
    /// Spill entries per limiter, shared by keys that find no free entry. 1 … 2^16.
    std::size_t spillEntries = 64;
    /// Hash seed; 0 draws one from the operating system per storage.
    std::uint64_t seed = 0;
    /// Called (from the calling thread, outside every lock) when spilling starts or ends, with
    /// the limiter's name. Must not throw.
    std::function<void(MemoryEvent, std::string_view limiterName)> onEvent{};
    /// Linux, where the kernel offers 2 MiB transparent huge pages: a table that can fill a
    /// 2 MiB chunk with segments cuts them from 2 MiB chunks and, as each chunk fills, asks the
    /// kernel to back it with a huge page (`MADV_COLLAPSE`), so lookups among many keys miss
    /// the TLB less often (10^6 keys: 5-14 % faster). Memory still follows the keys (0.6 % more).
    /// The call whose new key fills a chunk waits for the kernel to copy it, a few
    /// milliseconds, as do calls on that chunk's keys meanwhile; off, every segment is
    /// allocated on its own and nothing waits.
    bool hugePages = true;
};

}  // namespace v1
}  // namespace ratelimit
