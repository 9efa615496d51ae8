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

/// Whether, and when, a memory table's filled 2 MiB chunks become huge pages
/// (`MemoryStorageOptions::hugePages`; docs/semantics.md, "Huge pages").
enum class HugePages {
    /// Every segment allocated on its own; nothing asked of the kernel.
    kOff,
    /// The call whose new key fills a chunk asks the kernel to copy it into a huge page then
    /// (`MADV_COLLAPSE`). Lookups among many keys are faster from that call on. That call waits
    /// for the kernel to find a huge page (where it must first compact memory, several
    /// milliseconds) and to copy the chunk; calls on that chunk's keys wait during the copy.
    kOnCall,
    /// A filled chunk is only marked for huge pages (`MADV_HUGEPAGE`, microseconds), and the
    /// kernel's `khugepaged` thread copies it in its own time (by default it scans 16 MiB of the
    /// whole system's eligible memory every 10 s). No call asks for a copy or waits to find a
    /// huge page; a call on the chunk's keys while the kernel copies it waits, as under
    /// `kOnCall`. Lookups speed up as the kernel gets there.
    kBackground,
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
    /// Table memory the kernel made huge pages when asked (`HugePages::kOnCall`); not what its
    /// `khugepaged` collapses (`HugePages::kBackground`: see the process's `AnonHugePages`).
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
    /// 2 MiB chunk with segments cuts them from 2 MiB chunks, and each chunk, once filled,
    /// becomes a huge page, when `HugePages` says; lookups among many keys then miss the TLB
    /// less often (10^6 keys: 5-14 % faster). Memory still follows the keys (0.6 % more).
    /// `kOff`, or elsewhere, every segment is allocated on its own.
    HugePages hugePages = HugePages::kOnCall;
};

}  // namespace v1
}  // namespace ratelimit
