#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>

#include <ratelimit/detail/inline.hpp>

namespace ratelimit {
inline namespace v1 {
namespace detail {

/// One run of a sliding log: `count` entries made at the tick `time`; `count` is at least 1.
struct LogRun {
    std::int64_t time = 0;
    std::int64_t count = 0;
};

/// A sliding log's runs, oldest first, and the sum of their counts, in 16 bytes. A
/// `std::vector` takes 24 bytes in every key's entry, and `<vector>` was the largest standard
/// header left in <ratelimit/limiter.hpp>'s include graph (bench/README.md, "Compile time").
/// It holds fewer than 2^26 runs (the log holds at most 2^20 + 1).
///
/// - **One run in place.** Most keys of a log hold one run, held in the 16 bytes themselves: no
///   heap chunk and no second cache line. The second run moves both to a room on the heap, which
///   the log keeps until it is destroyed, moved from or assigned to, so a key whose runs come and
///   go does not allocate on every call. A run's count lies in [1, 2^63): the second word tells
///   a run in place (its count) from the empty log (0) and from the heap form (negative: the top
///   bit set over the room's size and shape).
/// - **The total.** The step needs the sum of the counts still in the window. Summing them was
///   217 of its 388 instructions with 64 runs held (bench/README.md, "The sliding log: one run in
///   place, and the sum of its runs"); the log keeps the sum of all its runs instead, so the step
///   subtracts the few expired ones. On the heap the total is the `count` of the slot just
///   before the first run (the allocation has one slot more for it), next to the run the step
///   reads first.
/// - **Dropping the first runs moves nothing.** Their slots stay free in the room before the
///   rest. An append at the room's end moves the runs down to its start when there are free
///   slots, and doubles the room only when it is full, so the room is a power of two at most
///   twice the most runs held or reserved at once. A full log drops its oldest run for every new
///   one: in a room of R for its N runs it moves them once every R − N calls (every 64 for the
///   default 64 runs in a room of 128), and on every call where N fills the room
///   (`maxRunsPerKey` + 1 a power of two).
/// Thread safety: thread-compatible.
class RunLog {
public:
    RunLog() noexcept = default;
    RunLog(const RunLog& other) {
        reserve(other.size());
        for (const LogRun& run : other) {
            append(run);
        }
    }
    RunLog(RunLog&& other) noexcept : word_(std::exchange(other.word_, LogRun{})) {}
    RunLog& operator=(const RunLog& other) {
        if (this != &other) {
            RunLog copy(other);
            swap(copy);
        }
        return *this;
    }
    RunLog& operator=(RunLog&& other) noexcept {
        RunLog taken(std::move(other));
        swap(taken);
        return *this;
    }
    ~RunLog() {
        if (onHeap()) {
            delete[] allocation();  // NOLINT(cppcoreguidelines-owning-memory): owned here
        }
    }

    [[nodiscard]] bool empty() const noexcept { return size() == 0; }
    [[nodiscard]] std::size_t size() const noexcept {
        const std::uint64_t tail = tailWord();
        return (tail & kHeapBit) != 0 ? static_cast<std::uint32_t>(tail) : (tail != 0 ? 1 : 0);
    }
    /// Runs it holds without allocating: 1 in place.
    [[nodiscard]] std::size_t capacity() const noexcept {
        return std::size_t{1} << (onHeap() ? shape() & kLog2Mask : 0);
    }
    /// The sum of the runs' counts.
    [[nodiscard]] std::int64_t total() const noexcept {
        return onHeap() ? heapData()[-1].count : word_.count;
    }

    // In place, only index 0 is held: neither accessor indexes past the member, where GCC's
    // -Warray-bounds would look for the run at -O3.
    const LogRun& operator[](std::size_t i) const noexcept {
        return onHeap() ? heapData()[i] : word_;
    }
    [[nodiscard]] const LogRun& back() const noexcept {
        return onHeap() ? heapData()[size() - 1] : word_;
    }
    [[nodiscard]] const LogRun* begin() const noexcept { return onHeap() ? heapData() : &word_; }
    [[nodiscard]] const LogRun* end() const noexcept { return begin() + size(); }

    /// Makes room for `n` runs in all (n < 2^26). Where the room already holds `n` with free
    /// slots before the first run, it stays: an append at its end moves the runs down instead of
    /// allocating.
    void reserve(std::size_t n) {
        if (n <= capacity()) {
            return;
        }
        const std::size_t grown = std::bit_ceil(n);
        // NOLINTNEXTLINE(cppcoreguidelines-owning-memory): owned here, freed as allocation()
        auto* const moved = new LogRun[grown + 1];
        const std::size_t held = size();
        moved[0].count = total();
        std::memcpy(moved + 1, begin(), held * sizeof(LogRun));
        if (onHeap()) {
            delete[] allocation();  // NOLINT(cppcoreguidelines-owning-memory): owned here
        }
        setHeap(moved + 1, held, static_cast<std::uint32_t>(std::countr_zero(grown)));
    }

    /// Appends `run`, newer than the last (its count in [1, 2^63)).
    void append(const LogRun& run) {
        RATELIMIT_ASSUME(run.count >= 1);
        if (!onHeap()) {
            if (word_.count == 0) {
                word_ = run;
                return;
            }
            reserve(2);
        }
        std::size_t held = size();
        if (front() + held == capacity()) {
            makeRoom();
        }
        LogRun* const data = heapData();
        data[held++] = run;
        data[-1].count += run.count;
        setSize(held);
    }

    /// Adds `cost` to the newest run's count (the log is not empty).
    void addToNewest(std::int64_t cost) noexcept {
        if (onHeap()) {
            heapData()[size() - 1].count += cost;
            heapData()[-1].count += cost;
        } else {
            word_.count += cost;
        }
    }

    /// Takes `n` (1 to its count) from the newest run's count, and drops the run at 0.
    void takeFromNewest(std::int64_t n) noexcept {
        RATELIMIT_ASSUME(n >= 1);
        if (!onHeap()) {
            word_.count -= n;
            if (word_.count == 0) {
                word_ = {};
            }
            return;
        }
        LogRun* const data = heapData();
        const std::size_t held = size();
        data[held - 1].count -= n;
        data[-1].count -= n;
        if (data[held - 1].count == 0) {
            setSize(held - 1);
        }
    }

    /// `append(run)` then `mergeOldest()` (the log is not empty), in one pass: a full log takes
    /// this path on every call at a new time, and the two apart re-encode the tail word twice.
    void appendMergingOldest(const LogRun& run) {
        RATELIMIT_ASSUME(run.count >= 1);
        if (!onHeap()) {
            word_ = LogRun{run.time, word_.count + run.count};  // the one run, merged into
            return;
        }
        const std::size_t held = size();
        if (front() + held == capacity()) {
            makeRoom();
        }
        LogRun* const data = heapData();
        data[held] = run;
        data[1].count += data[0].count;
        data[0].count = data[-1].count + run.count;  // the oldest's slot takes the total
        LogRun* const first = data + 1;
        std::memcpy(&word_.time, &first, kPointerBytes);
        word_.count += std::int64_t{1} << (32U + kFrontShift);  // one more free slot in front
    }

    /// Adds the oldest run's count to the second oldest and drops the oldest (two runs or more):
    /// the total stays.
    void mergeOldest() noexcept {
        LogRun* const data = heapData();
        data[1].count += data[0].count;
        dropFront(1, data[-1].count);
    }

    /// Drops the first `n` runs (n <= size()), keeping the rest in order, in place.
    void eraseFront(std::size_t n) noexcept {
        if (n == 0) {
            return;
        }
        if (!onHeap()) {
            word_ = {};  // n == 1: the one run
            return;
        }
        const LogRun* const data = heapData();
        std::int64_t dropped = 0;
        for (std::size_t i = 0; i < n; ++i) {
            dropped += data[i].count;
        }
        dropFront(n, data[-1].count - dropped);
    }

private:
    /// On the heap, `word_.time` holds the pointer to the first run and `word_.count` the tail
    /// word: the size (low 32 bits) and the shape (the next 31) under `kHeapBit`. The shape: the
    /// base-2 logarithm of the room in its low bits, above them how many free slots lie before
    /// the first run. The allocation is the total's slot, then the room.
    static constexpr std::uint64_t kHeapBit = std::uint64_t{1} << 63;
    static constexpr unsigned kFrontShift = 5;
    static constexpr std::uint32_t kLog2Mask = (1U << kFrontShift) - 1;
    static constexpr std::size_t kPointerBytes = sizeof(void*);
    static_assert(kPointerBytes <= sizeof(LogRun::time));

    [[nodiscard]] std::uint64_t tailWord() const noexcept {
        return static_cast<std::uint64_t>(word_.count);
    }
    [[nodiscard]] bool onHeap() const noexcept { return (tailWord() & kHeapBit) != 0; }
    [[nodiscard]] std::uint32_t shape() const noexcept {
        return static_cast<std::uint32_t>((tailWord() & ~kHeapBit) >> 32);
    }
    [[nodiscard]] std::size_t front() const noexcept { return shape() >> kFrontShift; }
    [[nodiscard]] LogRun* heapData() const noexcept {
        LogRun* data = nullptr;
        std::memcpy(&data, &word_.time, kPointerBytes);  // a pointer's bytes, stored by setHeap
        return data;
    }
    [[nodiscard]] LogRun* room() const noexcept { return heapData() - front(); }
    [[nodiscard]] LogRun* allocation() const noexcept { return room() - 1; }

    void setHeap(LogRun* data, std::size_t size, std::uint32_t shape) noexcept {
        std::memcpy(&word_.time, &data, kPointerBytes);
        word_.count = static_cast<std::int64_t>(kHeapBit | std::uint64_t{shape} << 32 | size);
    }
    void setSize(std::size_t size) noexcept { setHeap(heapData(), size, shape()); }

    /// Drops the first `n` runs on the heap, leaving `total` for the rest.
    void dropFront(std::size_t n, std::int64_t total) noexcept {
        const std::size_t held = size();
        if (n == held) {
            LogRun* const start = room();  // empty: the whole room is free again
            start[-1].count = 0;
            setHeap(start, 0, shape() & kLog2Mask);
            return;
        }
        LogRun* const first = heapData() + n;
        first[-1].count = total;  // a dropped run's slot now
        setHeap(first, held - n, shape() + (static_cast<std::uint32_t>(n) << kFrontShift));
    }

    /// The last slot is taken: the runs move down to the room's start where slots before them
    /// are free (one `memmove`), the total with them, else the room doubles.
    void makeRoom() {
        if (front() == 0) {
            reserve(2 * capacity());
            return;
        }
        LogRun* const start = room();
        const std::size_t held = size();
        start[-1].count = total();
        std::memmove(start, heapData(), held * sizeof(LogRun));
        setHeap(start, held, shape() & kLog2Mask);
    }

    void swap(RunLog& other) noexcept { std::swap(word_, other.word_); }

    LogRun word_;  ///< the run in place, or the heap form's pointer and tail word
};

}  // namespace detail
}  // namespace v1
}  // namespace ratelimit
