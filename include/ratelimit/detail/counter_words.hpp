#pragma once

// A sliding counter's state as a memory table's slot keeps it: 24 bytes instead of the model's
// 32, so that a sliding-counter key costs about what a bucket's does.

#include <cstdint>
#include <utility>

#include <ratelimit/detail/checked_math.hpp>
#include <ratelimit/detail/inline.hpp>

namespace ratelimit {
inline namespace v1 {
namespace detail {

/// A state of four 64-bit fields, `last`, `into`, `previous` and `current`
/// (`SlidingCounterModel::State`), in three words: `last`, `into`, then the two counts in 32
/// bits each. They always fit for a limit of fewer than 2^32 units (`fitsEvery`). A state whose
/// counts do not fit is held whole on the heap, so every state stays exact; the words then hold
/// its address, and `into`'s word all ones, which no state's `into` (0 ≤ into < period) is.
/// Zero words are the model's fresh state.
/// Thread safety: thread-compatible (the table reads and writes it under the slot's lock).
template <class State>
class CounterWords {
public:
    CounterWords() = default;
    ~CounterWords() { release(); }
    CounterWords(const CounterWords&) = delete;
    CounterWords& operator=(const CounterWords&) = delete;
    CounterWords(CounterWords&& other) noexcept
        : head_(std::exchange(other.head_, 0)),
          into_(std::exchange(other.into_, 0)),
          counts_(std::exchange(other.counts_, 0)) {}
    CounterWords& operator=(CounterWords&& other) noexcept {
        if (this != &other) {
            release();
            head_ = std::exchange(other.head_, 0);
            into_ = std::exchange(other.into_, 0);
            counts_ = std::exchange(other.counts_, 0);
        }
        return *this;
    }

    /// Whether the state is in the words, not on the heap.
    [[nodiscard]] bool packed() const noexcept { return into_ != kOnHeap; }

    [[nodiscard]] State get() const noexcept { return packed() ? unpack() : *onHeap(); }

    /// The state, where `packed()`.
    [[nodiscard]] State unpack() const noexcept {
        RATELIMIT_ASSUME(packed());
        State s{};
        s.last = static_cast<std::int64_t>(head_);
        s.into = static_cast<std::int64_t>(into_);
        s.previous = static_cast<std::int64_t>(counts_ >> kCountBits);
        s.current = static_cast<std::int64_t>(counts_ & kCountMask);
        return s;
    }

    /// Throws: `std::bad_alloc` when a state that does not fit finds no memory (the words are
    /// then unchanged).
    void set(const State& s) {
        if (packed()) {
            pack(s);
        } else {
            setCold(s);
        }
    }

    /// `set`, where `packed()`: inlined, and the allocation out of line, so that the usual step
    /// makes no call.
    RATELIMIT_INLINE void pack(const State& s) {
        RATELIMIT_ASSUME(packed());
        if (!fits(s)) [[unlikely]] {
            setCold(s);
            return;
        }
        store(s);
    }

    /// Whether every state with counts at most `largestCount` (at least 0) fits the words.
    static constexpr bool fitsEvery(Int128 largestCount) noexcept {
        return largestCount >= 0 && largestCount <= Int128{kCountMask};
    }

private:
    static constexpr unsigned kCountBits = 32;
    static constexpr std::uint64_t kCountMask = (std::uint64_t{1} << kCountBits) - 1;
    static constexpr std::uint64_t kOnHeap = ~std::uint64_t{0};

    static bool fits(const State& s) noexcept {
        const auto counts =
            static_cast<std::uint64_t>(s.previous) | static_cast<std::uint64_t>(s.current);
        return s.into >= 0 && (counts >> kCountBits) == 0;
    }

    void store(const State& s) noexcept {
        head_ = static_cast<std::uint64_t>(s.last);
        into_ = static_cast<std::uint64_t>(s.into);
        counts_ = (static_cast<std::uint64_t>(s.previous) << kCountBits) |
                  static_cast<std::uint64_t>(s.current);
    }

    [[nodiscard]] State* onHeap() const noexcept {
        // NOLINTNEXTLINE(*-reinterpret-cast,performance-no-int-to-ptr): the address setCold stored
        return reinterpret_cast<State*>(static_cast<std::uintptr_t>(head_));
    }

    /// `set` for a state that goes to the heap, or comes back from it, or stays there.
    RATELIMIT_COLD void setCold(const State& s) {
        if (fits(s)) {
            release();
            store(s);
        } else if (!packed()) {
            *onHeap() = s;
        } else {
            // NOLINTNEXTLINE(cppcoreguidelines-owning-memory): these words own it (`release`)
            const State* const block = new State(s);
            // NOLINTNEXTLINE(*-reinterpret-cast): the words hold the block's address
            head_ = reinterpret_cast<std::uintptr_t>(block);
            into_ = kOnHeap;
            counts_ = 0;
        }
    }

    RATELIMIT_COLD void release() noexcept {
        if (!packed()) {
            delete onHeap();  // NOLINT(cppcoreguidelines-owning-memory): allocated by setCold
            head_ = 0;
            into_ = 0;
            counts_ = 0;
        }
    }

    std::uint64_t head_ = 0;    ///< `last`, or the address of the state on the heap
    std::uint64_t into_ = 0;    ///< `into`, or `kOnHeap`
    std::uint64_t counts_ = 0;  ///< `previous` in the high 32 bits, `current` in the low
};

}  // namespace detail
}  // namespace v1
}  // namespace ratelimit
