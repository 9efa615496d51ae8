#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

#include <ratelimit/memory_options.hpp>

#if defined(__linux__)
#    include <fcntl.h>
#    include <sys/mman.h>
#    include <unistd.h>
#endif

#if defined(__SANITIZE_ADDRESS__)
#    define RATELIMIT_DETAIL_ASAN 1
#elif defined(__has_feature)
#    if __has_feature(address_sanitizer)
#        define RATELIMIT_DETAIL_ASAN 1
#    endif
#endif

namespace ratelimit {
inline namespace v1 {
namespace detail {

#if defined(__linux__)
/// The start of a small file, or "" where it cannot be read.
struct SmallFile {
    explicit SmallFile(const char* path) noexcept {
        const int fd = ::open(path, O_RDONLY | O_CLOEXEC);  // NOLINT: POSIX's variadic open
        if (fd >= 0) {
            const ::ssize_t n = ::read(fd, text.data(), text.size() - 1);
            (void)::close(fd);
            text[n > 0 ? static_cast<std::size_t>(n) : 0] = '\0';
        }
    }
    std::array<char, 64> text{};
};
#endif

/// Whether this process may ask for 2 MiB huge pages: Linux with transparent huge pages of
/// 2 MiB not turned off (`never`), and not under AddressSanitizer (whose redzones and leak
/// scans cover the heap, not mapped chunks). Reads two sysfs files.
inline bool hugePagesOffered() noexcept {
#if defined(__linux__) && !defined(RATELIMIT_DETAIL_ASAN)
    constexpr unsigned long long kHugePage = 2U << 20U;
    const SmallFile size("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size");
    const SmallFile enabled("/sys/kernel/mm/transparent_hugepage/enabled");
    return std::strtoull(size.text.data(), nullptr, 10) == kHugePage && enabled.text[0] != '\0' &&
           std::strstr(enabled.text.data(), "[never]") == nullptr;
#else
    return false;
#endif
}

/// The memory of a memory table's segments (docs/semantics.md, "Huge pages").
///
/// Asked to (`MemoryStorageOptions::hugePages` not `kOff`, and `hugePagesOffered`), a table that
/// can fill a 2 MiB chunk with 16 or more segments cuts its segments, one after another, from
/// chunks of 2 MiB aligned to 2 MiB, mapped from the kernel. A chunk starts on small pages, so
/// memory follows the keys. Once a chunk's last segment is made, the table asks the kernel to
/// back it with one huge page (`makeHuge`), then or in the kernel's own time: a lookup among
/// many keys then misses the TLB less often (bench/README.md, "Huge pages for filled chunks").
/// Otherwise each segment is allocated on its own, and freed by `give`.
///
/// Thread safety: `take` and `takeFilled` under the table's split lock (or in its constructor);
/// the rest anywhere.
class SegmentMemory {
public:
    /// The huge page size of x86-64 and of arm64 with 4 KiB pages.
    static constexpr std::size_t kChunkBytes = std::size_t{2} << 20;
    /// Segments a chunk must hold at least; fewer would leave up to a segment's bytes of each
    /// chunk unused, resident once it is a huge page.
    static constexpr std::size_t kMinSegmentsPerChunk = 16;

    /// Memory for at most `maxSegments` segments of `segmentBytes` each, aligned to `alignment`
    /// (a power of two, at most 64), cut from chunks made huge pages as `hugePages` says, if
    /// not `kOff` and the sizes allow.
    SegmentMemory(std::size_t segmentBytes, std::size_t alignment, std::size_t maxSegments,
                  HugePages hugePages)
        : segmentBytes_(roundUp(segmentBytes, alignment)),
          alignment_(alignment),
          maxSegments_(maxSegments),
          hugePages_(hugePages),
          perChunk_(segmentsPerChunk(segmentBytes_, maxSegments, hugePages != HugePages::kOff)),
          chunkCapacity_(perChunk_ == 0 ? 0 : (maxSegments + perChunk_ - 1) / perChunk_),
          chunks_(chunkCapacity_ == 0 ? nullptr : new void* [chunkCapacity_] {}) {}  // NOLINT

    /// Unmaps the chunks; segments allocated on their own must have been given back (`give`).
    ~SegmentMemory() {
#if defined(__linux__)
        for (std::size_t i = 0; i < chunkCount_; ++i) {
            (void)::munmap(chunks_[i], kChunkBytes);
        }
#endif
        delete[] chunks_;  // NOLINT(cppcoreguidelines-owning-memory): owned here
    }
    SegmentMemory(const SegmentMemory&) = delete;
    SegmentMemory& operator=(const SegmentMemory&) = delete;
    SegmentMemory(SegmentMemory&&) = delete;
    SegmentMemory& operator=(SegmentMemory&&) = delete;

    /// Uninitialised memory for one more segment, of `segmentBytes` aligned as asked. At most
    /// `maxSegments` calls. Throws: `std::bad_alloc`.
    [[nodiscard]] void* take() {
        if (perChunk_ == 0) {
            return ::operator new (segmentBytes_, std::align_val_t{alignment_});
        }
        if (chunkCount_ == 0 || usedInChunk_ == perChunk_) {
            chunks_[chunkCount_] = mapChunk();
            ++chunkCount_;
            usedInChunk_ = 0;
        }
        void* const chunk = chunks_[chunkCount_ - 1];
        void* const segment = static_cast<char*>(chunk) + usedInChunk_ * segmentBytes_;
        if (++usedInChunk_ == perChunk_) {
            filled_ = chunk;
            filledChunks_.fetch_add(1, std::memory_order_relaxed);
        }
        return segment;
    }

    /// Frees a segment from `take` that was allocated on its own; a chunk's stay until the end.
    void give(void* segment) const noexcept {
        if (perChunk_ == 0) {
            ::operator delete (segment, std::align_val_t{alignment_});
        }
    }

    /// The chunk whose last segment the latest `take` cut, once: null if none. Its segments
    /// are made by then, so the caller may `makeHuge` it (outside its locks: that may copy the
    /// chunk, in milliseconds).
    [[nodiscard]] void* takeFilled() noexcept {
        void* const chunk = filled_;
        filled_ = nullptr;
        return chunk;
    }

    /// Marks `chunk` (from `takeFilled`; null does nothing) for a huge page, which the
    /// kernel's `khugepaged` makes in its own time, and where `HugePages::kOnCall`, asks the
    /// kernel to make it now, copying the chunk (`MADV_COLLAPSE`, Linux 6.1): calls on its keys
    /// meanwhile wait in the kernel; none is lost. Where the kernel cannot, the chunk stays on
    /// small pages, still marked.
    void makeHuge(void* chunk) noexcept {
#if defined(__linux__)
        if (chunk == nullptr) {
            return;
        }
        (void)::madvise(chunk, kChunkBytes, MADV_HUGEPAGE);  // clears MADV_NOHUGEPAGE
        if (hugePages_ != HugePages::kOnCall) {
            return;
        }
        collapseRequests_.fetch_add(1, std::memory_order_relaxed);
        if (::madvise(chunk, kChunkBytes, kMadvCollapse) == 0) {
            hugePageBytes_.fetch_add(kChunkBytes, std::memory_order_relaxed);
        }
#else
        (void)chunk;
#endif
    }

    /// Bytes of chunks the kernel made huge pages when `makeHuge` asked it to (not those
    /// `khugepaged` collapses later, nor a huge page the kernel splits under memory pressure).
    [[nodiscard]] std::size_t hugePageBytes() const noexcept {
        return hugePageBytes_.load(std::memory_order_relaxed);
    }

    /// Chunks `makeHuge` asked the kernel to make huge pages now, whether it could or not.
    [[nodiscard]] std::size_t collapseRequests() const noexcept {
        return collapseRequests_.load(std::memory_order_relaxed);
    }

    /// Whether segments are cut from chunks.
    [[nodiscard]] bool chunked() const noexcept { return perChunk_ != 0; }
    /// Segments a chunk holds: 0 where segments are allocated one by one.
    [[nodiscard]] std::size_t segmentsPerChunk() const noexcept { return perChunk_; }
    /// The bytes of the list of chunks this object keeps.
    [[nodiscard]] std::size_t chunkListBytes() const noexcept {
        return chunkCapacity_ * sizeof(void*);
    }
    /// Bytes beside the segments that a huge page makes resident: each filled chunk's end past
    /// its last segment (0.6 % of a chunk at the default `maxKeys`), counted once the chunk is
    /// filled, whether the kernel collapsed it then, does later (`khugepaged`), or never.
    [[nodiscard]] std::size_t slackBytes() const noexcept {
        return filledChunks_.load(std::memory_order_relaxed) * chunkSlack();
    }
    /// The most `slackBytes` can reach: every chunk that `maxSegments` segments fill.
    [[nodiscard]] std::size_t maxSlackBytes() const noexcept {
        return perChunk_ == 0 ? 0 : maxSegments_ / perChunk_ * chunkSlack();
    }

private:
#if defined(MADV_COLLAPSE)
    static constexpr int kMadvCollapse = MADV_COLLAPSE;
#else
    static constexpr int kMadvCollapse = 25;  // Linux's; glibc's headers before 2.37 leave it out
#endif

    [[nodiscard]] std::size_t chunkSlack() const noexcept {
        return kChunkBytes - perChunk_ * segmentBytes_;
    }

    static constexpr std::size_t roundUp(std::size_t n, std::size_t to) noexcept {
        return (n + to - 1) / to * to;
    }

    static std::size_t segmentsPerChunk(std::size_t segmentBytes, std::size_t maxSegments,
                                        bool chunks) noexcept {
        const std::size_t perChunk = kChunkBytes / segmentBytes;
        const bool fillsAChunk = maxSegments >= perChunk;
        return chunks && perChunk >= kMinSegmentsPerChunk && fillsAChunk ? perChunk : 0;
    }

    /// A chunk aligned to its size: mapped twice as large, its ends cut off. It starts on small
    /// pages even where the kernel backs every large enough mapping with huge pages
    /// (`transparent_hugepage=always`): one would make a table of a few keys cost 2 MiB.
    static void* mapChunk() {
#if defined(__linux__)
        void* const raw = ::mmap(nullptr, 2 * kChunkBytes, PROT_READ | PROT_WRITE,
                                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (raw == MAP_FAILED) {  // NOLINT(performance-no-int-to-ptr): the system's constant
            throw std::bad_alloc();
        }
        // Not std::bit_cast: clang-tidy 14's analyzer crashes on its remainder.
        // NOLINTNEXTLINE(cppcoreguidelines-pro-type-reinterpret-cast): the address's alignment
        const std::size_t past = reinterpret_cast<std::uintptr_t>(raw) % kChunkBytes;
        const std::size_t head = past == 0 ? 0 : kChunkBytes - past;
        char* const chunk = static_cast<char*>(raw) + head;
        if (head != 0) {
            (void)::munmap(raw, head);
        }
        (void)::munmap(chunk + kChunkBytes, kChunkBytes - head);
        (void)::madvise(chunk, kChunkBytes, MADV_NOHUGEPAGE);
        return chunk;
#else
        throw std::bad_alloc();               // not reached: no chunks off Linux (`hugePagesOffered`)
#endif
    }

    std::size_t segmentBytes_;
    std::size_t alignment_;
    std::size_t maxSegments_;
    HugePages hugePages_;
    std::size_t perChunk_;
    std::size_t chunkCapacity_;
    void** chunks_;
    std::size_t chunkCount_ = 0;
    std::size_t usedInChunk_ = 0;  ///< segments cut from the last chunk
    void* filled_ = nullptr;
    std::atomic<std::size_t> filledChunks_{0};
    std::atomic<std::size_t> hugePageBytes_{0};
    std::atomic<std::size_t> collapseRequests_{0};
};

}  // namespace detail
}  // namespace v1
}  // namespace ratelimit
